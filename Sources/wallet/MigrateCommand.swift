import Logging
import WalletService

/// `wallet migrate`: applies the migrations this build carries.
enum MigrateCommand {
    static let help = """
        usage: wallet migrate [--database-url URL] [--data-dir DIR]

        Applies the migrations this build carries; running it again changes nothing.
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
        let applied = try Administration.withDatabase(configuration, logger: logger) { try $0.migrate() }
        print(applied.isEmpty ? "database is up to date" : "applied: " + applied.joined(separator: ", "))
        return 0
    }
}
