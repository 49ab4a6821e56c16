import Foundation
import Logging
import Postgres
import Testing
import TestSupport
import WalletService

/// A database the previous release migrated (0001–0005, functions defined
/// there) upgrades in place to this build's schema and function files.
@Suite(.timeLimit(.minutes(2)))
struct SchemaUpgradeTests {
    let logger = Logger(label: "test", level: .error, sink: .discard)

    @Test func aDatabaseOfThePreviousReleaseUpgradesInPlace() throws {
        let options = try TestDatabase.makeEmpty()
        let connection = try Connection(options: options)
        defer { connection.close() }
        let previous = Schema.migrationFiles.filter { $0.name < "0006" }
        #expect(previous.map(\.name) == ["0001_wallet_schema.sql", "0002_credits_and_debits.sql",
                                         "0003_admin_and_invariants.sql", "0004_api_keys.sql",
                                         "0005_appstore_notifications.sql"])
        try Migrator(files: previous, logger: logger).migrate(connection: connection)

        // What the previous release wrote: two credits, Apple's refund and
        // reversal of one, a refund of the other, and a refund of a flowNO
        // never credited.
        func credit(_ flowNo: String) throws -> String? {
            try connection.query("""
                SELECT outcome FROM wallet.credit_many(ARRAY['tests'], ARRAY[\(flowNo)::text], ARRAY['dana'],
                    ARRAY['guodong600'], ARRAY[1], ARRAY[NULL]::bigint[], ARRAY['caller'], ARRAY[NULL]::text[])
                """)[0][0]
        }
        func notify(_ uuid: String, _ type: String, _ flowNo: String, second: Int) throws -> String? {
            try connection.query("""
                SELECT outcome FROM wallet.apply_appstore_notification(\(uuid), \(type), NULL, 'Sandbox',
                    '2024-01-01 00:00:00+00'::timestamptz + make_interval(secs => \(second)), \(flowNo), 'Consumable',
                    NULL, NULL, '{}'::jsonb)
                """)[0][0]
        }
        #expect(try credit("u-1") == "credited")
        #expect(try credit("u-2") == "credited")
        #expect(try notify("n-1", "REFUND", "u-1", second: 1) == "refunded")
        #expect(try notify("n-2", "REFUND_REVERSED", "u-1", second: 2) == "reversed")
        #expect(try notify("n-3", "REFUND", "u-2", second: 3) == "refunded")
        #expect(try notify("n-4", "REFUND", "u-3", second: 4) == "revoked")

        let applied = try Schema.migrator(logger: logger).migrate(connection: connection)
        #expect(applied == ["0006_appstore_refund_states.sql", "functions/01_lock_flow_nos.sql",
                            "functions/02_credit_many.sql", "functions/03_apply_appstore_notification.sql"])
        #expect(try Schema.migrator(logger: logger).migrate(connection: connection) == [])
        #expect(try connection.query("SELECT * FROM wallet.check_invariants()").isEmpty)
        let states = try connection.query("""
            SELECT flow_no, notification_type, notification_uuid FROM wallet.appstore_refund_states ORDER BY flow_no
            """).map { [$0[0], $0[1], $0[2]] }
        #expect(states == [["u-1", "REFUND_REVERSED", "n-2"], ["u-2", "REFUND", "n-3"], ["u-3", "REFUND", "n-4"]])

        // The carried-over state decides as the new functions expect.
        #expect(try credit("u-3") == "revoked")
        #expect(try notify("n-5", "REFUND", "u-1", second: 1) == "superseded")
        #expect(try notify("n-6", "REFUND_REVERSED", "u-3", second: 5) == "unrevoked")
        #expect(try credit("u-3") == "credited")
        #expect(try notify("n-7", "REFUND_REVERSED", "u-2", second: 6) == "reversed")
        let balance = try connection.query("SELECT balance FROM wallet.wallets WHERE user_id = 'dana'")[0][0]
        #expect(balance == "1800")
        #expect(try connection.query("SELECT * FROM wallet.check_invariants()").isEmpty)
    }
}
