import Foundation
import Locking
import Postgres
import ServiceTestSupport
import Testing
import TestSupport
import WalletCore
@testable import ServiceAPI
@testable import ServiceSupport
@testable import ServiceWorkers
@testable import WalletService

/// The App Store Server API's threads inside one process, where the thread
/// sanitizer can see them: flowNO-only credits on the blocking pool from
/// many threads, the consumption sender and the scheduled sweep, all at
/// once, then a clean shutdown. The sweep's first delay passes on the
/// service's clock, moved by the test.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct ServerAPIThreadTests {
    @Test func creditsSweepsAndConsumptionAnswersRunTogetherAndStop() throws {
        let fixture = try AppleAPIFixture()
        defer { fixture.stop() }
        let productionURL = try #require(URL(string: fixture.api.productionURL))
        let sandboxURL = try #require(URL(string: fixture.api.sandboxURL))
        let clock = ManualClock()
        let service = try TestService(clock: clock) { configuration in
            configuration.creditVerification = [.appStoreAPI]
            configuration.apple.bundleIDs = [FakeAppStore.bundleID]
            configuration.apple.environments = ["Production"]
            configuration.apple.appAppleID = FakeAppStore.appAppleID
            configuration.apple.rootCertificatePaths = [fixture.rootFile]
            configuration.apple.api.keyID = AppleAPIFixture.keyID
            configuration.apple.api.issuerID = AppleAPIFixture.issuerID
            configuration.apple.api.privateKeyFile = fixture.keyFile
            configuration.apple.api.productionURL = productionURL
            configuration.apple.api.sandboxURL = sandboxURL
            configuration.apple.api.timeoutSeconds = 2
            configuration.apple.api.reconcileIntervalMinutes = 1
            configuration.apple.api.consumptionConsent = true
        }
        defer { service.stop() }

        for number in 0..<8 { fixture.appleKnows("400000000\(number)", environment: "Production") }
        // A refund Apple could not deliver, for the scheduled sweep to find.
        fixture.api.addNotification(fixture.notification("REFUND", flowNo: "4000000007", uuid: RefundNotifications.uuid(900)),
                                    signedDateMilliseconds: AppleAPIFixture.nowMilliseconds(), environment: "Production")

        // Eight flowNOs, each credited by two threads at once.
        let statuses = Locked<[Int]>([])
        #expect(runOnThreads(16) { index in
            let body = #"{"user_id":"t\#(index % 8)","flow_no":"400000000\#(index % 8)","product_id":"guodong600"}"#
            let status = (try? service.request("POST", "/v1/credits", key: service.appBackendKey, json: body).status) ?? 0
            statuses.withLock { $0.append(status) }
        })
        let seen = statuses.withLock { $0 }
        #expect(seen.filter { $0 == 201 }.count == 8, "\(seen)")
        #expect(seen.filter { $0 == 200 }.count == 8, "\(seen)")

        // Consumption requests while the sweep may be running.
        for number in 0..<4 {
            let payload = fixture.notification("CONSUMPTION_REQUEST", flowNo: "400000000\(number)",
                                               uuid: RefundNotifications.uuid(910 + number))
            let pushed = try service.request("POST", "/v1/appstore/notifications", json: #"{"signedPayload":"\#(payload)"}"#)
            #expect(pushed.status == 200, "\(pushed.text)")
        }
        // The sweep's first delay, and the sender's pause, are over.
        clock.advance(by: .seconds(ReconcileSchedule.firstDelaySeconds))
        #expect(waitFor(seconds: 30) {
            (try? service.count("SELECT count(*) FROM wallet.outbox WHERE kind = 'appstore_consumption' AND status = 'sent'")) == 4
        })
        #expect(waitFor(seconds: 30) {
            (try? service.count("SELECT count(*) FROM wallet.credits WHERE status = 'refunded'")) == 1
        })
        #expect(try service.violations() == [])
    }
}
