import WalletService
import WalletStore

/// `wallet migrate`: applies the migrations this build carries.
enum MigrateCommand {
    static let help = """
        usage: wallet migrate [--database-url URL] [--data-dir DIR]

        Applies the migrations this build carries; running it again changes nothing.
        \(WalletCommand.databaseOptions)
        """

    static func run(_ arguments: [String], environment: [String: String]) throws -> Int32 {
        guard let invocation = try WalletCommand.invocation(arguments, environment: environment,
                                                            values: ["database-url", "data-dir"], help: help) else { return 0 }
        let applied = try Administration.withDatabase(invocation.configuration, logger: invocation.logger) { try $0.migrate() }
        print(applied.isEmpty ? "database is up to date" : "applied: " + applied.joined(separator: ", "))
        return 0
    }
}
