import AppStore
import Crypto
import CryptoTestSupport
import Foundation
import HTTPServer
import JSON
import Locking
import Postgres
import ServiceTestSupport
import Testing
import TestSupport

/// The App Store Server API through the real `wallet` binary: flowNO-only
/// credits, notification reconciliation and consumption answers, against a
/// fake API on loopback that checks every token as Apple does.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct ServerAPITests {
    // MARK: flowNO-only credits

    @Test func aBareFlowNoIsCreditedFromProductionThenFromSandbox() throws {
        let rig = try ServerAPIRig()
        defer { rig.stop() }
        rig.fixture.appleKnows("3000000001", environment: "Production")
        let production = try rig.credit(flowNo: "3000000001", userID: "p1")
        #expect(production.status == 201, "\(production.text)")
        #expect(try production.json()["balance"]?["balance"] == 600)

        rig.fixture.appleKnows("3000000002", environment: "Sandbox")
        let sandbox = try rig.credit(flowNo: "3000000002", userID: "p2")
        #expect(sandbox.status == 201, "\(sandbox.text)")

        let rows = try rig.rows("SELECT flow_no, source, environment FROM wallet.credits ORDER BY flow_no")
        #expect(rows == [["3000000001", "appstore-api", "Production"], ["3000000002", "appstore-api", "Sandbox"]])
        // Production first; Sandbox only after Production's 4040010.
        let asked = rig.api.received(pathContaining: "/transactions/").map { "\($0.environment) \($0.path)" }
        #expect(asked == [
            "Production /inApps/v1/transactions/3000000001",
            "Production /inApps/v1/transactions/3000000002",
            "Sandbox /inApps/v1/transactions/3000000002",
        ])
        let problems = rig.api.received.compactMap(\.tokenProblem)
        #expect(problems.isEmpty, "\(problems)")
        // Unbound flowNO-only credits are accepted here, and the log says so.
        #expect(rig.server.output.contains("without WALLET_APPLE_REQUIRE_ACCOUNT_TOKEN"), "\(rig.server.output)")
        #expect(try rig.violations() == 0)
    }

    @Test func aFlowNoAppleDoesNotKnowIsRefusedCachedAndRateLimited() throws {
        let rig = try ServerAPIRig()
        defer { rig.stop() }
        let first = try rig.credit(flowNo: "3000000100", userID: "scanner")
        #expect(first.status == 422, "\(first.text)")
        #expect(try first.json()["code"] == "verification_failed")
        #expect(try first.json()["reason"] == "transaction_not_found")
        #expect(rig.api.received.count == 2)  // Production, then Sandbox

        // The same flowNO again within the minute: answered without asking.
        let again = try rig.credit(flowNo: "3000000100", userID: "scanner")
        #expect(try again.json()["reason"] == "transaction_not_found")
        #expect(rig.api.received.count == 2)

        // Nine more unknown ids reach the limit of ten a minute; the next is 429.
        for number in 101...109 {
            let response = try rig.credit(flowNo: "3000000\(number)", userID: "scanner")
            #expect(response.status == 422, "\(response.text)")
        }
        let asked = rig.api.received.count
        #expect(asked == 20)
        let limited = try rig.credit(flowNo: "3000000110", userID: "scanner")
        #expect(limited.status == 429, "\(limited.text)")
        #expect(try limited.json()["code"] == "rate_limited")
        #expect(Int(limited.header("Retry-After") ?? "") ?? 0 >= 1)
        #expect(limited.header("Content-Type") == "application/problem+json")
        #expect(rig.api.received.count == asked)
        // Another user is not limited by this one.
        rig.fixture.appleKnows("3000000111", environment: "Production")
        #expect(try rig.credit(flowNo: "3000000111", userID: "honest").status == 201)
        #expect(try rig.count("SELECT count(*) FROM wallet.credits") == 1)
    }

    @Test func appleDownIsUnavailableWritesNothingAndTheRetrySucceeds() throws {
        let rig = try ServerAPIRig()
        defer { rig.stop() }
        rig.fixture.appleKnows("3000000200", environment: "Production")
        // More failures than the two-second deadline has room to retry.
        rig.api.fail(.init(status: 500, pathContaining: "/transactions/"), count: 50)
        let down = try rig.credit(flowNo: "3000000200", userID: "p3")
        #expect(down.status == 503, "\(down.text)")
        #expect(try down.json()["code"] == "verification_unavailable")
        #expect(down.header("Retry-After") != nil)
        #expect(rig.api.received.count > 1, "5xx is retried")
        #expect(try rig.count("SELECT count(*) FROM wallet.credits") == 0)
        #expect(try rig.count("SELECT count(*) FROM wallet.entries") == 0)

        rig.api.clearFailures()
        let retried = try rig.credit(flowNo: "3000000200", userID: "p3")
        #expect(retried.status == 201, "\(retried.text)")

        // A 429 with Retry-After inside the deadline is waited out.
        rig.fixture.appleKnows("3000000201", environment: "Production")
        rig.api.fail(.init(status: 429, retryAfter: "1", pathContaining: "/transactions/3000000201"), count: 1)
        let throttled = try rig.credit(flowNo: "3000000201", userID: "p3")
        #expect(throttled.status == 201, "\(throttled.text)")
        #expect(rig.api.received(pathContaining: "/transactions/3000000201").count == 2)
        let metrics = try rig.request("GET", "/metrics", key: nil, body: nil).text
        #expect(metrics.contains(#"wallet_appstore_api_requests_total{endpoint="get_transaction_info",status="5xx"}"#))
        #expect(metrics.contains(#"wallet_appstore_api_requests_total{endpoint="get_transaction_info",status="4xx"} 1"#))
        #expect(metrics.contains(#"wallet_appstore_api_request_duration_seconds_count{endpoint="get_transaction_info",status="2xx"} 2"#))
    }

    @Test func concurrentCreditsOfOneBareFlowNoCreditItOnce() throws {
        let rig = try ServerAPIRig()
        defer { rig.stop() }
        rig.fixture.appleKnows("3000000250", environment: "Production")
        let statuses = Locked<[Int]>([])
        #expect(runOnThreads(16) { _ in
            let status = (try? rig.credit(flowNo: "3000000250", userID: "racer").status) ?? 0
            statuses.withLock { $0.append(status) }
        })
        let seen = statuses.withLock { $0 }.sorted()
        #expect(seen.filter { $0 == 201 }.count == 1, "\(seen)")
        #expect(seen.filter { $0 == 200 }.count == 15, "\(seen)")
        #expect(try rig.count("SELECT count(*) FROM wallet.entries") == 1)
        #expect(try rig.count("SELECT balance FROM wallet.wallets WHERE user_id = 'racer'") == 600)
        #expect(try rig.violations() == 0)
    }

    @Test func aReplayIsAnsweredFromTheLedgerWithoutAskingApple() throws {
        let rig = try ServerAPIRig()
        defer { rig.stop() }
        rig.fixture.appleKnows("3000000300", environment: "Production")
        #expect(try rig.credit(flowNo: "3000000300", userID: "p4").status == 201)
        let asked = rig.api.received.count
        // Apple would now refuse to answer: the replay must not need it.
        rig.api.fail(.init(status: 500), count: 100)
        let replay = try rig.credit(flowNo: "3000000300", userID: "p4")
        #expect(replay.status == 200, "\(replay.text)")
        #expect(replay.header("Idempotent-Replayed") == "true")
        let conflict = try rig.credit(flowNo: "3000000300", userID: "someone-else")
        #expect(conflict.status == 409, "\(conflict.text)")
        #expect(try conflict.json()["code"] == "flow_no_conflict")
        #expect(rig.api.received.count == asked)
        #expect(try rig.count("SELECT count(*) FROM wallet.entries") == 1)
    }

    @Test func aWrongKeyIsUnavailableAndTheLogNamesTheConfiguration() throws {
        let rig = try ServerAPIRig(keyIDSent: "WRONGKEY01")
        defer { rig.stop() }
        rig.fixture.appleKnows("3000000400", environment: "Production")
        for _ in 0..<3 {
            let refused = try rig.credit(flowNo: "3000000400", userID: "p5")
            #expect(refused.status == 503, "\(refused.text)")
            #expect(try refused.json()["code"] == "verification_unavailable")
        }
        // A 401 is final: not retried.
        #expect(rig.api.received.count == 3)
        #expect(rig.api.received.allSatisfy { $0.tokenProblem == "kid" })
        #expect(rig.server.waitForOutput(containing: "refused the key", seconds: 5))
        // Logged once a minute at most, naming the settings, never the key.
        #expect(rig.server.output.components(separatedBy: "refused the key").count == 2, "\(rig.server.output)")
        #expect(rig.server.output.contains("WALLET_APPLE_API_PRIVATE_KEY_FILE"))
        #expect(!rig.server.output.contains("PRIVATE KEY-----"))
        #expect(try rig.count("SELECT count(*) FROM wallet.credits") == 0)
    }

    @Test func theModeRefusesToStartWithoutItsCredentials() throws {
        let result = try runProcess(
            [ServerProcess.walletBinary, "serve"],
            environment: ChaosRun.walletEnvironment([
                "WALLET_DATABASE_URL": "postgresql:///nowhere", "WALLET_CREDIT_VERIFICATION": "appstore-api",
                "WALLET_APPLE_BUNDLE_ID": FakeAppStore.bundleID, "WALLET_APPLE_ENVIRONMENTS": "Sandbox",
                "WALLET_APPLE_API_KEY_ID": "KEY1234567",
            ]), timeoutSeconds: 30)
        #expect(result.status != 0)
        #expect(result.error.contains("WALLET_APPLE_API_ISSUER_ID"), "\(result.error)")
    }

    // MARK: Reconciliation

    @Test func reconcileAppliesAMissedRefundOnceEvenWhileItIsPushed() throws {
        let rig = try ServerAPIRig()
        defer { rig.stop() }
        for number in 0..<5 {
            let flowNo = "300000050\(number)"
            rig.fixture.appleKnows(flowNo, environment: "Production")
            #expect(try rig.credit(flowNo: flowNo, userID: "r\(number)").status == 201)
        }
        // Five refunds Apple could not deliver, plus one signed by a stranger.
        var payloads: [String] = []
        for number in 0..<5 {
            let payload = rig.fixture.notification("REFUND", flowNo: "300000050\(number)", uuid: RefundNotifications.uuid(500 + number))
            payloads.append(payload)
            rig.api.addNotification(payload, signedDateMilliseconds: rig.nowMilliseconds(), environment: "Production")
        }
        var validity = FakeAppStore.Options()
        validity.validity = Date().addingTimeInterval(-86_400)...Date().addingTimeInterval(86_400)
        let stranger = try FakeAppStore(validity)
        rig.api.addNotification(rig.fixture.notification("REFUND", flowNo: "3000000509", uuid: RefundNotifications.uuid(509),
                                                 signer: stranger),
                                signedDateMilliseconds: rig.nowMilliseconds(), environment: "Production")

        // Apple's retry of the same notifications arrives during the sweep.
        let pushed = Locked<[Int?]>([])
        let pushing = DispatchSemaphore(value: 0)
        let pushedPayloads = payloads
        Thread {
            for payload in pushedPayloads {
                let status = try? rig.push(payload)
                pushed.withLock { $0.append(status) }
            }
            pushing.signal()
        }.start()
        let run = try rig.reconcile(["--since", rig.rfc3339(secondsAgo: 3_600), "--environment", "Production"])
        #expect(pushing.wait(timeout: .now() + 60) == .success)
        #expect(run.status == 0, "\(run.error)")
        #expect(pushed.withLock { $0 } == Array(repeating: 200, count: 5))
        let summary = Self.summary(run.output)
        #expect(summary["seen"] == 6)
        #expect(summary["refused"] == 1)
        #expect((summary["applied"] ?? 0) + (summary["already"] ?? 0) == 5)
        #expect(run.error.contains("notification refused"), "\(run.error)")

        // Each refund once, whoever got there first.
        #expect(try rig.count("SELECT count(*) FROM wallet.entries WHERE kind = 'refund'") == 5)
        #expect(try rig.count("SELECT count(*) FROM wallet.credits WHERE status = 'refunded'") == 5)
        #expect(try rig.count("SELECT coalesce(sum(balance), 0) FROM wallet.wallets") == 0)
        // Pages were followed: six notifications, two per page.
        #expect(rig.api.received(pathContaining: "/notifications/history").count == 3)

        // A second run finds everything recorded.
        let again = try rig.reconcile(["--since", rig.rfc3339(secondsAgo: 3_600), "--environment", "Production"])
        #expect(again.status == 0)
        #expect(Self.summary(again.output) == ["seen": 6, "applied": 0, "already": 5, "refused": 1, "credited": 0])
        #expect(try rig.violations() == 0)
    }

    @Test func reconcileCreditsAChargeWhosePushWasLostOnce() throws {
        let rig = try ServerAPIRig(extra: ["WALLET_APPLE_ACCOUNT_TOKEN_NAMESPACE": "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"])
        defer { rig.stop() }
        let tokens = try rig.request("GET", "/v1/wallets/kim/account-tokens", key: rig.appKey, body: nil)
        guard case .string(let token)? = try tokens.json()["apple_app_account_token"] else {
            Issue.record("no token: \(tokens.text)")
            return
        }
        // The charge Apple could not push: only its history has it.
        rig.api.addNotification(rig.fixture.notification("ONE_TIME_CHARGE", flowNo: "3000000601",
                                                         uuid: RefundNotifications.uuid(601), accountToken: token),
                                signedDateMilliseconds: rig.nowMilliseconds(), environment: "Production")
        let run = try rig.reconcile(["--since", rig.rfc3339(secondsAgo: 3_600), "--environment", "Production"])
        #expect(run.status == 0, "\(run.error)")
        #expect(Self.summary(run.output) == ["seen": 1, "applied": 1, "already": 0, "refused": 0, "credited": 1])
        #expect(try rig.count("SELECT balance FROM wallet.wallets WHERE user_id = 'kim'") == 600)
        // A second sweep changes nothing.
        let again = try rig.reconcile(["--since", rig.rfc3339(secondsAgo: 3_600), "--environment", "Production"])
        #expect(Self.summary(again.output) == ["seen": 1, "applied": 0, "already": 1, "refused": 0, "credited": 0])
        #expect(try rig.count("SELECT count(*) FROM wallet.credits WHERE source = 'appstore-notification'") == 1)
        #expect(try rig.count("SELECT balance FROM wallet.wallets WHERE user_id = 'kim'") == 600)
        #expect(try rig.violations() == 0)
    }

    @Test func reconcileExitsOneWhenTheHistoryCannotBeReadAndMovesItsMarkOnlyOnSuccess() throws {
        let rig = try ServerAPIRig()
        defer { rig.stop() }
        rig.api.fail(.init(status: 500, pathContaining: "/notifications/history"), count: 100)
        let failed = try rig.reconcile([])
        #expect(failed.status == 1, "\(failed.output) \(failed.error)")
        #expect(failed.error.contains("reconcile failed"), "\(failed.error)")
        #expect(try rig.count("SELECT count(*) FROM wallet.appstore_reconcile_marks") == 0)

        rig.api.clearFailures()
        let succeeded = try rig.reconcile([])
        #expect(succeeded.status == 0, "\(succeeded.error)")
        #expect(Self.summary(succeeded.output) == ["seen": 0, "applied": 0, "already": 0, "refused": 0, "credited": 0])
        // Both accepted environments were swept and marked.
        #expect(try rig.count("SELECT count(*) FROM wallet.appstore_reconcile_marks") == 2)
        // The first sweep looked back seven days.
        let first = try #require(rig.api.received(pathContaining: "/notifications/history").last?.bodyJSON)
        let start = (first["startDate"] as? NSNumber)?.int64Value ?? 0
        let end = (first["endDate"] as? NSNumber)?.int64Value ?? 0
        #expect(abs((end - start) - 7 * 86_400_000) < 60_000, "\(start) \(end)")
        // The bytes: the two members in key order.
        let sent = try #require(rig.api.received(pathContaining: "/notifications/history").last?.body)
        #expect(String(decoding: sent, as: UTF8.self) == #"{"endDate":\#(end),"startDate":\#(start)}"#)
    }

    // MARK: Consumption answers

    @Test func consumptionRequestsAreAnsweredWithWhatWasSpent() throws {
        let rig = try ServerAPIRig()
        defer { rig.stop() }
        // 0%, 50% and 100% spent, and a purchase refunded before Apple asks.
        let cases: [(flowNo: String, spend: Int64)] = [("3000000600", 0), ("3000000601", 300), ("3000000602", 600),
                                                       ("3000000603", 0)]
        for (index, item) in cases.enumerated() {
            rig.fixture.appleKnows(item.flowNo, environment: "Production")
            #expect(try rig.credit(flowNo: item.flowNo, userID: "c\(index)").status == 201)
            if item.spend > 0 { #expect(try rig.debit(userID: "c\(index)", amount: item.spend, key: "spend-\(index)") == 201) }
        }
        let refund = rig.fixture.notification("REFUND", flowNo: "3000000603", uuid: RefundNotifications.uuid(603))
        #expect(try rig.push(refund) == 200)

        for (index, item) in cases.enumerated() {
            let request = rig.fixture.notification("CONSUMPTION_REQUEST", flowNo: item.flowNo, uuid: RefundNotifications.uuid(700 + index))
            #expect(try rig.push(request) == 200)
        }
        // A duplicate delivery queues nothing more.
        #expect(try rig.push(rig.fixture.notification("CONSUMPTION_REQUEST", flowNo: "3000000600",
                                              uuid: RefundNotifications.uuid(700))) == 200)
        // One Apple sent 13 hours ago (found late, say) is past its window: not sent.
        #expect(try rig.push(rig.fixture.notification("CONSUMPTION_REQUEST", flowNo: "3000000601",
                                              uuid: RefundNotifications.uuid(710), secondsAgo: 13 * 3_600)) == 200)
        #expect(waitFor(seconds: 30) {
            (try? rig.count("SELECT count(*) FROM wallet.outbox WHERE kind = 'appstore_consumption' AND status = 'sent'")) == 4
        })
        #expect(waitFor(seconds: 30) {
            (try? rig.count("SELECT count(*) FROM wallet.outbox WHERE kind = 'appstore_consumption' AND status = 'failed'")) == 1
        })
        #expect(try rig.rows("""
            SELECT key, attempts::text, last_error LIKE '%window had passed%' FROM wallet.outbox
            WHERE kind = 'appstore_consumption' AND status = 'failed'
            """) == [[RefundNotifications.uuid(710), "1", "t"]])
        let sent = rig.api.received(pathContaining: "/transactions/consumption/")
        #expect(sent.count == 4)
        #expect(sent.allSatisfy { $0.method == "PUT" && $0.environment == "Production" && $0.authorized })
        func body(_ flowNo: String) -> [String: Any]? {
            sent.first { $0.path.hasSuffix("/" + flowNo) }?.bodyJSON
        }
        let expected: [(String, String, Int?, String)] = [
            ("3000000600", "DELIVERED", 0, "GRANT_FULL"),
            ("3000000601", "DELIVERED", 50_000, "GRANT_PRORATED"),
            ("3000000602", "DELIVERED", 100_000, "DECLINE"),
            ("3000000603", "UNDELIVERED_OTHER", nil, "GRANT_FULL"),
        ]
        for (flowNo, delivery, percentage, preference) in expected {
            let answer = try #require(body(flowNo), "no answer for \(flowNo)")
            #expect(answer["customerConsented"] as? Bool == true)
            #expect(answer["sampleContentProvided"] as? Bool == false)
            #expect(answer["deliveryStatus"] as? String == delivery, "\(flowNo)")
            #expect((answer["consumptionPercentage"] as? NSNumber)?.intValue == percentage, "\(flowNo)")
            #expect(answer["refundPreference"] as? String == preference, "\(flowNo)")
        }
        let metrics = try rig.request("GET", "/metrics", key: nil, body: nil).text
        #expect(metrics.contains(#"wallet_appstore_consumption_total{outcome="sent"} 4"#))
        #expect(metrics.contains(#"wallet_appstore_consumption_total{outcome="queued"} 5"#))
        #expect(metrics.contains(#"wallet_appstore_consumption_total{outcome="failed"} 1"#))
    }

    /// Apple also asks about auto-renewable subscriptions, which the wallet
    /// does not sell: such a request is recorded, queues no answer, and is
    /// not counted as queued. The database decides what it queues, and the
    /// metric counts what it did.
    @Test func aConsumptionRequestAboutASubscriptionQueuesNoAnswerAndCountsNone() throws {
        let rig = try ServerAPIRig()
        defer { rig.stop() }
        let request = rig.fixture.notification("CONSUMPTION_REQUEST", flowNo: "3000000900",
                                               uuid: RefundNotifications.uuid(900),
                                               productType: "Auto-Renewable Subscription")
        #expect(try rig.push(request) == 200)
        #expect(try rig.rows("SELECT outcome FROM wallet.appstore_notifications") == [["recorded"]])
        #expect(try rig.count("SELECT count(*) FROM wallet.outbox") == 0)
        let metrics = try rig.request("GET", "/metrics", key: nil, body: nil).text
        #expect(metrics.contains(#"wallet_appstore_consumption_total{outcome="queued"} 0"#))

        // A consumable's is queued and counted.
        rig.fixture.appleKnows("3000000901", environment: "Production")
        #expect(try rig.credit(flowNo: "3000000901", userID: "s1").status == 201)
        #expect(try rig.push(rig.fixture.notification("CONSUMPTION_REQUEST", flowNo: "3000000901",
                                                      uuid: RefundNotifications.uuid(901))) == 200)
        #expect(try rig.count("SELECT count(*) FROM wallet.outbox WHERE kind = 'appstore_consumption'") == 1)
        let after = try rig.request("GET", "/metrics", key: nil, body: nil).text
        #expect(after.contains(#"wallet_appstore_consumption_total{outcome="queued"} 1"#))
    }

    static func summary(_ output: String) -> [String: Int] {
        let line = output.split(separator: "\n").last { $0.hasPrefix("seen=") } ?? ""
        var values: [String: Int] = [:]
        for field in line.split(separator: " ") {
            let parts = field.split(separator: "=")
            if parts.count == 2 { values[String(parts[0])] = Int(parts[1]) }
        }
        return values
    }
}

/// A fake App Store (certificates valid around now, so tokens carry today's
/// signedDate, as Apple's do) and a fake App Store Server API that knows the
/// test's In-App Purchase key, with the files a service reads them from.
final class AppleAPIFixture: @unchecked Sendable {
    static let keyID = "TESTKEY123"
    static let issuerID = "57246542-96fe-1a63-e053-0824d011072a"

    let apple: FakeAppStore
    let api: FakeServerAPI
    /// The fake root certificate (DER), for WALLET_APPLE_ROOT_CERTS.
    let rootFile: String
    /// The key's `.p8`, for WALLET_APPLE_API_PRIVATE_KEY_FILE.
    let keyFile: String

    init() throws {
        var validity = FakeAppStore.Options()
        validity.validity = Date().addingTimeInterval(-86_400)...Date().addingTimeInterval(30 * 86_400)
        apple = try FakeAppStore(validity)
        let key = PrivateKey()
        api = try FakeServerAPI(credentials: .init(keyID: Self.keyID, issuerID: Self.issuerID,
                                                   bundleID: FakeAppStore.bundleID, publicKey: key.publicKey))
        rootFile = try RefundNotifications.writeRoot(of: apple)
        keyFile = NSTemporaryDirectory() + "wallet-api-key-\(UUID().uuidString.prefix(8)).p8"
        try Data(key.pkcs8PEM.utf8).write(to: URL(fileURLWithPath: keyFile))
    }

    func stop() {
        api.stop()
        try? FileManager.default.removeItem(atPath: rootFile)
        try? FileManager.default.removeItem(atPath: keyFile)
    }

    /// Apple's API knows `flowNo`: one `guodong600` bought in `environment`.
    func appleKnows(_ flowNo: String, environment: String) {
        api.addTransaction(flowNo, signed: transaction(flowNo, environment: environment), environment: environment)
    }

    /// A signed transaction for one `guodong600`, bound to no account.
    func transaction(_ flowNo: String, environment: String) -> String {
        var payload = FakeAppStore.transaction(transactionID: flowNo, environment: environment,
                                               signedDate: Self.nowMilliseconds() - 1_000)
        payload["productId"] = "guodong600"
        payload.removeValue(forKey: "appAccountToken")
        return apple.sign(payload)
    }

    /// A signed Production notification about `flowNo`, a purchase of
    /// `productType` (Apple's transaction `type`).
    func notification(_ type: String, flowNo: String, uuid: String, signer: FakeAppStore? = nil,
                      secondsAgo: Int64 = 1, productType: String = "Consumable", accountToken: String? = nil) -> String {
        let store = signer ?? apple
        var transaction = FakeAppStore.transaction(transactionID: flowNo, environment: "Production",
                                                   signedDate: Self.nowMilliseconds() - 1_000)
        transaction["productId"] = "guodong600"
        transaction["type"] = productType
        transaction["appAccountToken"] = accountToken
        var notification = FakeAppStore.notification(type: type, environment: "Production",
                                                     signedTransactionInfo: store.sign(transaction))
        notification["notificationUUID"] = uuid
        notification["signedDate"] = Self.nowMilliseconds() - secondsAgo * 1_000
        return store.sign(notification)
    }

    static func nowMilliseconds() -> Int64 {
        Int64(Date().timeIntervalSince1970 * 1000)
    }
}

/// `wallet serve` with `appstore-api` on, on a database of its own, talking
/// to a fake App Store Server API and trusting a fake App Store's root.
final class ServerAPIRig: @unchecked Sendable, ProbesDatabase {
    let options: Connection.Options
    let url: String
    let fixture: AppleAPIFixture
    var api: FakeServerAPI { fixture.api }
    let environment: [String: String]
    let appKey: String
    let gameKey: String
    let server: ServerProcess
    let port: UInt16

    init(keyIDSent: String = AppleAPIFixture.keyID, extra: [String: String] = [:]) throws {
        options = try TestDatabase.make()
        url = TestService.conninfo(options)
        fixture = try AppleAPIFixture()
        environment = ChaosRun.walletEnvironment([
            "WALLET_DATABASE_URL": url,
            "WALLET_LISTEN": "127.0.0.1:0",
            "WALLET_LOG_LEVEL": "warning",
            "WALLET_CREDIT_VERIFICATION": "appstore-api",
            "WALLET_APPLE_BUNDLE_ID": FakeAppStore.bundleID,
            "WALLET_APPLE_ENVIRONMENTS": "Production,Sandbox",
            "WALLET_APPLE_APP_APPLE_ID": String(FakeAppStore.appAppleID),
            "WALLET_APPLE_ROOT_CERTS": fixture.rootFile,
            "WALLET_APPLE_API_KEY_ID": keyIDSent,
            "WALLET_APPLE_API_ISSUER_ID": AppleAPIFixture.issuerID,
            "WALLET_APPLE_API_PRIVATE_KEY_FILE": fixture.keyFile,
            "WALLET_APPLE_API_PRODUCTION_URL": fixture.api.productionURL,
            "WALLET_APPLE_API_SANDBOX_URL": fixture.api.sandboxURL,
            "WALLET_APPLE_API_TIMEOUT_SECONDS": "2",
            "WALLET_APPLE_RECONCILE_INTERVAL_MINUTES": "0",
            "WALLET_APPLE_CONSUMPTION_CONSENT": "true",
        ].merging(extra) { _, new in new })
        appKey = try ChaosRun.walletCommand(["keys", "create", "--name", "app-backend", "--scopes", "credit,read"],
                                            databaseURL: url).lastLine
        gameKey = try ChaosRun.walletCommand(["keys", "create", "--name", "game-server", "--scopes", "debit,read"],
                                             databaseURL: url).lastLine
        server = try ServerProcess(binary: CommandLineTests.walletBinary, environment: environment, capturingLog: true)
        let server = server, fixture = fixture
        do {
            port = try server.waitForPort()
            try #require(RefundRaceTests.waitForReady(port: port, seconds: 30))
        } catch {
            server.kill()
            fixture.stop()
            throw error
        }
    }

    func stop() {
        server.kill()
        fixture.stop()
    }

    func credit(flowNo: String, userID: String) throws -> HTTPTestResponse {
        try request("POST", "/v1/credits", key: appKey,
                    body: #"{"user_id":"\#(userID)","flow_no":"\#(flowNo)","product_id":"guodong600"}"#)
    }

    func debit(userID: String, amount: Int64, key: String) throws -> Int {
        try TestService.request(port: port, "POST", "/v1/debits", key: gameKey,
                                json: #"{"user_id":"\#(userID)","amount":\#(amount)}"#,
                                headers: [("Idempotency-Key", key)]).status
    }

    func push(_ signedPayload: String) throws -> Int {
        try request("POST", "/v1/appstore/notifications", key: nil, body: #"{"signedPayload":"\#(signedPayload)"}"#).status
    }

    func request(_ method: String, _ path: String, key: String?, body: String?) throws -> HTTPTestResponse {
        try TestService.request(port: port, method, path, key: key, json: body)
    }

    func walletCommand(_ arguments: [String]) throws -> (status: Int32, output: String, error: String) {
        try runProcess([ServerProcess.walletBinary] + arguments, environment: environment, timeoutSeconds: 60)
    }

    func reconcile(_ arguments: [String]) throws -> (status: Int32, output: String, error: String) {
        try walletCommand(["appstore", "reconcile"] + arguments)
    }

    func nowMilliseconds() -> Int64 {
        AppleAPIFixture.nowMilliseconds()
    }

    func rfc3339(secondsAgo: Double) -> String {
        let formatter = ISO8601DateFormatter()
        return formatter.string(from: Date().addingTimeInterval(-secondsAgo))
    }
}
