import Foundation
import HTTPServer
import JSON
import Locking
import Postgres
import Testing
import TestSupport
import ServiceTestSupport

/// Every write endpoint of `wallet serve`, against a primary whose
/// synchronous standby has stopped answering: each write is sent, its
/// commit waits for the standby, and the wait is cancelled. PostgreSQL then
/// reports success with a WARNING although the change lives on the primary
/// alone. The answer must be `503 outcome_unknown`, never a success and
/// never "nothing was written"; and the retry with the same flowNO, key or
/// notification, once the standby is back, answers what was committed.
@Suite(.timeLimit(.minutes(4)))
struct UnconfirmedWriteTests {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// One write through the service, sent while the standby is away and
    /// again once it is back.
    struct Write {
        var name: String
        var method: String
        var path: String
        var key: String?
        var body: String
        var idempotencyKey: String?
        /// The status of the retry, which replays what committed.
        var replayStatus: Int
    }

    /// Connected straight to the primary; the wait is cancelled, so the
    /// server reports the commit with a warning.
    @Test func everyWriteWhoseCommitTheStandbyNeverConfirmedIsAnsweredOutcomeUnknown() throws {
        try writeThroughAnUnconfirmedCommit(pooled: false, ending: "pg_cancel_backend")
    }

    /// Through PgBouncer in transaction mode; the waiting session is
    /// terminated, so the server warns and goes, and the pooler reports
    /// "server conn crashed?" (08P01) in place of the answer.
    @Test func throughAPoolerAWriteWhoseWaitEndedWithItsSessionIsAnsweredOutcomeUnknown() throws {
        try writeThroughAnUnconfirmedCommit(pooled: true, ending: "pg_terminate_backend")
    }

    func writeThroughAnUnconfirmedCommit(pooled: Bool, ending: String) throws {
        try SynchronousReplicationTests.withPrimaryAndStandby("unconfirmed") { primary, standby, admin in
            let direct = try ChaosRun.migratedWalletDatabase(on: primary)
            let bouncer = try pooled ? PgBouncer(before: primary, database: "wallet", resetEveryTransaction: false) : nil
            defer { bouncer?.stop() }
            let databaseURL = bouncer?.conninfo(database: "wallet") ?? direct
            let key = try ChaosRun.walletCommand(["keys", "create", "--name", "backend", "--scopes", "credit,debit,read"],
                                                 databaseURL: databaseURL).lastLine
            let apple = try FakeAppStore()
            let rootFile = try RefundNotifications.writeRoot(of: apple)
            defer { try? FileManager.default.removeItem(atPath: rootFile) }
            // A request time far beyond the test's steps: each 503 must
            // come from the cancelled wait, not from a deadline.
            let server = try ServerProcess(binary: CommandLineTests.walletBinary, environment: ChaosRun.walletEnvironment([
                "WALLET_DATABASE_URL": databaseURL, "WALLET_LISTEN": "127.0.0.1:0",
                "WALLET_CREDIT_VERIFICATION": "caller,appstore-jws", "WALLET_REQUEST_TIMEOUT_SECONDS": "120",
                "WALLET_APPLE_BUNDLE_ID": FakeAppStore.bundleID, "WALLET_APPLE_ENVIRONMENTS": "Sandbox",
                "WALLET_APPLE_ROOT_CERTS": rootFile, "WALLET_DATABASE_SESSION_URL": direct,
                "WALLET_DATABASE_PREPARED_STATEMENTS": pooled ? "false" : "true",
            ]))
            defer { server.kill() }
            let port = try server.waitForPort()
            guard waitFor(seconds: 30, { (try? StallTests.get(port: port, path: "/readyz"))?.status == 200 }) else {
                throw Failure(description: "wallet serve was not ready: \(server.output)")
            }
            @Sendable func send(_ write: Write) throws -> HTTPTestResponse {
                var headers: [(name: String, value: String)] = []
                if let idempotencyKey = write.idempotencyKey { headers.append(("Idempotency-Key", idempotencyKey)) }
                return try TestService.request(port: port, write.method, write.path, key: write.key, json: write.body,
                                               headers: headers, timeoutSeconds: 150)
            }
            func holdID(_ response: HTTPTestResponse) throws -> Int64 {
                guard case .object(let members)? = try response.json()["hold"],
                      case .number(let id)? = members.first(where: { $0.key == "id" })?.value,
                      let value = Int64(id) else {
                    throw Failure(description: "no hold id in \(response.text)")
                }
                return value
            }

            // Before the standby goes: coins, two holds, and a credit for Apple to refund.
            let user = "unconfirmed-user"
            for flowNo in ["u-fund-1", "u-fund-2", "u-refunded"] {
                let funded = try send(Write(name: "fund", method: "POST", path: "/v1/credits", key: key,
                                            body: #"{"user_id":"\#(user)","flow_no":"\#(flowNo)","product_id":"guodong600"}"#,
                                            replayStatus: 200))
                #expect(funded.status == 201, "\(funded.text)")
            }
            let hold = { (idempotencyKey: String) in
                Write(name: "hold", method: "POST", path: "/v1/holds", key: key,
                      body: #"{"user_id":"\#(user)","amount":100}"#, idempotencyKey: idempotencyKey, replayStatus: 201)
            }
            let toCapture = try holdID(send(hold("u-hold-a")))
            let toRelease = try holdID(send(hold("u-hold-b")))

            let writes = [
                Write(name: "credit", method: "POST", path: "/v1/credits", key: key,
                      body: #"{"user_id":"\#(user)","flow_no":"u-credit","product_id":"guodong600"}"#, replayStatus: 200),
                Write(name: "debit", method: "POST", path: "/v1/debits", key: key,
                      body: #"{"user_id":"\#(user)","amount":50,"reason":"sword"}"#, idempotencyKey: "u-debit",
                      replayStatus: 201),
                hold("u-hold-c"),
                Write(name: "capture", method: "POST", path: "/v1/holds/\(toCapture)/capture", key: key, body: "{}",
                      idempotencyKey: "u-capture", replayStatus: 201),
                Write(name: "release", method: "POST", path: "/v1/holds/\(toRelease)/release", key: key, body: "{}",
                      idempotencyKey: "u-release", replayStatus: 200),
                Write(name: "refund notification", method: "POST", path: "/v1/appstore/notifications", key: nil,
                      body: RefundNotifications.body(apple: apple, type: "REFUND", flowNo: "u-refunded",
                                                     uuid: RefundNotifications.uuid(77),
                                                     signedDateMilliseconds: FakeAppStore.signedDateMilliseconds + 1_000),
                      replayStatus: 200),
            ]

            try standby.stop(mode: .fast)
            var firstAnswers: [String: HTTPTestResponse] = [:]
            for write in writes {
                let answer = Locked<Result<HTTPTestResponse, any Error>?>(nil)
                let thread = Thread { answer.withLock { $0 = Result { try send(write) } } }
                thread.start()
                #expect(waitFor(seconds: 30) {
                    let ended = try? admin.query("""
                        SELECT \(unsafeSQL: ending)(pid) FROM pg_stat_activity
                        WHERE datname = 'wallet' AND wait_event = 'SyncRep'
                        """)
                    return (ended?.count ?? 0) > 0
                }, "\(write.name): never waited for the standby")
                #expect(waitFor(seconds: 60) { answer.withLock { $0 != nil } }, "\(write.name): no answer")
                let response = try #require(answer.withLock { $0 }).get()
                #expect(response.status == 503, "\(write.name): \(response.status) \(response.text)")
                #expect(StallTests.code(response) == "outcome_unknown", "\(write.name): \(response.text)")
                #expect(response.header("Retry-After") != nil, "\(write.name)")
                firstAnswers[write.name] = response
            }

            // With the standby back, each retry finds what committed on the
            // primary and answers it as a replay: nothing twice.
            try standby.start()
            #expect(SynchronousReplicationTests.waitForSynchronousStandby(admin))
            for write in writes {
                let retry = try send(write)
                #expect(retry.status == write.replayStatus, "\(write.name): \(retry.status) \(retry.text)")
                if write.name == "refund notification" {
                    #expect((try? retry.json()["outcome"]) == .string("duplicate"), "\(retry.text)")
                } else {
                    #expect(retry.header("Idempotent-Replayed") == "true", "\(write.name): \(retry.text)")
                }
            }
            let wallet = try Connection(options: .init(conninfo: direct))
            defer { wallet.close() }
            // 3 × 600 funded + 600 credited − 600 refunded − 50 debited − 100 captured.
            #expect(try wallet.query("SELECT balance FROM wallet.wallets WHERE user_id = \(user)")[0]
                .decode(Int.self, at: 0) == 1_650)
            #expect(try wallet.query("SELECT count(*) FROM wallet.entries WHERE user_id = \(user)")[0]
                .decode(Int.self, at: 0) == 7)
            let check = try StallTests.check(databaseURL: direct)
            #expect(check.status == 0, "\(check.output)")
        }
    }
}
