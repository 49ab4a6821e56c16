import Foundation
import Logging
import Postgres
import WalletService

/// The `wallet` command: serve, migrate, keys, webhooks, check, doctor, psql, version, appstore, googleplay.
/// A hand-written parser; every subcommand answers `--help`.
enum WalletCommand {
    static let version = "0.1.0"

    /// Runs the command line and returns the process exit status.
    static func main(arguments: [String], environment: [String: String]) -> Int32 {
        var arguments = Array(arguments.dropFirst())
        guard let command = arguments.first else {
            print(usage)
            return 2
        }
        arguments.removeFirst()
        do {
            switch command {
            case "serve": return try ServeCommand.run(arguments, environment: environment)
            case "migrate": return try MigrateCommand.run(arguments, environment: environment)
            case "keys": return try KeysCommand.run(arguments, environment: environment)
            case "webhooks": return try WebhooksCommand.run(arguments, environment: environment)
            case "check": return try CheckCommand.run(arguments, environment: environment)
            case "doctor": return try DoctorCommand.run(arguments, environment: environment)
            case "psql": return try PsqlCommand.run(arguments, environment: environment)
            case "appstore": return try AppStoreCommand.run(arguments, environment: environment)
            case "googleplay": return try GooglePlayCommand.run(arguments, environment: environment)
            case "version", "--version":
                print("wallet \(version)")
                return 0
            case "help", "--help", "-h":
                print(usage)
                return 0
            default:
                printError("unknown command \(command)\n\n\(usage)")
                return 2
            }
        } catch let error as UsageError {
            printError(error.message)
            return 2
        } catch {
            printError("wallet \(command): \(errorText(error))")
            return 1
        }
    }

    static let usage = """
        usage: wallet <command> [options]

        commands:
          serve      run the HTTP service
          migrate    apply database migrations
          keys       create, list and revoke API keys
          webhooks   add, list, disable and enable webhook endpoints
          check      check the ledger's invariants
          doctor     check the configuration, the database and each configured store
          psql       open psql on the database (admin scripts: wallet psql -- -f Scripts/admin/...)
          appstore   verify App Store signed data offline, reconcile notifications,
                     list consumption answers
          googleplay reconcile voided purchases, list the consumes of purchases
          version    print the version

        Run `wallet <command> --help` for a command's options. Settings come from
        WALLET_* environment variables; see docs/configuration.md.
        """

    static let databaseOptions = """
          --database-url URL   PostgreSQL URL or conninfo (WALLET_DATABASE_URL); without
                               one, the embedded development database is used
          --data-dir DIR       where the embedded database lives (WALLET_DATA_DIR, ./.wallet)
        """

    /// A command's parsed line, its configuration and its logger.
    struct Invocation {
        let options: Options
        let configuration: Configuration
        let logger: Logger
    }

    /// The action word of a command with actions (`keys create`, `webhooks
    /// add`); nil when the line asked for help, which is printed. Without an
    /// action the usage is the error.
    static func action(_ arguments: [String], help: String) throws -> String? {
        guard let action = arguments.first, !action.hasPrefix("-") else {
            if arguments.contains("--help") || arguments.contains("-h") {
                print(help)
                return nil
            }
            throw UsageError(message: help)
        }
        return action
    }

    /// Parses a command's options and reads the configuration they and the
    /// environment give; nil when the line asked for help, which is printed.
    static func invocation(_ arguments: [String], environment: [String: String], values: Set<String>,
                           switches: Set<String> = [], positionals: Int = 0, help: String) throws -> Invocation? {
        guard let options = try Self.options(arguments, values: values, switches: switches, positionals: positionals,
                                             help: help) else { return nil }
        let configuration: Configuration
        do {
            configuration = try Configuration.load(environment: environment, flags: options.values)
        } catch {
            throw UsageError(message: "configuration: \(error.description)")
        }
        return Invocation(options: options, configuration: configuration,
                          logger: Logger(label: "wallet", level: configuration.logLevel))
    }

    /// Parses a command's options; nil when the line asked for help, which
    /// is printed.
    static func options(_ arguments: [String], values: Set<String>, switches: Set<String> = [], positionals: Int = 0,
                        help: String) throws -> Options? {
        let options = try Options(arguments, values: values, switches: switches, positionals: positionals, help: help)
        if options.helpRequested {
            print(help)
            return nil
        }
        return options
    }

    static func errorText(_ error: any Error) -> String {
        if let error = error as? PostgresError { return error.debugDescription }
        return String(describing: error)
    }

    static func printError(_ message: String) {
        FileHandle.standardError.write(Data((message + "\n").utf8))
    }

    /// Writes to standard output at once, unbuffered: the banner of a
    /// long-running `serve` must show up even when stdout is a pipe.
    static func printNow(_ text: String) {
        FileHandle.standardOutput.write(Data((text + "\n").utf8))
    }
}

/// A command line the user got wrong: the message goes to stderr, exit 2.
struct UsageError: Error {
    let message: String
}
