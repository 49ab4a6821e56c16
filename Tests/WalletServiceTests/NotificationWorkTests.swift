import AppStore
import Crypto
import CryptoTestSupport
import Foundation
import HTTPServer
import Locking
import Postgres
import Synchronization
import Testing
import TestSupport
import WalletCore
@testable import WalletService
import ServiceTestSupport

/// App Store notifications need no key: their work runs on a bounded pool
/// off the server threads, and each one is counted by how it ended.
@Suite(.timeLimit(.minutes(2)))
struct NotificationWorkTests {
    /// A service that trusts `apple`'s fake root for notifications.
    func notificationService(_ apple: FakeAppStore) throws -> (TestService, String) {
        let rootFile = NSTemporaryDirectory() + "wallet-fake-root-\(UUID().uuidString.prefix(8)).der"
        try Data(apple.root.certificate.derBytes).write(to: URL(fileURLWithPath: rootFile))
        let service = try TestService {
            $0.creditVerification = [.appStoreJWS, .caller]
            $0.apple.bundleIDs = [FakeAppStore.bundleID]
            $0.apple.environments = ["Sandbox"]
            $0.apple.rootCertificatePaths = [rootFile]
        }
        return (service, rootFile)
    }

    static func notification(_ apple: FakeAppStore, type: String, number: Int) -> String {
        var notification = FakeAppStore.notification(type: type)
        notification["notificationUUID"] = "00000000-0000-4000-8000-\(String(format: "%012d", number))"
        return #"{"signedPayload":"\#(apple.sign(notification))"}"#
    }

    @Test func notificationsAreCountedByOutcomeAndRefusalReason() throws {
        let apple = try FakeAppStore()
        let (service, rootFile) = try notificationService(apple)
        defer { service.stop(); try? FileManager.default.removeItem(atPath: rootFile) }
        let declined = Self.notification(apple, type: "REFUND_DECLINED", number: 1)
        #expect(try service.request("POST", "/v1/appstore/notifications", json: declined).status == 200)
        #expect(try service.request("POST", "/v1/appstore/notifications", json: declined).status == 200)
        let forged = try FakeAppStore().sign(FakeAppStore.notification(type: "REFUND"))
        #expect(try service.request("POST", "/v1/appstore/notifications", json: #"{"signedPayload":"\#(forged)"}"#)
            .status == 422)
        #expect(try service.request("POST", "/v1/appstore/notifications", json: #"{"signedPayload":"a.b.c"}"#)
            .status == 422)
        #expect(try service.request("POST", "/v1/appstore/notifications", json: #"{}"#).status == 422)

        let text = try service.request("GET", "/metrics").text
        #expect(text.contains(#"wallet_appstore_notifications_total{outcome="recorded"} 1"#), "\(text)")
        #expect(text.contains(#"wallet_appstore_notifications_total{outcome="duplicate"} 1"#))
        #expect(text.contains(#"wallet_appstore_notifications_total{outcome="refused",reason="untrusted_root"} 1"#))
        #expect(text.contains(#"wallet_appstore_notifications_total{outcome="refused",reason="malformed"} 2"#))
    }

    @Test func unknownNotificationOutcomesCountAsOther() {
        let metrics = Metrics()
        metrics.countNotification(outcome: "superseded")
        metrics.countNotification(outcome: "something-new-\(UUID())")
        metrics.countNotification(outcome: "something-else")
        let text = metrics.render(pool: nil, writerQueueDepth: 0)
        #expect(text.contains(#"wallet_appstore_notifications_total{outcome="superseded"} 1"#))
        #expect(text.contains(#"wallet_appstore_notifications_total{outcome="other"} 2"#))
    }

    @Test func aFullNotificationPoolAnswers503WithRetryAfter() throws {
        let apple = try FakeAppStore()
        let (service, rootFile) = try notificationService(apple)
        defer { service.stop(); try? FileManager.default.removeItem(atPath: rootFile) }
        // Hold the notifications table so the pool's threads wait on it and
        // its queue fills up.
        let blocker = try Connection(options: service.database)
        try blocker.execute("BEGIN")
        try blocker.execute("LOCK TABLE wallet.appstore_notifications IN ACCESS EXCLUSIVE MODE")
        let senders = Application.notificationThreads + Application.notificationQueueDepthMax + 8
        let bodies = (0..<senders).map { Self.notification(apple, type: "REFUND_DECLINED", number: 100 + $0) }
        let answers = Locked<[(status: Int, retryAfter: String?, code: String?)]>([])
        let port = service.port
        let done = DispatchSemaphore(value: 0)
        let finished = Atomic<Bool>(false)
        let sending = Thread {
            let ok = runOnThreads(senders, timeoutSeconds: 50) { index in
                guard let client = try? HTTPTestClient(port: port, timeoutSeconds: 40),
                      let response = try? client.request(method: "POST", path: "/v1/appstore/notifications",
                                                         headers: TestService.headers(key: nil, json: bodies[index]),
                                                         body: Array(bodies[index].utf8)) else {
                    answers.withLock { $0.append((0, nil, nil)) }
                    return
                }
                let code: String? = if case .string(let text)? = try? response.json()["code"] { text } else { nil }
                answers.withLock { $0.append((response.status, response.header("Retry-After"), code)) }
            }
            finished.store(ok, ordering: .relaxed)
            done.signal()
        }
        sending.start()
        // The held notifications cannot finish, so every answer before the
        // release is a refusal; wait for all that cannot fit.
        let refusalsExpected = senders - Application.notificationThreads - Application.notificationQueueDepthMax
        let waitUntil = ContinuousClock.now + .seconds(30)
        while answers.withLock({ $0.count }) < refusalsExpected, ContinuousClock.now < waitUntil {
            Thread.sleep(forTimeInterval: 0.01)
        }
        try blocker.execute("ROLLBACK")
        blocker.close()
        #expect(done.wait(timeout: .now() + 55) == .success)
        let allFinished = finished.load(ordering: .relaxed)
        #expect(allFinished)
        let all = answers.withLock { $0 }
        let refused = all.filter { $0.status == 503 }
        #expect(!refused.isEmpty)
        for answer in refused {
            #expect(answer.retryAfter != nil)
            #expect(answer.code == "overloaded")
        }
        #expect(all.allSatisfy { $0.status == 200 || $0.status == 503 }, "\(all.map(\.status))")
        #expect(all.filter { $0.status == 200 }.count >= Application.notificationThreads)
        #expect(try service.request("GET", "/metrics").text
            .contains(#"wallet_appstore_notifications_total{outcome="overloaded"} \#(refused.count)"#))
    }
}
