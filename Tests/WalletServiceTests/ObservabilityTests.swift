import Foundation
import HTTPServer
import JSON
import Postgres
import Testing
import TestSupport
import ServiceSupport
import ServiceTestSupport
import WalletStore

/// The metrics that the Grafana dashboard and the Prometheus alerts in
/// `deploy/` query, as the real binary serves them.
@Suite(.timeLimit(.minutes(2)))
struct ObservabilityTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    static func metrics(port: UInt16) throws -> String {
        String(decoding: try StallTests.get(port: port, path: "/metrics").body, as: UTF8.self)
    }

    /// The value of one series, by its exact name and labels.
    static func value(_ series: String, in text: String) -> Double? {
        for line in text.split(separator: "\n") where line.hasPrefix(series + " ") {
            return Double(line.dropFirst(series.count + 1))
        }
        return nil
    }

    @Test func everyQueriedMetricIsServedFromStartUpAtZero() throws {
        let databaseURL = TestService.conninfo(try TestDatabase.make())
        let (server, port, _) = try StallTests.serve(databaseURL: databaseURL, users: [])
        defer { server.kill() }
        let text = try Self.metrics(port: port)
        // Before any request that moves coins or fails, the series exist.
        for series in [#"wallet_coins_total{kind="credited"}"#, #"wallet_coins_total{kind="debited"}"#,
                       #"wallet_coins_total{kind="refunded"}"#,
                       #"wallet_http_requests_total{route="/v1/debits",method="POST",status="5xx"}"#,
                       #"wallet_db_errors_total{kind="unavailable"}"#,
                       #"wallet_appstore_notifications_total{outcome="refused",reason="malformed"}"#,
                       #"wallet_appstore_consumption_total{outcome="failed"}"#, "wallet_writer_queue_depth_fullest",
                       "wallet_wal_archive_enabled", "wallet_wal_archive_failures_total",
                       "wallet_wal_archive_pending_bytes", "wallet_invariant_violations_total"] {
            #expect(Self.value(series, in: text) == 0, "\(series)")
        }
        #expect(Self.value("wallet_ready", in: text) == 1)
        #expect(Self.value("wallet_writer_queue_depth_max", in: text) == 4_096)

        // Every metric the dashboard and the alert rules name is declared.
        let exposition = FileManager.default.temporaryDirectory.appendingPathComponent("wallet-metrics-\(getpid()).txt")
        try Data(text.utf8).write(to: exposition)
        defer { try? FileManager.default.removeItem(at: exposition) }
        let check = try runProcess([
            "/usr/bin/python3", Self.repository.appendingPathComponent("Scripts/check-observability.py").path, exposition.path,
            Self.repository.appendingPathComponent("deploy/grafana/wallet-dashboard.json").path,
            Self.repository.appendingPathComponent("deploy/prometheus/wallet-alerts.yml").path,
        ])
        #expect(check.status == 0, "\(check.output)\(check.error)")
    }

    /// The archiver's state as upkeep read it, in the exposition.
    @Test func walArchivingIsExposedAsRead() {
        let metrics = Metrics()
        metrics.setWALArchive(WALArchiveStatus(
            enabled: true, archivedCount: 41, failedCount: 2, lastArchivedSeconds: 1_800_000_000.25,
            lastFailedSeconds: 1_799_999_000, lastArchivedWAL: "000000010000000000000003",
            currentLSN: (4 << 24) + 8_192, segmentBytes: 16 << 20))
        let text = metrics.render(pool: nil, writerQueueDepth: 0)
        #expect(Self.value("wallet_wal_archive_enabled", in: text) == 1)
        #expect(Self.value("wallet_wal_archived_total", in: text) == 41)
        #expect(Self.value("wallet_wal_archive_failures_total", in: text) == 2)
        #expect(Self.value("wallet_wal_archive_last_success_timestamp_seconds", in: text) == 1_800_000_000.25)
        #expect(Self.value("wallet_wal_archive_last_failure_timestamp_seconds", in: text) == 1_799_999_000)
        #expect(Self.value("wallet_wal_archive_pending_bytes", in: text) == 8_192)
        #expect(text.contains("# TYPE wallet_wal_archive_failures_total counter\n"))
    }

    /// Coins are counted once each, after COMMIT: a replay adds nothing,
    /// and a captured hold counts as debited.
    @Test func coinsAreCountedOncePerCommittedMovement() throws {
        let databaseURL = TestService.conninfo(try TestDatabase.make())
        let (server, port, debitKey) = try StallTests.serve(databaseURL: databaseURL, users: [])
        defer { server.kill() }
        let creditKey = try ChaosRun.walletCommand(["keys", "create", "--name", "shop", "--scopes", "credit"],
                                                   databaseURL: databaseURL).lastLine
        let holdKey = debitKey
        for _ in 0..<2 {
            let credit = try TestService.request(port: port, "POST", "/v1/credits", key: creditKey,
                                                 json: #"{"user_id":"counted","flow_no":"obs-1","product_id":"guodong600"}"#)
            #expect(credit.status == 201 || credit.status == 200)
            #expect(try StallTests.debit(port: port, key: debitKey, user: "counted", idempotencyKey: "obs-d").status == 201)
        }
        let hold = try TestService.request(port: port, "POST", "/v1/holds", key: holdKey,
                                           json: #"{"user_id":"counted","amount":50}"#,
                                           headers: [(name: "Idempotency-Key", value: "obs-h")])
        #expect(hold.status == 201, "\(String(decoding: hold.body, as: UTF8.self))")
        let holdID = try #require((try? hold.json())?["hold"]?["id"].flatMap { value -> Int64? in
            if case .number(let digits) = value { return Int64(digits) }
            return nil
        })
        for _ in 0..<2 {
            let capture = try TestService.request(port: port, "POST", "/v1/holds/\(holdID)/capture", key: holdKey,
                                                  json: #"{"amount":30}"#,
                                                  headers: [(name: "Idempotency-Key", value: "obs-c")])
            #expect(capture.status == 201, "\(String(decoding: capture.body, as: UTF8.self))")
        }
        let text = try Self.metrics(port: port)
        #expect(Self.value(#"wallet_coins_total{kind="credited"}"#, in: text) == 600)
        // One debit of 1 (the helper's amount) and a capture of 30.
        #expect(Self.value(#"wallet_coins_total{kind="debited"}"#, in: text) == 31)
        #expect(Self.value(#"wallet_coins_total{kind="refunded"}"#, in: text) == 0)
    }

    /// The ledger verifier of the real binary: how far it checked, and the
    /// violations it found, counted on /metrics.
    @Test func theVerifierReportsHowFarItCheckedAndCountsViolations() throws {
        let databaseURL = TestService.conninfo(try TestDatabase.make())
        let connection = try Connection(options: .init(conninfo: databaseURL))
        defer { connection.close() }
        try connection.query("SELECT * FROM wallet.grant_coins('vera', 100, 'coin', 'tests', 'tests', 'setup')")
        let server = try ServerProcess(binary: CommandLineTests.walletBinary, environment: ChaosRun.walletEnvironment([
            "WALLET_DATABASE_URL": databaseURL, "WALLET_LISTEN": "127.0.0.1:0", "WALLET_CREDIT_VERIFICATION": "caller",
            "WALLET_VERIFY_INTERVAL_SECONDS": "1"]), capturingLog: true)
        defer { server.kill() }
        let port = try server.waitForPort()
        let entry = try connection.query("SELECT max(id) FROM wallet.entries")[0].decode(Int64.self, at: 0)
        #expect(waitFor(seconds: 30) {
            Self.value("wallet_verified_entry_id", in: (try? Self.metrics(port: port)) ?? "") == Double(entry)
        })
        #expect(Self.value("wallet_invariant_violations_total", in: try Self.metrics(port: port)) == 0)

        // A new entry, changed behind the triggers' back.
        try connection.query("SELECT * FROM wallet.grant_coins('vera', 5, 'coin', 'tests', 'tests', 'late')")
        try connection.execute("SET session_replication_role = replica")
        try connection.execute("UPDATE wallet.entries SET amount = amount + 1 WHERE reference = 'late'")
        #expect(waitFor(seconds: 30) {
            (Self.value("wallet_invariant_violations_total", in: (try? Self.metrics(port: port)) ?? "") ?? 0) > 0
        })
        // The checkpoint stays before the changed entry.
        #expect(Self.value("wallet_verified_entry_id", in: try Self.metrics(port: port)) == Double(entry))
        #expect(waitFor(seconds: 10) { server.output.contains("ledger invariant violated") }, "\(server.output)")
    }
}
