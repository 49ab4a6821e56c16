import Foundation
import HTTPServer
import Locking
import Postgres
import Testing
import TestSupport
import ServiceTestSupport

/// A primary with a synchronous standby. When the standby is gone, a
/// commit waits for it; if that wait is cancelled, PostgreSQL reports the
/// commit as a success with a WARNING, although the row exists on the
/// primary alone and a failover loses it. The service must never answer
/// such a commit 2xx.
@Suite(.timeLimit(.minutes(3)))
struct SynchronousReplicationTests {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Waits until the primary counts a synchronous standby.
    static func waitForSynchronousStandby(_ admin: Connection) -> Bool {
        waitFor(seconds: 60) {
            let count = try? admin.query("SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'")[0]
                .decode(Int.self, at: 0)
            return (count ?? 0) > 0
        }
    }

    /// Cancels the first session of `database` that waits for the standby.
    static func cancelTheWaitForTheStandby(_ admin: Connection, database: String) throws -> Bool {
        var cancelled = false
        _ = waitFor(seconds: 30) {
            let rows = try? admin.query("""
                SELECT pg_cancel_backend(pid) FROM pg_stat_activity
                WHERE datname = \(database) AND wait_event = 'SyncRep'
                """)
            cancelled = rows.map { !$0.isEmpty } ?? false
            return cancelled
        }
        return cancelled
    }

    /// A running primary that waits for a synchronous standby, that
    /// standby, and a superuser connection to the primary, for `body`;
    /// all gone afterwards.
    static func withPrimaryAndStandby<T>(_ name: String,
                                         _ body: (LocalCluster, LocalCluster, Connection) throws -> T) throws -> T {
        let primary = try TestCluster.start(name: "\(name)-primary", settings: ["synchronous_standby_names": "'*'"])
        defer { TestCluster.destroy(primary) }
        let standby = try TestCluster.startStandby(of: primary, name: "\(name)-standby")
        defer { TestCluster.destroy(standby) }
        let admin = try Connection(options: .init(conninfo: primary.conninfo()))
        defer { admin.close() }
        guard waitForSynchronousStandby(admin) else { throw Failure(description: "the standby never became synchronous") }
        return try body(primary, standby, admin)
    }

    /// Through the service: a credit whose commit the standby never
    /// confirmed is 503 `outcome_unknown`, and the retry after the standby
    /// is back replays it, once.
    @Test func aCommitTheStandbyNeverConfirmedIsAnsweredOutcomeUnknown() throws {
        try Self.withPrimaryAndStandby("syncrep") { primary, standby, admin in
            let databaseURL = try ChaosRun.migratedWalletDatabase(on: primary)
            let key = try ChaosRun.walletCommand(["keys", "create", "--name", "shop", "--scopes", "credit"],
                                                 databaseURL: databaseURL).lastLine
            // A request time far beyond the test's steps: the 503 must come
            // from the warning, not from a deadline.
            let server = try ServerProcess(binary: CommandLineTests.walletBinary, environment: ChaosRun.walletEnvironment([
                "WALLET_DATABASE_URL": databaseURL, "WALLET_LISTEN": "127.0.0.1:0",
                "WALLET_CREDIT_VERIFICATION": "caller", "WALLET_REQUEST_TIMEOUT_SECONDS": "120",
            ]))
            defer { server.kill() }
            let port = try server.waitForPort()
            guard waitFor(seconds: 30, { (try? StallTests.get(port: port, path: "/readyz"))?.status == 200 }) else {
                throw Failure(description: "wallet serve was not ready: \(server.output)")
            }
            @Sendable func credit(_ flowNo: String) throws -> HTTPTestResponse {
                try TestService.request(port: port, "POST", "/v1/credits", key: key,
                                        json: #"{"user_id":"sync-user","flow_no":"\#(flowNo)","product_id":"guodong600"}"#,
                                        timeoutSeconds: 150)
            }
            let before = try credit("sync-before")
            #expect(before.status == 201, "\(String(decoding: before.body, as: UTF8.self))")

            try standby.stop(mode: .fast)
            let answer = Locked<Result<HTTPTestResponse, any Error>?>(nil)
            let thread = Thread { answer.withLock { $0 = Result { try credit("sync-lost") } } }
            thread.start()
            #expect(try Self.cancelTheWaitForTheStandby(admin, database: "wallet"))
            #expect(waitFor(seconds: 60) { answer.withLock { $0 != nil } })
            let response = try #require(answer.withLock { $0 }).get()
            #expect(response.status == 503)
            #expect(StallTests.code(response) == "outcome_unknown")
            #expect(response.header("Retry-After") != nil)

            // The row is on the primary: this is the acknowledgement a
            // failover would have taken back.
            let wallet = try Connection(options: .init(conninfo: databaseURL))
            defer { wallet.close() }
            #expect(try wallet.query("SELECT count(*) FROM wallet.credits WHERE flow_no = 'sync-lost'")[0]
                .decode(Int.self, at: 0) == 1)
            let metrics = try StallTests.get(port: port, path: "/metrics")
            #expect(String(decoding: metrics.body, as: UTF8.self).contains(#"wallet_db_errors_total{kind="unconfirmed_commit"} 1"#))

            // With the standby back, the client's retry finds the credit and
            // answers it as a replay; the ledger holds it once.
            try standby.start()
            #expect(Self.waitForSynchronousStandby(admin))
            let retry = try credit("sync-lost")
            #expect(retry.status == 200)
            #expect(try wallet.query("SELECT balance FROM wallet.wallets WHERE user_id = 'sync-user'")[0]
                .decode(Int.self, at: 0) == 1_200)
            #expect(try wallet.query("SELECT count(*) FROM wallet.credits WHERE flow_no = 'sync-lost'")[0]
                .decode(Int.self, at: 0) == 1)
            let check = try StallTests.check(databaseURL: databaseURL)
            #expect(check.status == 0, "\(check.output)")
        }
    }

    /// A service that reaches a standby (a pooler or an address still
    /// pointing at a demoted primary) answers reads there, but it is not
    /// ready: no primary is reachable through it.
    @Test func aServiceOnAStandbyIsNotReady() throws {
        try Self.withPrimaryAndStandby("readyz") { primary, standby, admin in
            let databaseURL = try ChaosRun.migratedWalletDatabase(on: primary)
            let standbyURL = standby.conninfo(database: "wallet")
            func serve(_ url: String) throws -> (ServerProcess, UInt16) {
                let server = try ServerProcess(binary: CommandLineTests.walletBinary, environment: ChaosRun.walletEnvironment([
                    "WALLET_DATABASE_URL": url, "WALLET_LISTEN": "127.0.0.1:0", "WALLET_CREDIT_VERIFICATION": "caller",
                ]), arguments: ["serve", "--no-migrate"])
                return (server, try server.waitForPort())
            }
            let (onPrimary, primaryPort) = try serve(databaseURL)
            defer { onPrimary.kill() }
            let (onStandby, standbyPort) = try serve(standbyURL)
            defer { onStandby.kill() }
            #expect(waitFor(seconds: 30) { (try? StallTests.get(port: primaryPort, path: "/readyz"))?.status == 200 })
            // The standby has the schema (its reads work), and stays not ready.
            let replica = try Connection(options: .init(conninfo: standbyURL))
            defer { replica.close() }
            #expect(waitFor(seconds: 30) {
                (try? replica.query("SELECT to_regclass('wallet.entries') IS NOT NULL")[0].decode(Bool.self, at: 0)) == true
            })
            // Each probe asks the database afresh whether it takes writes, so
            // a probe later would find what these find.
            for _ in 0..<3 {
                let answer = try StallTests.get(port: standbyPort, path: "/readyz")
                #expect(answer.status == 503)
                #expect(StallTests.code(answer) == "database_unavailable")
            }
        }
    }

    /// Each protocol path a write can take (COMMIT of an explicit
    /// transaction, a single statement carrying its own settings in a
    /// pipeline, a script in the simple protocol), with the wait for the
    /// standby ended by a cancel (the commit is reported with a WARNING) and
    /// by a termination (the WARNING, then the session's end): each throws
    /// `.unconfirmedCommit`, sent, instead of returning or of claiming that
    /// nothing ran; and each write is on the primary.
    @Test func everyProtocolPathReportsAnUnconfirmedCommitAsAnError() throws {
        try Self.withPrimaryAndStandby("syncconn") { primary, standby, admin in
            try admin.execute("CREATE TABLE sync_rows (id INT PRIMARY KEY)")
            try standby.stop(mode: .fast)

            let outcome = Locked<[String]>([])
            func attempt(_ name: String, ending: String, _ body: @escaping @Sendable (Connection) throws -> Void) throws {
                let writer = try Connection(options: .init(conninfo: primary.conninfo()))
                defer { writer.close() }
                let done = Locked<Bool>(false)
                let thread = Thread {
                    do {
                        try body(writer)
                        outcome.withLock { $0.append("\(name) \(ending): returned") }
                    } catch let error as PostgresError {
                        let kind = error.kind == .unconfirmedCommit ? "unconfirmed" : "\(error)"
                        outcome.withLock { $0.append("\(name) \(ending): \(kind) sent=\(error.sent)") }
                    } catch {
                        outcome.withLock { $0.append("\(name) \(ending): \(error)") }
                    }
                    done.withLock { $0 = true }
                }
                thread.start()
                var ended = false
                #expect(waitFor(seconds: 30) {
                    let rows = try? admin.query("""
                        SELECT \(unsafeSQL: ending == "cancelled" ? "pg_cancel_backend" : "pg_terminate_backend")(pid)
                        FROM pg_stat_activity WHERE datname = 'postgres' AND wait_event = 'SyncRep'
                        """)
                    ended = rows.map { !$0.isEmpty } ?? false
                    return ended
                }, "\(name) \(ending): never waited for the standby")
                #expect(waitFor(seconds: 30) { done.withLock { $0 } })
            }
            var id = 0
            for ending in ["cancelled", "terminated"] {
                id += 1
                let commit = id
                try attempt("commit", ending: ending) { writer in
                    try writer.begin()
                    try writer.execute("INSERT INTO sync_rows VALUES (\(commit))")
                    try writer.execute("COMMIT")
                }
                id += 1
                let single = id
                try attempt("pipeline", ending: ending) { writer in
                    _ = try writer.withLocalSettings { try $0.query("INSERT INTO sync_rows VALUES (\(single))") }
                }
                id += 1
                let script = id
                try attempt("script", ending: ending) { writer in
                    try writer.executeScript(unsafeSQL: "INSERT INTO sync_rows VALUES (\(script))")
                }
            }
            #expect(outcome.withLock { $0 } == [
                "commit cancelled: unconfirmed sent=true", "pipeline cancelled: unconfirmed sent=true",
                "script cancelled: unconfirmed sent=true", "commit terminated: unconfirmed sent=true",
                "pipeline terminated: unconfirmed sent=true", "script terminated: unconfirmed sent=true",
            ])
            // Every one committed on the primary.
            #expect(try admin.query("SELECT count(*) FROM sync_rows")[0].decode(Int.self, at: 0) == 6)
        }
    }
}
