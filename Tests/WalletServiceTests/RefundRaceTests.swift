import Foundation
import HTTPServer
import JSON
import Locking
import Postgres
import Testing
import TestSupport
import WalletService
import ServiceTestSupport

/// A credit and Apple's REFUND of the same flowNO, sent at the same instant
/// to the real `wallet serve` over a real PostgreSQL: exactly one of them
/// wins. Either the credit lands first and the refund takes it back, or the
/// refund lands first and the credit is refused as revoked; never a credit
/// left standing after its REFUND was answered.
@Suite(.timeLimit(.minutes(2)))
struct RefundRaceTests {
    /// Small rounds: the service verifies notifications on a bounded pool
    /// (two threads, a queue of 32), so a round that fits the queue races
    /// every one of its refunds against credits still in flight.
    static let roundCount = 40
    static let flowsPerRound = 15
    static let userCount = 8

    @Test func aCreditAndItsRefundSerialize() throws {
        let began = HTTPTestClient.now()
        let binary = try NotifiedBinary()
        defer { binary.stop() }
        let (options, url, port, key, apple, server) = (binary.options, binary.url, binary.port, binary.key,
                                                        binary.apple, binary.server)

        // Rounds of pairs: each round's requests are signed and written
        // before its threads start, so they leave as close together as the
        // machine allows.
        var creditFirst = 0
        var refundFirst = 0
        for round in 0..<Self.roundCount {
            let first = round * Self.flowsPerRound
            let outcome = try Self.race(flows: first..<(first + Self.flowsPerRound), port: port, key: key, apple: apple)
            creditFirst += outcome.creditFirst
            refundFirst += outcome.refundFirst
        }
        let count = Self.roundCount * Self.flowsPerRound

        // The ledger agrees: every credit that stands was refunded by Apple,
        // and every wallet is back at zero.
        let connection = try Connection(options: options)
        defer { connection.close() }
        func number(_ sql: String) throws -> Int {
            try connection.query(PostgresQuery(unsafeSQL: sql))[0].decode(Int.self, at: 0)
        }
        #expect(try number("SELECT count(*) FROM wallet.credits WHERE flow_no LIKE 'race-%' AND status = 'credited'") == 0)
        #expect(try number("SELECT count(*) FROM wallet.credits WHERE flow_no LIKE 'race-%' AND refunded_by = 'apple'")
            == creditFirst)
        #expect(try number("SELECT count(*) FROM wallet.entries WHERE kind = 'refund' AND reference LIKE 'race-%'")
            == creditFirst)
        #expect(try number("SELECT count(*) FROM wallet.appstore_refund_states WHERE notification_type = 'REFUND'")
            == count)
        #expect(try number("SELECT count(*) FROM wallet.wallets WHERE user_id LIKE 'racer-%' AND balance <> 0") == 0)
        let check = try runProcess([CommandLineTests.walletBinary, "check", "--full"],
                                   environment: ChaosRun.walletEnvironment(["WALLET_DATABASE_URL": url]))
        #expect(check.status == 0, "\(check.output)\(check.error)")

        server.signal(SIGTERM)
        #expect(server.waitForExit(seconds: 20) == 0)
        print("refund race: \(count) flowNOs, credit first \(creditFirst), refund first \(refundFirst), "
              + String(format: "%.1f s", HTTPTestClient.now() - began))
    }

    /// Sends a credit and a REFUND for each flowNO, all at once, and checks
    /// that each pair ended one of the two allowed ways.
    static func race(flows: Range<Int>, port: UInt16, key: String, apple: FakeAppStore) throws
        -> (creditFirst: Int, refundFirst: Int) {
        let credits = flows.map { index in
            Array(#"{"user_id":"racer-\#(index % Self.userCount)","flow_no":"race-\#(index)","product_id":"guodong600"}"#.utf8)
        }
        let refunds = flows.map { index in
            Array(RefundNotifications.body(apple: apple, type: "REFUND", flowNo: "race-\(index)",
                                           uuid: RefundNotifications.uuid(index + 1),
                                           signedDateMilliseconds: FakeAppStore.signedDateMilliseconds).utf8)
        }
        let count = flows.count
        let answers = Locked<[Int: (status: Int, detail: String)]>([:])
        let barrier = Barrier(parties: 2 * count)
        let finished = runOnThreads(2 * count, timeoutSeconds: 60) { index in
            let flow = index / 2
            let isCredit = index % 2 == 0
            var answer = (status: -1, detail: "no answer")
            do {
                // Connected first, then released together.
                let client = try HTTPTestClient(port: port, timeoutSeconds: 30)
                defer { client.close() }
                guard barrier.arrive(deadline: Date(timeIntervalSinceNow: 30)) else {
                    answers.withLock { $0[index] = (-1, "barrier timed out") }
                    return
                }
                var response = isCredit
                    ? try client.request(method: "POST", path: "/v1/credits",
                                         headers: TestService.headers(key: key, json: ""), body: credits[flow])
                    : try client.request(method: "POST", path: "/v1/appstore/notifications",
                                         headers: TestService.headers(key: nil, json: ""), body: refunds[flow])
                // The notification pool is bounded, so part of a burst this
                // size is refused 503 `overloaded`, and Apple sends it again:
                // so does this test, racing whatever credits are still queued.
                let retryUntil = Date(timeIntervalSinceNow: 30)
                while !isCredit, response.status == 503, Date() < retryUntil {
                    // Apple's pause before it sends again, shortened: the
                    // sender's behaviour, not a wait for the service.
                    Thread.sleep(forTimeInterval: 0.01)
                    response = try client.request(method: "POST", path: "/v1/appstore/notifications",
                                                  headers: TestService.headers(key: nil, json: ""), body: refunds[flow])
                }
                // A credit's refusal reason, a notification's outcome.
                let json = try? response.json()
                var detail = response.status == 201 ? "credited" : response.text
                if case .string(let text)? = isCredit ? json?["reason"] : json?["outcome"] { detail = text }
                answer = (response.status, detail)
            } catch {
                answer = (-1, String(describing: error))
            }
            answers.withLock { $0[index] = answer }
        }
        #expect(finished, "some requests were still unanswered after 60 s")

        let all = answers.withLock { $0 }
        var creditFirst = 0
        var refundFirst = 0
        for (offset, flow) in flows.enumerated() {
            let credit = all[2 * offset] ?? (-1, "missing")
            let refund = all[2 * offset + 1] ?? (-1, "missing")
            switch (credit.status, credit.detail, refund.status, refund.detail) {
            case (201, "credited", 200, "refunded"): creditFirst += 1
            case (422, "revoked", 200, "revoked"): refundFirst += 1
            default: Issue.record("race-\(flow): credit \(credit.status) \(credit.detail), refund \(refund.status) \(refund.detail)")
            }
        }
        return (creditFirst, refundFirst)
    }

    static func waitForReady(port: UInt16, seconds: Double) -> Bool {
        waitFor(seconds: seconds) {
            guard let client = try? HTTPTestClient(port: port, timeoutSeconds: 5) else { return false }
            defer { client.close() }
            return (try? client.request(method: "GET", path: "/readyz"))?.status == 200
        }
    }
}

/// Lets a fixed number of threads through together, once all have arrived.
final class Barrier: Sendable {
    private let parties: Int
    private let arrived = Locked<Int>(0)
    private let condition = NSCondition()

    init(parties: Int) {
        self.parties = parties
    }

    /// False if not everyone arrived by the deadline.
    func arrive(deadline: Date) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        let count = arrived.withLock { value in
            value += 1
            return value
        }
        if count >= parties {
            condition.broadcast()
            return true
        }
        while arrived.withLock({ $0 }) < parties {
            if !condition.wait(until: deadline) { return false }
        }
        return true
    }
}

/// `wallet serve` as a separate process on a database of its own, trusting
/// a fake App Store's root for notifications, with an app-backend key.
final class NotifiedBinary {
    let options: Connection.Options
    let url: String
    let apple: FakeAppStore
    let rootFile: String
    let key: String
    let server: ServerProcess
    let port: UInt16

    init() throws {
        options = try TestDatabase.make()
        url = TestService.conninfo(options)
        apple = try FakeAppStore()
        rootFile = try RefundNotifications.writeRoot(of: apple)
        key = try ChaosRun.walletCommand(["keys", "create", "--name", "app-backend", "--scopes", "credit,read"],
                                         databaseURL: url).lastLine
        server = try ServerProcess(binary: CommandLineTests.walletBinary, environment: ChaosRun.walletEnvironment([
            "WALLET_DATABASE_URL": url,
            "WALLET_LISTEN": "127.0.0.1:0",
            "WALLET_CREDIT_VERIFICATION": "caller,appstore-jws",
            "WALLET_APPLE_BUNDLE_ID": FakeAppStore.bundleID,
            "WALLET_APPLE_ENVIRONMENTS": "Sandbox",
            "WALLET_APPLE_ROOT_CERTS": rootFile,
        ]))
        let server = server, rootFile = rootFile
        do {
            port = try server.waitForPort()
            try #require(RefundRaceTests.waitForReady(port: port, seconds: 30))
        } catch {
            server.kill()
            try? FileManager.default.removeItem(atPath: rootFile)
            throw error
        }
    }

    func stop() {
        server.kill()
        try? FileManager.default.removeItem(atPath: rootFile)
    }

    func request(_ method: String, _ path: String, key: String?, body: String?) throws -> HTTPTestResponse {
        try TestService.request(port: port, method, path, key: key, json: body)
    }
}
