import Foundation
import HTTPServer
import Locking
import Postgres
import Testing
import TestSupport
import ServiceTestSupport

/// While a standby is being promoted, the address of the primary can lead
/// to a server that takes no writes: every write fails with 25006 before it
/// runs. The service retries such a write on a new connection until the
/// request's deadline, so a client whose write lands in that window gets a
/// slower 201, once.
@Suite(.timeLimit(.minutes(2)))
struct PromotionRetryTests {
    @Test func aWriteRefusedAsReadOnlyIsRetriedUntilTheServerTakesWrites() throws {
        let options = try TestDatabase.make()
        let databaseURL = TestService.conninfo(options)
        let database = try #require(options.database)
        let (server, port, key) = try StallTests.serve(databaseURL: databaseURL, users: ["promoted"],
                                                       extra: ["WALLET_REQUEST_TIMEOUT_SECONDS": "30"])
        defer { server.kill() }
        #expect(try StallTests.debit(port: port, key: key, user: "promoted", idempotencyKey: "before").status == 201)

        // Every new session is read-only from now on, and the service's
        // sessions end: its next connections land on "a standby".
        let admin = try Connection(options: options)
        defer { admin.close() }
        try admin.execute("ALTER DATABASE \(unsafeSQL: database) SET default_transaction_read_only = on")
        try admin.query("""
            SELECT pg_terminate_backend(pid) FROM pg_stat_activity
            WHERE datname = \(database) AND application_name = 'wallet' AND pid <> pg_backend_pid()
            """)

        let answer = Locked<HTTPTestResponse?>(nil)
        let thread = Thread {
            let response = try? StallTests.debit(port: port, key: key, user: "promoted", idempotencyKey: "during",
                                                 timeoutSeconds: 60)
            answer.withLock { $0 = response }
        }
        thread.start()
        // The write keeps being refused and retried: five refusals (counted
        // as the database unavailable), and still no answer, no debit.
        func readOnlyRefusals() -> Int {
            let metrics = (try? StallTests.get(port: port, path: "/metrics")).map { String(decoding: $0.body, as: UTF8.self) }
            let prefix = #"wallet_db_errors_total{kind="unavailable"} "#
            let line = metrics?.split(separator: "\n").first { $0.hasPrefix(prefix) }
            return line.flatMap { Int($0.dropFirst(prefix.count)) } ?? 0
        }
        #expect(waitFor(seconds: 20) { readOnlyRefusals() >= 5 })
        #expect(answer.withLock { $0 } == nil)
        func balance() throws -> Int64 {
            try admin.query("SELECT balance FROM wallet.wallets WHERE user_id = 'promoted'")[0].decode(Int64.self, at: 0)
        }
        #expect(try balance() == 999_999)

        // "Promotion" completes: new sessions take writes.
        try admin.execute("ALTER DATABASE \(unsafeSQL: database) RESET default_transaction_read_only")
        #expect(waitFor(seconds: 30) { answer.withLock { $0 } != nil })
        let response = try #require(answer.withLock { $0 })
        #expect(response.status == 201)
        #expect(response.header("Idempotent-Replayed") == nil)
        #expect(try balance() == 999_998)
        let metrics = String(decoding: try StallTests.get(port: port, path: "/metrics").body, as: UTF8.self)
        #expect(metrics.contains(#"wallet_db_errors_total{kind="unavailable"}"#))
        let check = try StallTests.check(databaseURL: databaseURL)
        #expect(check.status == 0, "\(check.output)")
    }
}
