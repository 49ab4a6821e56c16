import AppStore
import Foundation
import JSON
import Locking
import Postgres
import ServiceTestSupport
import Testing
import TestSupport
import WalletCore
import WalletService

/// App Store ONE_TIME_CHARGE notifications crediting the player their
/// appAccountToken names, through the real service with the fake App Store
/// (JWS signed under a test root the service trusts): alone, beside the
/// app's own call, for a token not yet issued, and after a refund.
@Suite(.timeLimit(.minutes(4)))
struct ChargeNotificationTests {
    static let namespace = "5b0e6c2a-9d1f-4e3b-8a7c-2f4d6e8a0b1c"

    final class Rig {
        let apple: FakeAppStore
        let service: TestService
        let rootFile: String
        private let numbers = Locked(0)

        init(creditFromNotifications: Bool = true) throws {
            apple = try FakeAppStore()
            rootFile = try RefundNotifications.writeRoot(of: apple)
            let rootFile = rootFile
            service = try TestService {
                $0.creditVerification = [.appStoreJWS, .caller]
                $0.apple.bundleIDs = [FakeAppStore.bundleID]
                $0.apple.environments = ["Sandbox"]
                $0.apple.rootCertificatePaths = [rootFile]
                $0.apple.accountTokenNamespace = ChargeNotificationTests.namespace
                $0.creditFromNotifications = creditFromNotifications
                // Upkeep reads the unclaimed purchases for /metrics each round.
                $0.idempotencyPurgeIntervalSeconds = 1
            }
        }

        deinit {
            service.stop()
            try? FileManager.default.removeItem(atPath: rootFile)
        }

        /// The player's App Store token, as the wallet issues it.
        func token(of userID: String) throws -> String {
            let answer = try service.request("GET", "/v1/wallets/\(userID)/account-tokens", key: service.appBackendKey)
            #expect(answer.status == 200, "\(answer.text)")
            guard case .string(let token)? = try answer.json()["apple_app_account_token"] else { return "" }
            return token
        }

        /// A notification body, a new notificationUUID unless `uuid` names one.
        func body(_ type: String, flowNo: String, token: String?, uuid: String? = nil,
                  productID: String = "guodong600") -> String {
            var transaction = FakeAppStore.transaction(transactionID: flowNo)
            transaction["productId"] = productID
            transaction["appAccountToken"] = token
            let number = numbers.withLock { $0 += 1; return $0 }
            var notification = FakeAppStore.notification(type: type, signedTransactionInfo: apple.sign(transaction))
            notification["notificationUUID"] = uuid ?? RefundNotifications.uuid(number)
            return #"{"signedPayload":"\#(apple.sign(notification))"}"#
        }

        /// Posts a notification; its status and its `charge` (or outcome).
        func notify(_ body: String) throws -> (status: Int, charge: String?, outcome: String?) {
            try Self.notify(body, to: service)
        }

        static func notify(_ body: String, to service: TestService) throws -> (status: Int, charge: String?, outcome: String?) {
            let response = try service.request("POST", "/v1/appstore/notifications", json: body)
            let json = try? response.json()
            guard case .string(let outcome)? = json?["outcome"] else { return (response.status, nil, nil) }
            guard case .string(let charge)? = json?["charge"] else { return (response.status, nil, outcome) }
            return (response.status, charge, outcome)
        }

        /// The value of one series of /metrics, once it equals `expected`
        /// (gauges upkeep sets catch up within seconds), or the last read.
        func metric(_ series: String, becomes expected: String) throws -> String? {
            var value: String?
            for _ in 0..<100 {
                let text = try service.request("GET", "/metrics").text
                value = text.split(separator: "\n").first { $0.hasPrefix(series + " ") }.map { String($0.dropFirst(series.count + 1)) }
                if value == expected { break }
                Thread.sleep(forTimeInterval: 0.1)
            }
            return value
        }

        func credits(_ flowNo: String) throws -> Int {
            try service.count("SELECT count(*) FROM wallet.credits WHERE flow_no = '\(flowNo)'")
        }
    }

    @Test func theChargeAloneCreditsOnceAndTheAppsLateCallReplaysIt() throws {
        let rig = try Rig()
        let token = try rig.token(of: "cleo")
        let charge = rig.body("ONE_TIME_CHARGE", flowNo: "2000000000000101", token: token.uppercased(),
                              uuid: RefundNotifications.uuid(9001))
        let first = try rig.notify(charge)
        #expect(first.status == 200 && first.charge == "credited" && first.outcome == "recorded")
        #expect(try rig.service.balance(of: "cleo") == 600)
        #expect(try rig.service.count("""
            SELECT count(*) FROM wallet.credits WHERE flow_no = '2000000000000101' AND source = 'appstore-notification'
              AND user_id = 'cleo' AND environment = 'Sandbox'
            """) == 1)
        // Apple delivers it again: the same credit.
        let again = try rig.notify(charge)
        #expect(again.status == 200 && again.charge == "replayed" && again.outcome == "duplicate")
        // The app's call after the notification: 200, the same credit.
        let late = try rig.service.credit(userID: "cleo", flowNo: "2000000000000101")
        #expect(late.status == 200 && late.header("Idempotent-Replayed") == "true")
        #expect(try late.json()["credit"]?["amount"] == 600)
        #expect(try rig.service.balance(of: "cleo") == 600)
        #expect(try rig.service.count("SELECT count(*) FROM wallet.events WHERE type = 'credit.created'") == 1)
        #expect(try rig.metric(#"wallet_credits_total{path="notification"}"#, becomes: "1") == "1")
        #expect(try rig.metric(#"wallet_credits_total{path="client"}"#, becomes: "0") == "0")
        #expect(try rig.service.violations() == [])
    }

    @Test func theAppsCallFirstThenTheChargeReplays() throws {
        let rig = try Rig()
        let token = try rig.token(of: "dana")
        #expect(try rig.service.credit(userID: "dana", flowNo: "2000000000000201").status == 201)
        let charge = try rig.notify(rig.body("ONE_TIME_CHARGE", flowNo: "2000000000000201", token: token))
        #expect(charge.status == 200 && charge.charge == "replayed")
        #expect(try rig.service.balance(of: "dana") == 600 && rig.credits("2000000000000201") == 1)
        // Another player's token on the same flowNO is not the same credit.
        let other = try rig.notify(rig.body("ONE_TIME_CHARGE", flowNo: "2000000000000201", token: try rig.token(of: "eli")))
        #expect(other.status == 200 && other.charge == "refused:flow_no_conflict")
        #expect(try rig.service.balance(of: "eli") == 0)
    }

    @Test func chargeAndCallAtTheSameInstantCreditOnceEachRound() throws {
        let rig = try Rig()
        let token = try rig.token(of: "fay")
        let rounds = 50
        let statuses = Locked<[String: Int]>([:])
        for round in 0..<rounds {
            let flowNo = String(2_000_000_000_010_000 + round)
            let charges = (0..<8).map { _ in rig.body("ONE_TIME_CHARGE", flowNo: flowNo, token: token) }
            let service = rig.service
            DispatchQueue.concurrentPerform(iterations: 16) { index in
                let label: String
                if index % 2 == 0 {
                    let answer = try? Rig.notify(charges[index / 2], to: service)
                    label = "charge \(answer?.status ?? 0) \(answer?.charge ?? "-")"
                } else {
                    let answer = try? service.credit(userID: "fay", flowNo: flowNo)
                    label = "call \(answer?.status ?? 0)"
                }
                statuses.withLock { $0[label, default: 0] += 1 }
            }
            #expect(try rig.credits(flowNo) == 1, "round \(round)")
        }
        let seen = statuses.withLock { $0 }
        // Each round one of the sixteen credited (a charge, or a call's 201); the rest replayed.
        let credited = (seen["charge 200 credited"] ?? 0) + (seen["call 201"] ?? 0)
        #expect(credited == rounds, "\(seen)")
        #expect((seen["charge 200 replayed"] ?? 0) + (seen["call 200"] ?? 0) == rounds * 15, "\(seen)")
        #expect(try rig.service.balance(of: "fay") == Int64(rounds * 600))
        #expect(try rig.service.violations() == [])
    }

    @Test func aTokenNotYetIssuedIsKeptUntilItsPlayerAsksForIt() throws {
        let rig = try Rig()
        // The token the wallet will issue to gus, before it has.
        let token = try #require(CreditPolicy(accountTokenNamespace: Self.namespace).expectedAccountToken(userID: "gus"))
        let charge = try rig.notify(rig.body("ONE_TIME_CHARGE", flowNo: "2000000000000301", token: token))
        #expect(charge.status == 200 && charge.charge == "unclaimed")
        let none = try rig.notify(rig.body("ONE_TIME_CHARGE", flowNo: "2000000000000302", token: nil))
        #expect(none.status == 200 && none.charge == "unclaimed")
        #expect(try rig.credits("2000000000000301") == 0)
        #expect(try rig.service.count("SELECT count(*) FROM wallet.unclaimed_purchases") == 2)
        // Kept once however often Apple sends it.
        #expect(try rig.notify(rig.body("ONE_TIME_CHARGE", flowNo: "2000000000000301", token: token)).charge == "unclaimed")
        #expect(try rig.service.count("SELECT count(*) FROM wallet.unclaimed_purchases") == 2)
        #expect(try rig.metric("wallet_unclaimed_purchases", becomes: "2") == "2")

        // gus signs in: the wallet issues his token and credits what it carried, once.
        #expect(try rig.token(of: "gus") == token)
        #expect(try rig.service.balance(of: "gus") == 600)
        #expect(try rig.token(of: "gus") == token)
        #expect(try rig.service.balance(of: "gus") == 600 && rig.credits("2000000000000301") == 1)
        #expect(try rig.service.count("""
            SELECT count(*) FROM wallet.unclaimed_purchases WHERE flow_no = '2000000000000301'
            """) == 0)
        // The one with no token leaves when the app's call for it arrives.
        #expect(try rig.service.credit(userID: "hana", flowNo: "2000000000000302").status == 201)
        #expect(try rig.service.count("SELECT count(*) FROM wallet.unclaimed_purchases") == 0)
        #expect(try rig.metric(#"wallet_credits_total{path="claim"}"#, becomes: "1") == "1")
        #expect(try rig.metric(#"wallet_credits_total{path="client"}"#, becomes: "1") == "1")
        #expect(try rig.metric("wallet_unclaimed_purchases", becomes: "0") == "0")
        #expect(try rig.metric("wallet_unclaimed_purchase_oldest_seconds", becomes: "0") == "0")
        #expect(try rig.service.violations() == [])
    }

    @Test func aRefundBeforeTheChargeLeavesItUncredited() throws {
        let rig = try Rig()
        let token = try rig.token(of: "ivy")
        let refund = try rig.notify(rig.body("REFUND", flowNo: "2000000000000401", token: token))
        #expect(refund.status == 200 && refund.outcome == "revoked")
        let charge = try rig.notify(rig.body("ONE_TIME_CHARGE", flowNo: "2000000000000401", token: token))
        #expect(charge.status == 200 && charge.charge == "refused:revoked")
        #expect(try rig.service.balance(of: "ivy") == 0 && rig.credits("2000000000000401") == 0)
        // A product outside the catalog is refused too, and kept nowhere.
        let unknown = try rig.notify(rig.body("ONE_TIME_CHARGE", flowNo: "2000000000000402", token: token,
                                              productID: "coins.1000"))
        #expect(unknown.status == 200 && unknown.charge == "refused:unknown_product")
    }

    @Test func withCreditingOffAChargeIsRecordedOnly() throws {
        let rig = try Rig(creditFromNotifications: false)
        let token = try rig.token(of: "jo")
        let charge = try rig.notify(rig.body("ONE_TIME_CHARGE", flowNo: "2000000000000501", token: token))
        #expect(charge.status == 200 && charge.outcome == "recorded" && charge.charge == nil)
        #expect(try rig.service.balance(of: "jo") == 0 && rig.credits("2000000000000501") == 0)
        #expect(try rig.service.count("""
            SELECT count(*) FROM wallet.appstore_notifications WHERE flow_no = '2000000000000501'
            """) == 1)
    }
}
