import AppStore
import Foundation
import Logging
import Postgres
import WalletCore

/// The `wallet` command: serve, migrate, keys, check, version, appstore.
/// A hand-written parser; every subcommand answers `--help`.
public enum WalletCommand {
    public static let version = "0.1.0"

    /// Runs the command line and returns the process exit status.
    public static func main(arguments: [String], environment: [String: String]) -> Int32 {
        var arguments = Array(arguments.dropFirst())
        guard let command = arguments.first else {
            print(usage)
            return 2
        }
        arguments.removeFirst()
        do {
            switch command {
            case "serve": return try serve(arguments, environment: environment)
            case "migrate": return try migrate(arguments, environment: environment)
            case "keys": return try keys(arguments, environment: environment)
            case "check": return try check(arguments, environment: environment)
            case "appstore": return appStore(arguments)
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
          check      check the ledger's invariants
          appstore   verify App Store signed data offline
          version    print the version

        Run `wallet <command> --help` for a command's options. Settings come from
        WALLET_* environment variables; see the README.
        """

    static let databaseOptions = """
          --database-url URL   PostgreSQL URL or conninfo (WALLET_DATABASE_URL); without
                               one, the embedded development database is used
          --data-dir DIR       where the embedded database lives (WALLET_DATA_DIR, ./.wallet)
        """

    // MARK: serve

    static func serve(_ arguments: [String], environment: [String: String]) throws -> Int32 {
        let options = try Options(arguments, values: ["database-url", "listen", "data-dir"], switches: ["no-migrate"],
                                  help: """
            usage: wallet serve [--database-url URL] [--listen HOST:PORT] [--data-dir DIR] [--no-migrate]

            Runs the service until SIGINT or SIGTERM, then stops gracefully.
              --listen HOST:PORT   address to listen on (WALLET_LISTEN, 127.0.0.1:8080)
            \(databaseOptions)
              --no-migrate         do not apply migrations at start
            """)
        if options.helpRequested { return 0 }
        let configuration = try loadConfiguration(environment: environment, flags: options.values)
        do {
            try configuration.validateForServing()
        } catch {
            throw UsageError(message: "configuration: \(error.description)")
        }
        let logger = Logger(label: "wallet", level: configuration.logLevel)

        // Signals are taken on this thread alone: block them before any other
        // thread exists, so every thread inherits the mask.
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGINT)
        sigaddset(&signals, SIGTERM)
        pthread_sigmask(SIG_BLOCK, &signals, nil)
        signal(SIGPIPE, SIG_IGN)

        if configuration.creditVerification.contains(.caller) && !configuration.usesEmbeddedDatabase {
            logger.warning("credit verification includes caller: the app backend's word is enough to credit coins",
                           ["config.credit_verification": modes(configuration)])
        }
        let application = try buildApplication(configuration: configuration, logger: logger)
        do {
            try application.start()
        } catch {
            application.shutdown()
            throw error
        }
        printBanner(application)
        if application.embeddedDatabase != nil, application.waitUntilReady(timeoutSeconds: 30) {
            do {
                try printDevelopmentKeysIfFirstStart(application)
            } catch {
                logger.error("could not create development keys", ["error": String(reflecting: error)])
            }
        }

        var received: Int32 = 0
        sigwait(&signals, &received)
        logger.info("shutting down", ["signal": received == SIGINT ? "SIGINT" : "SIGTERM"])
        application.shutdown()
        return 0
    }

    private static func printBanner(_ application: Application) {
        let configuration = application.configuration
        var lines = ["wallet \(version) listening on http://\(configuration.listen.host):\(application.port)"]
        if let embedded = application.embeddedDatabase {
            lines.append("development database: embedded PostgreSQL in \(embedded.directory)")
            if embedded.usedFallback {
                lines.append("  (the postgres user cannot reach \(configuration.dataDirectory), so it lives in the temp dir)")
            }
            lines.append("  This is the development database. Set WALLET_DATABASE_URL for a real one.")
        } else {
            lines.append("database: WALLET_DATABASE_URL")
        }
        lines.append("credit verification: \(modes(configuration))"
            + (configuration.creditVerification.contains(.caller) ? " (the app backend vouches for purchases)" : ""))
        printNow(lines.joined(separator: "\n"))
    }

    /// On the first start of an empty embedded database, two keys to try
    /// the API with. Printed here, never logged.
    private static func printDevelopmentKeysIfFirstStart(_ application: Application) throws {
        let connection = try Connection(options: .init(conninfo: application.databaseConninfo))
        defer { connection.close() }
        try connection.execute("BEGIN")
        try connection.execute("LOCK TABLE wallet.api_keys IN EXCLUSIVE MODE")
        guard try APIKeys.count(on: connection) == 0 else {
            try connection.execute("ROLLBACK")
            return
        }
        let appBackend = try APIKeys.create(name: "app-backend", scopes: [.credit, .read], on: connection)
        let gameServer = try APIKeys.create(name: "game-server", scopes: [.debit, .read], on: connection)
        try connection.execute("COMMIT")
        let base = "http://\(application.configuration.listen.host):\(application.port)"
        printNow("""

            Development API keys (shown once; create more with `wallet keys create`):
              app-backend (credit, read): \(appBackend)
              game-server (debit, read):  \(gameServer)

            Try them:
              curl -s -X POST \(base)/v1/credits -H 'Authorization: Bearer \(appBackend)' \\
                -H 'Content-Type: application/json' \\
                -d '{"user_id":"player-1","flow_no":"1000000123456789","product_id":"guodong600"}'
              curl -s -X POST \(base)/v1/debits -H 'Authorization: Bearer \(gameServer)' \\
                -H 'Content-Type: application/json' -H 'Idempotency-Key: order-1' \\
                -d '{"user_id":"player-1","amount":100,"reason":"sword"}'
              curl -s \(base)/v1/wallets/player-1 -H 'Authorization: Bearer \(gameServer)'

            """)
    }

    // MARK: migrate

    static func migrate(_ arguments: [String], environment: [String: String]) throws -> Int32 {
        let options = try Options(arguments, values: ["database-url", "data-dir"], switches: [], help: """
            usage: wallet migrate [--database-url URL] [--data-dir DIR]

            Applies the migrations this build carries; running it again changes nothing.
            \(databaseOptions)
            """)
        if options.helpRequested { return 0 }
        let configuration = try loadConfiguration(environment: environment, flags: options.values)
        let logger = Logger(label: "wallet", level: configuration.logLevel)
        try withDatabase(configuration, logger: logger) { connection in
            try connection.execute("SET statement_timeout = 0")
            let applied = try Schema.migrator(logger: logger).migrate(connection: connection)
            print(applied.isEmpty ? "database is up to date" : "applied: " + applied.joined(separator: ", "))
        }
        return 0
    }

    // MARK: keys

    static func keys(_ arguments: [String], environment: [String: String]) throws -> Int32 {
        let help = """
            usage: wallet keys create --name NAME --scopes SCOPE[,SCOPE...]
                   wallet keys list
                   wallet keys revoke NAME

            Scopes: credit (POST /v1/credits), debit (POST /v1/debits),
            read (GET wallets, entries, credits), admin (everything).
            `create` prints the new secret alone on the last line; it is shown once.
            \(databaseOptions)
            """
        guard let action = arguments.first, !action.hasPrefix("-") else {
            if arguments.contains("--help") || arguments.contains("-h") {
                print(help)
                return 0
            }
            throw UsageError(message: help)
        }
        let options = try Options(Array(arguments.dropFirst()), values: ["name", "scopes", "database-url", "data-dir"],
                                  switches: [], positionals: action == "revoke" ? 1 : 0, help: help)
        if options.helpRequested { return 0 }
        let configuration = try loadConfiguration(environment: environment, flags: options.values)
        let logger = Logger(label: "wallet", level: configuration.logLevel)
        switch action {
        case "create":
            guard let name = options.values["name"], let scopeText = options.values["scopes"] else {
                throw UsageError(message: "wallet keys create needs --name and --scopes\n\n\(help)")
            }
            let scopes = try APIKeys.parseScopes(scopeText)
            try withDatabase(configuration, logger: logger, migrateFirst: true) { connection in
                let secret = try APIKeys.create(name: name, scopes: scopes, on: connection)
                print("created key \(name) with scopes \(scopes.map(\.rawValue).joined(separator: ","))")
                print("the secret is shown once, on the next line:")
                print(secret)
            }
        case "list":
            try withDatabase(configuration, logger: logger, migrateFirst: true) { connection in
                let keys = try APIKeys.list(on: connection)
                print(pad(["NAME", "SCOPES", "CREATED", "LAST USED", "REVOKED"]))
                for key in keys {
                    print(pad([key.name, key.scopes.map(\.rawValue).joined(separator: ","), key.createdAt,
                               key.lastUsedAt ?? "-", key.revokedAt ?? "-"]))
                }
            }
        case "revoke":
            guard let name = options.positionals.first else { throw UsageError(message: help) }
            try withDatabase(configuration, logger: logger, migrateFirst: true) { connection in
                try APIKeys.revoke(name: name, on: connection)
                print("revoked key \(name); running services refuse it within seconds")
            }
        default:
            throw UsageError(message: "unknown keys action \(action)\n\n\(help)")
        }
        return 0
    }

    private static func pad(_ columns: [String]) -> String {
        let widths = [24, 22, 28, 28, 28]
        return zip(columns, widths).map { $0.padding(toLength: max($1, $0.count + 1), withPad: " ", startingAt: 0) }
            .joined().trimmingCharacters(in: .whitespaces)
    }

    // MARK: check

    static func check(_ arguments: [String], environment: [String: String]) throws -> Int32 {
        let options = try Options(arguments, values: ["database-url", "data-dir"], switches: [], help: """
            usage: wallet check [--database-url URL] [--data-dir DIR]

            Runs wallet.check_invariants(): prints one line per violation and exits 1
            if there is any, 0 if the books balance.
            \(databaseOptions)
            """)
        if options.helpRequested { return 0 }
        let configuration = try loadConfiguration(environment: environment, flags: options.values)
        let logger = Logger(label: "wallet", level: configuration.logLevel)
        var violations: [LedgerStore.Violation] = []
        try withDatabase(configuration, logger: logger) { connection in
            try connection.execute("SET statement_timeout = 0")
            violations = try LedgerStore.checkInvariants(on: connection)
        }
        for violation in violations {
            print("\(violation.invariant)\t\(violation.subject)\t\(violation.detail)")
        }
        if violations.isEmpty { print("ok: no invariant is violated") }
        return violations.isEmpty ? 0 : 1
    }

    // MARK: appstore

    static func appStore(_ arguments: [String]) -> Int32 {
        guard arguments.first == "verify" else {
            print("usage: wallet appstore verify [--bundle-id ID]... [--root FILE]... [--environment E]... [--app-apple-id N]")
            return arguments.contains("--help") || arguments.contains("-h") ? 0 : 2
        }
        let input = FileHandle.standardInput.readDataToEndOfFile()
        let result = VerifyCommand.run(arguments: Array(arguments.dropFirst()), stdin: input)
        if !result.stdout.isEmpty { print(result.stdout, terminator: result.stdout.hasSuffix("\n") ? "" : "\n") }
        if !result.stderr.isEmpty { printError(result.stderr.trimmingCharacters(in: .newlines)) }
        return result.exitCode
    }

    // MARK: Shared

    struct UsageError: Error {
        let message: String
    }

    static func loadConfiguration(environment: [String: String], flags: [String: String]) throws -> Configuration {
        do {
            return try Configuration.load(environment: environment, flags: flags)
        } catch {
            throw UsageError(message: "configuration: \(error.description)")
        }
    }

    /// Runs `body` on the configured database, or on the embedded one, which
    /// is started for the command when `wallet serve` is not running it.
    static func withDatabase(_ configuration: Configuration, logger: Logger, migrateFirst: Bool = false,
                             _ body: (Connection) throws -> Void) throws {
        var embedded: EmbeddedDatabase?
        let conninfo: String
        if let url = configuration.databaseURL {
            conninfo = url
        } else {
            let quiet = Logger(label: "wallet", level: .warning)
            embedded = try EmbeddedDatabase.start(dataDirectory: configuration.dataDirectory, logger: quiet)
            conninfo = embedded!.conninfo
        }
        defer { embedded?.stopIfStartedHere() }
        var options = Connection.Options(conninfo: conninfo)
        options.statementTimeoutMilliseconds = 60_000
        let connection = try Connection(options: options)
        defer { connection.close() }
        if migrateFirst {
            try Schema.migrator(logger: logger).migrate(connection: connection)
        }
        try body(connection)
    }

    private static func modes(_ configuration: Configuration) -> String {
        Configuration.CreditVerification.allCases.filter(configuration.creditVerification.contains)
            .map(\.rawValue).joined(separator: ",")
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

/// `--name value`, `--name=value`, switches and positionals, for one subcommand.
struct Options {
    var values: [String: String] = [:]
    var positionals: [String] = []
    var helpRequested = false

    init(_ arguments: [String], values allowedValues: Set<String>, switches: Set<String>, positionals positionalCount: Int = 0,
         help: String) throws {
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if argument == "--help" || argument == "-h" {
                print(help)
                helpRequested = true
                return
            }
            guard argument.hasPrefix("--") else {
                guard positionals.count < positionalCount else {
                    throw WalletCommand.UsageError(message: "unexpected argument \(argument)\n\n\(help)")
                }
                positionals.append(argument)
                continue
            }
            var name = String(argument.dropFirst(2))
            var value: String?
            if let equals = name.firstIndex(of: "=") {
                value = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            }
            if switches.contains(name) {
                guard value == nil else { throw WalletCommand.UsageError(message: "--\(name) takes no value") }
                values[name] = "true"
            } else if allowedValues.contains(name) {
                if value == nil {
                    guard index < arguments.count else {
                        throw WalletCommand.UsageError(message: "--\(name) needs a value\n\n\(help)")
                    }
                    value = arguments[index]
                    index += 1
                }
                values[name] = value
            } else {
                throw WalletCommand.UsageError(message: "unknown option --\(name)\n\n\(help)")
            }
        }
        if positionals.count < positionalCount {
            throw WalletCommand.UsageError(message: help)
        }
    }
}
