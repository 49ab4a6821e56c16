import Logging
import WalletService

/// `wallet check`: the ledger's invariants, one line per violation.
enum CheckCommand {
    static let help = """
        usage: wallet check [--database-url URL] [--data-dir DIR]

        Runs wallet.check_invariants(): prints one line per violation and exits 1
        if there is any, 0 if the books balance.
        \(WalletCommand.databaseOptions)
        """

    static func run(_ arguments: [String], environment: [String: String]) throws -> Int32 {
        let options = try Options(arguments, values: ["database-url", "data-dir"], switches: [], help: help)
        if options.helpRequested {
            print(help)
            return 0
        }
        let configuration = try WalletCommand.loadConfiguration(environment: environment, flags: options.values)
        let logger = Logger(label: "wallet", level: configuration.logLevel)
        let violations = try Administration.withDatabase(configuration, logger: logger) { try $0.checkInvariants() }
        for violation in violations {
            print("\(violation.invariant)\t\(violation.subject)\t\(violation.detail)")
        }
        if violations.isEmpty { print("ok: no invariant is violated") }
        return violations.isEmpty ? 0 : 1
    }
}
