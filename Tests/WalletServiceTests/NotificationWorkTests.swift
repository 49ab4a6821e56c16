import AppStore
import Crypto
import CryptoTestSupport
import Foundation
import HTTPServer
import JSON
import Locking
import Logging
import Postgres
import Synchronization
import Testing
import TestSupport
import WalletCore
@testable import ServiceAPI
@testable import ServiceSupport
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

    /// Google pushes whose `kid` Google has not published make the service
    /// fetch Google's keys from a slow endpoint; meanwhile App Store
    /// notifications keep coming, and are answered as on a quiet service.
    @Test func googlePushesWaitingForKeysHoldNoAppStoreNotification() throws {
        let apple = try FakeAppStore()
        let google = try FakeGooglePlay()
        let certs = try FakeGoogleCerts()
        defer { google.stop(); certs.stop() }
        // Slower than a notification takes, within the push's key deadline (5 s).
        let fetchSeconds = 4.0
        certs.delayAnswers(seconds: fetchSeconds)
        let directory = NSTemporaryDirectory() + "wallet-push-isolation-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let rootFile = directory + "/root.der"
        try Data(apple.root.certificate.derBytes).write(to: URL(fileURLWithPath: rootFile))
        let accountFile = directory + "/service-account.json"
        try google.serviceAccountJSON().write(toFile: accountFile, atomically: true, encoding: .utf8)
        let service = try TestService {
            $0.creditVerification = [.appStoreJWS, .googlePlay, .caller]
            $0.apple.bundleIDs = [FakeAppStore.bundleID]
            $0.apple.environments = ["Sandbox"]
            $0.apple.rootCertificatePaths = [rootFile]
            $0.google.serviceAccountFile = accountFile
            $0.google.packageName = google.packageName
            $0.google.apiURL = google.apiURL
            $0.google.pushJWKSURL = certs.url
            $0.google.pushAudience = FakeGoogleCerts.defaultAudience
            $0.google.pushServiceAccount = FakeGoogleCerts.defaultEmail
            $0.google.voidedPollMinutes = 0
        }
        defer { service.stop() }
        let port = service.port

        // More pushes than two threads and a queue of 32 hold, each with a
        // kid of its own: the first fetches the keys, the rest wait for it.
        let pushes = 40
        let pushStatuses = Locked<[Int]>([])
        let pushesDone = DispatchSemaphore(value: 0)
        let pushBody = #"{"message":{"data":"e30=","messageId":"m-1"},"subscription":"projects/p/subscriptions/play"}"#
        let pushing = Thread {
            _ = runOnThreads(pushes, timeoutSeconds: 60) { index in
                let token = certs.token(kid: "unpublished-\(index)")
                let status = (try? TestService.request(
                    port: port, "POST", "/v1/googleplay/notifications", key: nil, json: pushBody,
                    headers: [("Authorization", "Bearer \(token)")], timeoutSeconds: 30).status) ?? 0
                pushStatuses.withLock { $0.append(status) }
            }
            pushesDone.signal()
        }
        pushing.start()
        #expect(waitFor(seconds: 10) { certs.fetchCount == 1 }, "the key fetch began")

        // While the fetch is slow: 40 App Store notifications from 16 senders,
        // never more at once than the App Store's pool takes.
        let senders = 16
        let notifications = 40
        let bodies = (0..<notifications).map { Self.notification(apple, type: "REFUND_DECLINED", number: 500 + $0) }
        let answers = Locked<[(status: Int, seconds: Double)]>([])
        let sent = runOnThreads(senders, timeoutSeconds: 60) { sender in
            for index in stride(from: sender, to: notifications, by: senders) {
                let started = HTTPTestClient.now()
                let status = (try? TestService.request(port: port, "POST", "/v1/appstore/notifications", key: nil,
                                                       json: bodies[index], timeoutSeconds: 30).status) ?? 0
                answers.withLock { $0.append((status, HTTPTestClient.now() - started)) }
            }
        }
        #expect(sent)
        let fetchStillRunning = certs.fetchCount == 1 && pushStatuses.withLock { $0.count } < pushes
        #expect(pushesDone.wait(timeout: .now() + 60) == .success)

        let all = answers.withLock { $0 }
        let refused = all.filter { $0.status != 200 }.count
        let slowest = all.map(\.seconds).max() ?? 0
        let pushAnswers = Dictionary(pushStatuses.withLock { $0 }.map { ($0, 1) }, uniquingKeysWith: +)
        print("App Store notifications beside Google pushes waiting \(fetchSeconds) s for keys: \(refused) of "
              + "\(notifications) not 200, slowest answered in \(String(format: "%.2f", slowest)) s; "
              + "pushes answered \(pushAnswers.sorted { $0.key < $1.key }); key fetches \(certs.fetchCount)")
        #expect(all.count == notifications)
        #expect(refused == 0, "\(all.map(\.status))")
        #expect(slowest < fetchSeconds, "an App Store notification waited for Google's keys")
        #expect(fetchStillRunning, "the notifications were sent while the key fetch ran")
        // Every push was refused for its unknown kid (or, past the Google
        // pool's queue, told to come back): none was let in.
        #expect(pushAnswers.keys.allSatisfy { $0 == 401 || $0 == 503 }, "\(pushAnswers)")
        let overloaded = try service.request("GET", "/metrics").text.split(separator: "\n")
            .first { $0.hasPrefix(#"wallet_appstore_notifications_total{outcome="overloaded"}"#) }
        #expect(overloaded == #"wallet_appstore_notifications_total{outcome="overloaded"} 0"#)

        // More unknown kids within the minute fetch nothing.
        for index in 0..<5 {
            let token = certs.token(kid: "unpublished-again-\(index)")
            let response = try service.request("POST", "/v1/googleplay/notifications", json: pushBody,
                                               headers: [("Authorization", "Bearer \(token)")])
            #expect(response.status == 401)
        }
        #expect(certs.fetchCount == 1, "Google's keys fetched \(certs.fetchCount) times within a minute")
    }

    /// The endpoint takes no key: 2,000 junk notifications (bodies that are
    /// not notifications, tokens whose signature or chain fails) are all
    /// counted and answered, but keep at most one row per reason a second,
    /// and no row keeps what the client chose. Refusals of tokens Apple
    /// signed are all kept.
    @Test func junkNotificationsCostMemoryNotTheDisk() throws {
        let apple = try FakeAppStore()
        let (service, rootFile) = try notificationService(apple)
        defer { service.stop(); try? FileManager.default.removeItem(atPath: rootFile) }
        // Apple's chain, with a signature that is not the leaf's.
        let forged = apple.sign(FakeAppStore.notification(type: "REFUND"), signer: { _ in [UInt8](repeating: 1, count: 64) })
        let forgedSignature = #"{"signedPayload":"\#(forged)"}"#
        let otherRoot = try FakeAppStore().sign(FakeAppStore.notification(type: "REFUND"))
        let junk: [(body: String, reason: String)] = [
            ("{}", "malformed"),                                        // refused by the route
            (#"{"signedPayload":"a.b.c"}"#, "malformed"),                // by the verifier
            (forgedSignature, "bad_signature"),
            (#"{"signedPayload":"\#(otherRoot)"}"#, "untrusted_root"),
        ]
        let port = service.port
        let sent = 2_000
        let statuses = Locked<[Int: Int]>([:])
        let started = ContinuousClock.now
        // One thread per kind of junk, each on a kept-alive connection.
        let finished = runOnThreads(junk.count, timeoutSeconds: 100) { kind in
            guard let client = try? HTTPTestClient(port: port, timeoutSeconds: 20) else { return }
            defer { client.close() }
            for number in 0..<(sent / junk.count) {
                let headers = TestService.headers(key: nil, json: junk[kind].body) + [("X-Request-Id", "client-\(kind)-\(number)")]
                let status = (try? client.request(method: "POST", path: "/v1/appstore/notifications", headers: headers,
                                                  body: Array(junk[kind].body.utf8)))?.status ?? 0
                statuses.withLock { $0[status, default: 0] += 1 }
            }
        }
        let seconds = Double((ContinuousClock.now - started).components.seconds)
            + Double((ContinuousClock.now - started).components.attoseconds) / 1e18
        #expect(finished)
        #expect(statuses.withLock { $0 } == [422: sent], "every one answered as refused")

        let rows = try service.count("SELECT count(*) FROM wallet.appstore_refused_notifications")
        let reasons = Set(junk.map(\.reason)).count
        let bound = reasons * (Int(seconds) + 1)
        let clientIDs = try service.count("""
            SELECT count(*) FROM wallet.appstore_refused_notifications WHERE request_id LIKE 'client-%'
            """)
        print("\(sent) junk notifications in \(String(format: "%.1f", seconds)) s: \(rows) rows (at most \(bound)), "
              + "\(clientIDs) with the client's request id")
        #expect(rows <= bound)
        #expect(clientIDs == 0, "no row keeps the client's request id")
        #expect(try service.count("""
            SELECT count(*) FROM wallet.appstore_refused_notifications WHERE request_id IS NOT NULL
            """) == 0)
        // Each row stands for the refusals of its reason since the previous one.
        #expect(try service.count("""
            SELECT coalesce(sum(refusals), 0) FROM wallet.appstore_refused_notifications WHERE NOT apple_signed
            """) <= sent)

        // Tokens Apple signed, for another bundle or environment: every one is kept.
        for number in 0..<5 {
            var notification = FakeAppStore.notification(type: "REFUND", bundleID: "com.example.other")
            notification["notificationUUID"] = "00000000-0000-4000-8000-\(String(format: "%012d", 500 + number))"
            let body = #"{"signedPayload":"\#(apple.sign(notification))"}"#
            #expect(try service.request("POST", "/v1/appstore/notifications", json: body,
                                        headers: [("X-Request-Id", "signed-\(number)")]).status == 422)
        }
        let production = #"{"signedPayload":"\#(apple.sign(FakeAppStore.notification(environment: "Production")))"}"#
        #expect(try service.request("POST", "/v1/appstore/notifications", json: production).status == 422)
        #expect(try service.count("""
            SELECT count(*) FROM wallet.appstore_refused_notifications
            WHERE apple_signed AND reason = 'bundle_mismatch' AND refusals = 1 AND request_id IS NULL
            """) == 5)
        #expect(try service.count("""
            SELECT count(*) FROM wallet.appstore_refused_notifications WHERE apple_signed AND reason = 'environment_not_allowed'
            """) == 1)

        // The metrics count all 2,000.
        let metrics = try service.request("GET", "/metrics").text
        for (reason, count) in [("malformed", 1_000), ("bad_signature", 500), ("untrusted_root", 500), ("bundle_mismatch", 5)] {
            #expect(metrics.contains(#"wallet_appstore_notifications_total{outcome="refused",reason="\#(reason)"} \#(count)"#),
                    "\(reason)")
        }
    }

    /// The rules themselves, on a clock the test moves: a row a second per
    /// reason, standing for the refusals since the previous one; every
    /// Apple-signed refusal; ten log lines per reason a minute, the next one
    /// saying how many were left out.
    @Test func refusalsAreKeptOnceASecondPerReasonAndLoggedWithinABound() {
        let lines = Locked<[String]>([])
        let logger = Logger(label: "wallet", level: .info, sink: Logger.Sink { line in lines.withLock { $0.append(line) } })
        let clock = ManualClock(movesWithRealTime: false)
        let refusals = NotificationRefusals(logger: logger, clock: clock)
        let junk = NotificationRefusals.Kind(reason: .bad_signature, appleSigned: false)
        let malformed = NotificationRefusals.Kind(reason: .malformed, appleSigned: false)
        let signed = NotificationRefusals.Kind(reason: .bundle_mismatch, appleSigned: true)

        let first = (0..<100).map { _ in refusals.refused(junk, requestID: "client-chosen") }
        #expect(first[0] == 1)
        #expect(first.dropFirst().allSatisfy { $0 == nil })
        #expect(refusals.refused(malformed, requestID: nil) == 1, "each reason has its own second")
        #expect((0..<5).map { _ in refusals.refused(signed, requestID: nil) } == [1, 1, 1, 1, 1])
        clock.advance(by: .milliseconds(999))
        #expect(refusals.refused(junk, requestID: nil) == nil)
        clock.advance(by: .milliseconds(1))
        #expect(refusals.refused(junk, requestID: nil) == 101, "itself and the 100 not kept since the first")
        #expect(refusals.refused(junk, requestID: nil) == nil)

        func logged(_ reason: String) -> [String] {
            lines.withLock { $0 }.filter { $0.contains(#""appstore.reason":"\#(reason)""#) }
        }
        #expect(logged("bad_signature").count == NotificationRefusals.logLinesMax)
        #expect(logged("bundle_mismatch").count == 5)
        #expect(logged("malformed").count == 1)
        #expect(!lines.withLock { $0 }.contains { $0.contains("log.suppressed") })
        // A minute on, the next line says how many were left out: 103 refusals, 10 of them logged.
        clock.advance(by: .seconds(60))
        #expect(refusals.refused(junk, requestID: nil) == 2)
        let resumed = logged("bad_signature")
        #expect(resumed.count == NotificationRefusals.logLinesMax + 1)
        #expect(resumed.last?.contains(#""log.suppressed":"93""#) == true, "\(resumed.last ?? "")")
        #expect(resumed.allSatisfy { $0.contains(#""msg":"notification refused""#) })
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
        let (threads, queueDepthMax) = (service.application.configuration.notificationThreads,
                                        service.application.configuration.notificationQueueDepthMax)
        let senders = threads + queueDepthMax + 8
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
        let refusalsExpected = senders - threads - queueDepthMax
        _ = waitFor(seconds: 30) { answers.withLock { $0.count } >= refusalsExpected }
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
        #expect(all.filter { $0.status == 200 }.count >= threads)
        #expect(try service.request("GET", "/metrics").text
            .contains(#"wallet_appstore_notifications_total{outcome="overloaded"} \#(refused.count)"#))
    }
}
