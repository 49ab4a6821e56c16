import Foundation
import Postgres
import WalletService
import WalletStore

/// `wallet psql`: psql on the database the other commands use, with the
/// admin scripts' arguments after `--`.
enum PsqlCommand {
    static let help = """
        usage: wallet psql [--database-url URL] [--data-dir DIR] [-- PSQL-ARGUMENTS...]

        Runs psql on WALLET_DATABASE_SESSION_URL, WALLET_DATABASE_URL or the
        embedded development database (started for the session when `wallet
        serve` is not running it), passing everything after `--` to psql, e.g.
          wallet psql -- -v ON_ERROR_STOP=1 -v flow_no=2000000123 -v reason='chargeback' -v operator='alice' -f Scripts/admin/refund.sql
        Exits with psql's status.
        \(WalletCommand.databaseOptions)
        """

    static func run(_ arguments: [String], environment: [String: String]) throws -> Int32 {
        let separator = arguments.firstIndex(of: "--")
        let own = Array(arguments[..<(separator ?? arguments.endIndex)])
        let passed = separator.map { Array(arguments[arguments.index(after: $0)...]) } ?? []
        guard let invocation = try WalletCommand.invocation(own, environment: environment,
                                                            values: ["database-url", "data-dir"], help: help) else { return 0 }
        let database = try invocation.configuration.openDatabase(session: true, logger: invocation.logger)
        defer { database.close() }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try LocalCluster.findBinaries() + "/psql")
        process.arguments = [database.conninfo] + passed
        try process.run()
        process.waitUntilExit()
        return process.terminationStatus
    }

    /// The line that opens psql on `conninfo`, quoted for a POSIX shell.
    static func commandLine(conninfo: String) -> String {
        "psql '\(conninfo.replacingOccurrences(of: "'", with: "'\\''"))'"
    }
}
