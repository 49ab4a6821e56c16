import WalletService
import WalletStore

/// `wallet check`: the ledger's invariants, one line per violation.
enum CheckCommand {
    static let help = """
        usage: wallet check [--database-url URL] [--data-dir DIR]

        Runs wallet.check_invariants(): prints one line per violation and exits 1
        if there is any, 0 if the books balance.
        \(WalletCommand.databaseOptions)
        """

    static func run(_ arguments: [String], environment: [String: String]) throws -> Int32 {
        guard let invocation = try WalletCommand.invocation(arguments, environment: environment,
                                                            values: ["database-url", "data-dir"], help: help) else { return 0 }
        let violations = try Administration.withDatabase(invocation.configuration, logger: invocation.logger) { try $0.checkInvariants() }
        for violation in violations {
            print("\(violation.invariant)\t\(violation.subject)\t\(violation.detail)")
        }
        if violations.isEmpty { print("ok: no invariant is violated") }
        return violations.isEmpty ? 0 : 1
    }
}
