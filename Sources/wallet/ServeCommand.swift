import Foundation
import Logging
import WalletCore
import WalletService
import WalletStore

/// `wallet serve`: the service, until SIGINT or SIGTERM.
enum ServeCommand {
    static let help = """
        usage: wallet serve [--database-url URL] [--listen HOST:PORT] [--data-dir DIR] [--no-migrate]

        Runs the service until SIGINT or SIGTERM, then stops gracefully.
          --listen HOST:PORT   address to listen on (WALLET_LISTEN, 127.0.0.1:8080)
        \(WalletCommand.databaseOptions)
          --no-migrate         do not apply migrations at start
        """

    static func run(_ arguments: [String], environment: [String: String]) throws -> Int32 {
        guard let invocation = try WalletCommand.invocation(
            arguments, environment: environment, values: ["database-url", "listen", "data-dir"], switches: ["no-migrate"],
            help: help) else { return 0 }
        let (configuration, logger) = (invocation.configuration, invocation.logger)

        // Signals are taken on this thread alone: block them before any other
        // thread exists, so every thread inherits the mask.
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGINT)
        sigaddset(&signals, SIGTERM)
        pthread_sigmask(SIG_BLOCK, &signals, nil)
        signal(SIGPIPE, SIG_IGN)
        DescriptorLimit.raise(for: configuration, logger: logger)

        // The factory checks what serving needs, once; a setting it refuses
        // is the operator's to fix, like a malformed one.
        let application: Application
        do {
            application = try buildApplication(configuration: configuration, logger: logger)
        } catch let error as Configuration.ConfigurationError {
            throw UsageError(message: "configuration: \(error.description)")
        }
        if configuration.creditVerification.contains(.caller) && !configuration.usesEmbeddedDatabase {
            logger.warning("credit verification includes caller: the app backend's word is enough to credit coins",
                           ["config.credit_verification": modes(configuration)])
        }
        if configuration.creditVerification.contains(.appStoreAPI) && !configuration.apple.requireAccountToken {
            logger.warning("credit verification includes appstore-api without WALLET_APPLE_REQUIRE_ACCOUNT_TOKEN: a flowNO-only credit of a transaction with no appAccountToken is accepted for whichever user asks",
                           ["config.credit_verification": modes(configuration)])
        }
        do {
            try application.start()
        } catch {
            application.shutdown()
            throw error
        }
        printBanner(application)
        if application.embeddedDatabase != nil, application.waitUntilReady(timeoutSeconds: 30) {
            do {
                if let keys = try application.ledger.createDevelopmentKeysIfFirstStart() {
                    printDevelopmentKeys(keys, application: application)
                }
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
        var lines = ["wallet \(WalletCommand.version) listening on http://\(configuration.listen.host):\(application.port)"]
        if let operationsPort = application.operationsPort, let listen = configuration.opsListen {
            lines.append("metrics and probes: http://\(listen.host):\(operationsPort)/metrics, /healthz, /readyz")
        }
        lines.append("binary: \(Bundle.main.executablePath ?? CommandLine.arguments[0])")
        if let embedded = application.embeddedDatabase {
            lines.append("development database: embedded PostgreSQL in \(embedded.directory)")
            if embedded.usedFallback {
                lines.append("  (the postgres user cannot reach \(configuration.dataDirectory), so it lives in the temp dir)")
            }
            lines.append("  psql: \(PsqlCommand.commandLine(conninfo: embedded.conninfo))  (or: wallet psql)")
            lines.append("  This is the development database. Set WALLET_DATABASE_URL for a real one.")
        } else {
            lines.append("database: WALLET_DATABASE_URL (set in this environment, so the embedded development database is not used)")
        }
        lines.append("credit verification: \(modes(configuration))"
            + (configuration.creditVerification.contains(.caller) ? " (the app backend vouches for purchases)" : ""))
        if configuration.adminConsole {
            lines.append("support console: http://\(configuration.listen.host):\(application.port)/admin"
                + " (sign in with a console key: wallet keys create --name NAME --scopes console)")
        }
        WalletCommand.printNow(lines.joined(separator: "\n"))
    }

    /// Printed here, never logged.
    private static func printDevelopmentKeys(_ keys: DevelopmentKeys, application: Application) {
        let base = "http://\(application.configuration.listen.host):\(application.port)"
        WalletCommand.printNow("""

            Development API keys (shown once; create more with `wallet keys create`):
              app-backend (credit, read): \(keys.appBackend)
              game-server (debit, grant, read): \(keys.gameServer)
              support-console (console):  \(keys.console)

            Try them:
              curl -s -X POST \(base)/v1/credits -H 'Authorization: Bearer \(keys.appBackend)' \\
                -H 'Content-Type: application/json' \\
                -d '{"user_id":"player-1","flow_no":"1000000123456789","product_id":"guodong600"}'
              curl -s -X POST \(base)/v1/debits -H 'Authorization: Bearer \(keys.gameServer)' \\
                -H 'Content-Type: application/json' -H 'Idempotency-Key: order-1' \\
                -d '{"user_id":"player-1","amount":100,"reason":"sword"}'
              curl -s -X POST \(base)/v1/grants -H 'Authorization: Bearer \(keys.gameServer)' \\
                -H 'Content-Type: application/json' -H 'Idempotency-Key: login-reward-1' \\
                -d '{"user_id":"player-1","amount":50,"reason":"daily login","expires_in_days":7}'
              curl -s \(base)/v1/wallets/player-1 -H 'Authorization: Bearer \(keys.gameServer)'

            Sign in to the support console at \(base)/admin with the support-console key.

            """)
    }

    /// The credit modes turned on, in their declared order, comma-separated.
    static func modes(_ configuration: Configuration) -> String {
        Configuration.CreditVerification.allCases.filter(configuration.creditVerification.contains)
            .map(\.rawValue).joined(separator: ",")
    }
}
