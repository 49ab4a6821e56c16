import Foundation
import Postgres
import Testing
import TestSupport
import WalletService
import ServiceTestSupport

/// The settings for running behind PgBouncer in transaction mode.
@Suite(.timeLimit(.minutes(2)))
struct PoolerSettingsTests {
    @Test func preparedStatementsTakeTrueOrFalseAndNothingElse() throws {
        for value in ["yes", "TRUE", "1", "off"] {
            let result = try runProcess([CommandLineTests.walletBinary, "serve"], environment: ChaosRun.walletEnvironment([
                "WALLET_DATABASE_URL": "host=/nonexistent", "WALLET_CREDIT_VERIFICATION": "caller",
                "WALLET_DATABASE_PREPARED_STATEMENTS": value,
            ]))
            #expect(result.status == 2, "\(value)")
            #expect(result.error.contains("WALLET_DATABASE_PREPARED_STATEMENTS"), "\(value): \(result.error)")
        }
        for value in ["true", "false"] {
            let configuration = try Configuration.load(environment: [
                "WALLET_DATABASE_URL": "host=/nonexistent", "WALLET_DATABASE_PREPARED_STATEMENTS": value,
            ])
            #expect(configuration.databasePreparedStatements == (value == "true"))
        }
        #expect(try Configuration.load(environment: ["WALLET_DATABASE_URL": "host=/x"]).databasePreparedStatements)
    }

    @Test func aSessionURLNeedsADatabaseURLAndDefaultsToIt() throws {
        #expect(throws: Configuration.ConfigurationError.self) {
            try Configuration.load(environment: ["WALLET_DATABASE_SESSION_URL": "host=/x"])
        }
        #expect(try Configuration.load(environment: ["WALLET_DATABASE_URL": "host=/a"]).sessionDatabaseURL == "host=/a")
        let both = try Configuration.load(environment: ["WALLET_DATABASE_URL": "host=/a", "WALLET_DATABASE_SESSION_URL": "host=/b"])
        #expect(both.sessionDatabaseURL == "host=/b")
        #expect(both.databaseURL == "host=/a")
    }

    /// Migrations connect through the session URL: with a database URL
    /// that leads nowhere, `wallet migrate` and `wallet serve` still bring
    /// the schema up through it, and `serve` is not ready, because its
    /// requests go through the other one.
    @Test func migrationsGoThroughTheSessionURL() throws {
        let empty = TestService.conninfo(try TestDatabase.makeEmpty())
        let nowhere = "host=/nonexistent-wallet-pooler port=6432 dbname=wallet connect_timeout=1"
        let migrate = try runProcess([CommandLineTests.walletBinary, "migrate"], environment: ChaosRun.walletEnvironment([
            "WALLET_DATABASE_URL": nowhere, "WALLET_DATABASE_SESSION_URL": empty,
        ]))
        #expect(migrate.status == 0, "\(migrate.error)")
        #expect(migrate.output.contains("applied: 0001_wallet_schema.sql"))

        let other = TestService.conninfo(try TestDatabase.makeEmpty())
        let server = try ServerProcess(binary: CommandLineTests.walletBinary, environment: ChaosRun.walletEnvironment([
            "WALLET_DATABASE_URL": nowhere, "WALLET_DATABASE_SESSION_URL": other, "WALLET_LISTEN": "127.0.0.1:0",
            "WALLET_CREDIT_VERIFICATION": "caller",
        ]))
        defer { server.kill() }
        let port = try server.waitForPort()
        let connection = try Connection(options: .init(conninfo: other))
        defer { connection.close() }
        #expect(waitFor(seconds: 30) {
            (try? connection.query("SELECT to_regclass('wallet.entries') IS NOT NULL")[0].decode(Bool.self, at: 0)) == true
        })
        #expect(try StallTests.get(port: port, path: "/readyz").status == 503)
        let metrics = String(decoding: try StallTests.get(port: port, path: "/metrics").body, as: UTF8.self)
        #expect(metrics.contains("\nwallet_ready 0\n"))
    }
}
