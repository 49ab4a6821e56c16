import WalletService
import WalletStore

/// `wallet check`: the ledger's invariants, one line per violation.
enum CheckCommand {
    static let help = """
        usage: wallet check [--full] [--database-url URL] [--data-dir DIR]

        Checks the ledger's invariants: prints one line per violation and exits 1
        if there is any, 0 if the books balance. By default it checks what was
        written since the last clean check (its checkpoint): the entries, and the
        wallets, credits, holds and lots they touch. A clean check stores a new
        checkpoint.
          --full               check the whole ledger (wallet.check_invariants()),
                               as it does when there is no checkpoint yet
        \(WalletCommand.databaseOptions)
        """

    static func run(_ arguments: [String], environment: [String: String]) throws -> Int32 {
        guard let invocation = try WalletCommand.invocation(arguments, environment: environment,
                                                            values: ["database-url", "data-dir"], switches: ["full"],
                                                            help: help) else { return 0 }
        let full = invocation.options.values["full"] != nil
        let run = try Administration.withDatabase(invocation.configuration, logger: invocation.logger) {
            try $0.checkLedger(full: full)
        }
        for violation in run.violations {
            print("\(violation.invariant)\t\(violation.subject)\t\(violation.detail)")
        }
        if run.violations.isEmpty { print("ok: no invariant is violated") }
        return run.violations.isEmpty ? 0 : 1
    }
}
