import Crypto
import Foundation
import HTTPServer
import JSON
import Logging
import Postgres
import Testing
import TestSupport
@testable import ServiceAPI
@testable import ServiceSupport
@testable import WalletService
import ServiceTestSupport
@testable import WalletStore

/// Databases that earlier releases migrated upgrade in place to this build's
/// schema and function files, and what they stored keeps its meaning.
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
        func previousCredit(_ flowNo: String) throws -> String? {
            try Self.previousCredit(flowNo, user: "dana", on: connection)
        }
        func notify(_ uuid: String, _ type: String, _ flowNo: String, second: Int) throws -> String? {
            try connection.query("""
                SELECT outcome FROM wallet.apply_appstore_notification(\(uuid), \(type), NULL, 'Sandbox',
                    '2024-01-01 00:00:00+00'::timestamptz + make_interval(secs => \(second)), \(flowNo), 'Consumable',
                    NULL, NULL, '{}'::jsonb)
                """)[0][0]
        }
        #expect(try previousCredit("u-1") == "credited")
        #expect(try previousCredit("u-2") == "credited")
        #expect(try notify("n-1", "REFUND", "u-1", second: 1) == "refunded")
        #expect(try notify("n-2", "REFUND_REVERSED", "u-1", second: 2) == "reversed")
        #expect(try notify("n-3", "REFUND", "u-2", second: 3) == "refunded")
        #expect(try notify("n-4", "REFUND", "u-3", second: 4) == "revoked")

        let applied = try Schema.migrator(logger: logger).migrate(connection: connection)
        #expect(applied == Schema.migrationFiles.map(\.name).filter { $0 >= "0006" }
            + Schema.functionFiles.map { "functions/" + $0.name })
        #expect(try Schema.migrator(logger: logger).migrate(connection: connection) == [])
        #expect(try connection.query("SELECT * FROM wallet.check_invariants()").isEmpty)
        let states = try connection.query("""
            SELECT flow_no, notification_type, notification_uuid FROM wallet.appstore_refund_states ORDER BY flow_no
            """).map { [$0[0], $0[1], $0[2]] }
        #expect(states == [["u-1", "REFUND_REVERSED", "n-2"], ["u-2", "REFUND", "n-3"], ["u-3", "REFUND", "n-4"]])

        // The carried-over state decides as the new functions expect.
        func credit(_ flowNo: String) throws -> String? {
            try connection.query("""
                SELECT outcome FROM wallet.credit_many(ARRAY[
                    ROW('tests', \(flowNo), 'dana', 'guodong600', 1, NULL, 'caller', NULL, NULL)::wallet.credit_operation])
                """)[0][0]
        }
        #expect(try credit("u-3") == "revoked")
        #expect(try notify("n-5", "REFUND", "u-1", second: 1) == "superseded")
        #expect(try notify("n-6", "REFUND_REVERSED", "u-3", second: 5) == "unrevoked")
        #expect(try credit("u-3") == "credited")
        #expect(try notify("n-7", "REFUND_REVERSED", "u-2", second: 6) == "reversed")
        let balance = try connection.query("SELECT balance FROM wallet.wallets WHERE user_id = 'dana'")[0][0]
        #expect(balance == "1800")
        #expect(try connection.query("SELECT * FROM wallet.check_invariants()").isEmpty)
    }

    /// A database of the release before 0014 may hold two active products
    /// with one Google Play id, which a Google credit can no longer match:
    /// the upgrade must not fail on them. It keeps them (the credit path
    /// refuses their purchases until an operator mends the catalog), and
    /// takes voids of more units than a credit would.
    @Test func aCatalogThatSharesAGooglePlayIdUpgradesInPlace() throws {
        let options = try TestDatabase.makeEmpty()
        let connection = try Connection(options: options)
        defer { connection.close() }
        let previous = Schema.migrationFiles.filter { $0.name < "0014" }
        #expect(previous.last?.name == "0013_googleplay_voids.sql")
        try Migrator(files: previous, logger: logger).migrate(connection: connection)
        // As that release could leave it: a pair written before the rule.
        try connection.query("""
            UPDATE wallet.products SET google_product_id = 'coins' WHERE product_id IN ('guodong600', 'guodong5000')
            """)
        try connection.query("""
            INSERT INTO wallet.googleplay_voids (purchase_token, voided_at, refund_type, voided_quantity, order_id, flow_no, source)
            VALUES ('tok-old', now(), 2, 10, 'GPA.1', 'GPA.1', 'sweep')
            """)

        let applied = try Schema.migrator(logger: logger).migrate(connection: connection)
        #expect(applied.contains("0014_googleplay_hardening.sql"), "\(applied)")
        #expect(try connection.query("""
            SELECT product_id FROM wallet.products WHERE active AND google_product_id = 'coins' ORDER BY 1
            """).map { $0[0] } == ["guodong5000", "guodong600"])
        try connection.query("""
            INSERT INTO wallet.googleplay_voids (purchase_token, voided_at, refund_type, voided_quantity, order_id, flow_no, source)
            VALUES ('tok-new', now(), 2, 11, 'GPA.2', 'GPA.2', 'sweep')
            """)
        #expect(try connection.query("SELECT * FROM wallet.check_invariants()").isEmpty)
        // Mending it goes through the function: one of the pair off sale first.
        #expect(throws: PostgresError.self) {
            try connection.query("SELECT * FROM wallet.upsert_product('guodong600', 700, 'coin')")
        }
        try connection.query("SELECT * FROM wallet.upsert_product('guodong5000', 5000, 'coin', FALSE)")
        #expect(try connection.query("SELECT amount::text FROM wallet.upsert_product('guodong600', 700, 'coin')")[0][0] == "700")
    }

    /// A credit as the first release made it.
    static func previousCredit(_ flowNo: String, user: String, on connection: Connection) throws -> String? {
        try connection.query("""
            SELECT outcome FROM wallet.credit_many(ARRAY['tests'], ARRAY[\(flowNo)::text], ARRAY[\(user)::text],
                ARRAY['guodong600'], ARRAY[1], ARRAY[NULL]::bigint[], ARRAY['caller'], ARRAY[NULL]::text[])
            """)[0][0]
    }

    @Test func debitAnswersStoredBeforeTypedResultsReplayAsFirstSent() throws {
        let options = try TestDatabase.makeEmpty()
        let connection = try Connection(options: options)
        defer { connection.close() }
        // The first release's schema: its debit_many (0002) is the one every
        // release ran until typed results, so what it stores is what they
        // stored.
        try Migrator(files: Schema.migrationFiles.filter { $0.name < "0006" }, logger: logger).migrate(connection: connection)

        // A credit, a debit and a sticky refusal, under the hashes the
        // service gives these requests.
        #expect(try Self.previousCredit("p-1", user: "dana", on: connection) == "credited")
        func hash(_ json: String) throws -> ByteA {
            let body = try DebitBody(json: try JSONParser.parse(Array(json.utf8)))
            return ByteA(SHA256.hash(body.canonicalText))
        }
        func previousDebit(_ key: String, _ amount: Int64, requestID: String) throws -> String? {
            let json = #"{"user_id":"dana","amount":\#(amount)}"#
            return try connection.query("""
                SELECT outcome FROM wallet.debit_many(ARRAY['game-server'], ARRAY[\(key)::text],
                    ARRAY[\(try hash(json))::bytea], ARRAY['dana'], ARRAY['coin'], ARRAY[\(amount)::bigint],
                    ARRAY[NULL]::text[], ARRAY[NULL]::jsonb[], ARRAY[\(requestID)::text])
                """)[0][0]
        }
        #expect(try previousDebit("legacy-debit", 100, requestID: "req-legacy-1") == "debited")
        #expect(try previousDebit("legacy-short", 100_000, requestID: "req-legacy-2") == "insufficient_funds")
        // The bytes that release sent: its jsonb text, without spaces.
        let entry = try connection.query("""
            SELECT id, wallet.rfc3339(created_at) FROM wallet.entries WHERE reference = 'legacy-debit'
            """)[0]
        let (entryID, createdAt) = (try entry.decode(Int64.self, at: 0), try entry.decode(String.self, at: 1))
        let firstSent = #"{"debit":{"id":\#(entryID),"amount":100,"reason":null,"user_id":"dana","currency":"coin","#
            + #""entry_id":\#(entryID),"created_at":"\#(createdAt)"},"balance":{"balance":500,"user_id":"dana","#
            + #""currency":"coin"}}"#

        let applied = try Schema.migrator(logger: logger).migrate(connection: connection)
        #expect(applied == Schema.migrationFiles.map(\.name).filter { $0 >= "0006" }
            + Schema.functionFiles.map { "functions/" + $0.name })
        #expect(try connection.query("SELECT * FROM wallet.check_invariants()").isEmpty)
        let kept = try connection.query("""
            SELECT key, amount::text, balance::text, (response IS NOT NULL)::text FROM wallet.idempotency_keys ORDER BY key
            """).map { [$0[0], $0[1], $0[2], $0[3]] }
        #expect(kept == [["legacy-debit", "100", "500", "true"], ["legacy-short", nil, "500", "false"]])

        let service = try TestService(database: options)
        defer { service.stop() }
        let replay = try service.debit(userID: "dana", amount: 100, idempotencyKey: "legacy-debit")
        #expect(replay.status == 201)
        #expect(replay.header("Idempotent-Replayed") == "true")
        #expect(replay.text == firstSent)
        let refusal = try service.debit(userID: "dana", amount: 100_000, idempotencyKey: "legacy-short")
        #expect(refusal.status == 409)
        #expect(try refusal.json()["code"] == "insufficient_funds")
        #expect(try refusal.json()["balance"] == 500)
        #expect(try refusal.json()["instance"] == "req-legacy-2")
        #expect(try service.debit(userID: "dana", amount: 200, idempotencyKey: "legacy-debit").status == 422)
        #expect(try service.credit(userID: "dana", flowNo: "p-1").status == 200)

        // New answers replay as their own first bytes.
        let first = try service.debit(userID: "dana", amount: 50, idempotencyKey: "typed-1")
        let again = try service.debit(userID: "dana", amount: 50, idempotencyKey: "typed-1")
        #expect(first.status == 201 && again.status == 201)
        #expect(again.header("Idempotent-Replayed") == "true")
        #expect(again.body == first.body)
        #expect(try first.json()["balance"]?["balance"] == 450)
        #expect(try service.violations() == [])
    }
}
