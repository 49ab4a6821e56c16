import Crypto
import CryptoTestSupport
import Foundation
import HTTPServer
import JSON
import Postgres
import Testing
import WalletCore
import TestSupport
import WalletService
import ServiceTestSupport

/// Apple's refund notifications applied in Apple's order (their signedDate),
/// whatever order they arrive in, through the real service.
@Suite(.timeLimit(.minutes(2)))
struct RefundOrderTests {
    /// A service that trusts `apple`'s root for notifications and lets the
    /// app backend vouch for credits.
    final class Harness {
        let apple: FakeAppStore
        let service: TestService
        let rootFile: String
        private var number = 0

        init() throws {
            apple = try FakeAppStore()
            rootFile = try RefundNotifications.writeRoot(of: apple)
            let rootFile = rootFile
            service = try TestService {
                $0.creditVerification = [.appStoreJWS, .caller]
                $0.apple.bundleIDs = [FakeAppStore.bundleID]
                $0.apple.environments = ["Sandbox"]
                $0.apple.rootCertificatePaths = [rootFile]
            }
        }

        deinit {
            service.stop()
            try? FileManager.default.removeItem(atPath: rootFile)
        }

        /// Sends one notification signed `secondsLater` after the fake
        /// store's base date; returns its outcome.
        func notify(_ type: String, _ flowNo: String, secondsLater: Int64) throws -> String? {
            number += 1
            let body = RefundNotifications.body(apple: apple, type: type, flowNo: flowNo,
                                                uuid: RefundNotifications.uuid(number),
                                                signedDateMilliseconds: FakeAppStore.signedDateMilliseconds + secondsLater * 1000)
            let response = try service.request("POST", "/v1/appstore/notifications", json: body)
            #expect(response.status == 200, "\(response.text)")
            guard case .string(let outcome)? = try response.json()["outcome"] else { return nil }
            return outcome
        }

        /// The credit's status code, and the refusal reason if any.
        func credit(_ flowNo: String, user: String = "cleo") throws -> (status: Int, reason: String?) {
            let response = try service.credit(userID: user, flowNo: flowNo)
            guard case .string(let reason)? = try? response.json()["reason"] else { return (response.status, nil) }
            return (response.status, reason)
        }

        func status(of flowNo: String) throws -> String? {
            let connection = try Connection(options: service.database)
            defer { connection.close() }
            return try connection.query("SELECT status FROM wallet.credits WHERE flow_no = \(flowNo)").first?[0]
        }

        func storedOutcomes(of flowNo: String) throws -> [String?] {
            let connection = try Connection(options: service.database)
            defer { connection.close() }
            return try connection.query("""
                SELECT outcome FROM wallet.appstore_notifications WHERE flow_no = \(flowNo) ORDER BY received_at
                """).map { $0[0] }
        }
    }

    @Test func aReversalBeforeItsRefundKeepsTheCoins() throws {
        let harness = try Harness()
        #expect(try harness.credit("o-1").status == 201)
        // Apple refunded at +1 s and reversed at +2 s; the reversal arrives first.
        #expect(try harness.notify("REFUND_REVERSED", "o-1", secondsLater: 2) == "not_refunded")
        #expect(try harness.notify("REFUND", "o-1", secondsLater: 1) == "superseded")
        #expect(try harness.service.balance(of: "cleo") == 600)
        #expect(try harness.status(of: "o-1") == "credited")
        #expect(try harness.storedOutcomes(of: "o-1") == ["not_refunded", "superseded"])
        // A newer REFUND refunds again; the older reversal, arriving late, changes nothing.
        #expect(try harness.notify("REFUND", "o-1", secondsLater: 3) == "refunded")
        #expect(try harness.service.balance(of: "cleo") == 0)
        #expect(try harness.notify("REFUND_REVERSED", "o-1", secondsLater: 2) == "superseded")
        #expect(try harness.service.balance(of: "cleo") == 0)

        // Neither credited yet: the early reversal is remembered, so the older
        // REFUND does not revoke the purchase.
        #expect(try harness.notify("REFUND_REVERSED", "o-2", secondsLater: 2) == "not_refunded")
        #expect(try harness.notify("REFUND", "o-2", secondsLater: 1) == "superseded")
        #expect(try harness.credit("o-2").status == 201)
        #expect(try harness.service.balance(of: "cleo") == 600)
        #expect(try harness.service.violations() == [])
    }

    @Test func aReversedRefundOfANeverCreditedFlowNoNoLongerBlocksItsCredit() throws {
        let harness = try Harness()
        #expect(try harness.notify("REFUND", "n-1", secondsLater: 1) == "revoked")
        let refused = try harness.credit("n-1")
        #expect(refused.status == 422)
        #expect(refused.reason == "revoked")
        #expect(try harness.notify("REFUND_REVERSED", "n-1", secondsLater: 2) == "unrevoked")
        #expect(try harness.credit("n-1").status == 201)
        #expect(try harness.service.balance(of: "cleo") == 600)
        // Apple's later refund takes it back as usual.
        #expect(try harness.notify("REFUND", "n-1", secondsLater: 3) == "refunded")
        #expect(try harness.service.balance(of: "cleo") == 0)
        #expect(try harness.service.violations() == [])
        // Every outcome is counted under its own name, none as `other`.
        let metrics = try harness.service.request("GET", "/metrics").text
        for outcome in ["revoked", "unrevoked", "refunded"] {
            #expect(metrics.contains(#"wallet_appstore_notifications_total{outcome="\#(outcome)"} 1"#), "\(outcome)")
        }
        #expect(!metrics.contains(#"wallet_appstore_notifications_total{outcome="other"}"#))
        // Only the refund moved coins back: the revocation of a credit that
        // never happened took none.
        #expect(metrics.contains(#"wallet_coins_total{kind="refunded"} 600"#))
    }

    /// The same orders through `wallet serve` as operators run it.
    @Test func theBinaryAppliesApplesOrder() throws {
        let binary = try NotifiedBinary()
        defer { binary.stop() }
        var number = 1_000
        func notify(_ type: String, _ flowNo: String, secondsLater: Int64) throws -> String? {
            number += 1
            let body = RefundNotifications.body(apple: binary.apple, type: type, flowNo: flowNo,
                                                uuid: RefundNotifications.uuid(number),
                                                signedDateMilliseconds: FakeAppStore.signedDateMilliseconds + secondsLater * 1000)
            let response = try binary.request("POST", "/v1/appstore/notifications", key: nil, body: body)
            #expect(response.status == 200, "\(response.text)")
            guard case .string(let outcome)? = try response.json()["outcome"] else { return nil }
            return outcome
        }
        func credit(_ flowNo: String) throws -> HTTPTestResponse {
            try binary.request("POST", "/v1/credits", key: binary.key,
                               body: #"{"user_id":"dora","flow_no":"\#(flowNo)","product_id":"guodong600"}"#)
        }
        func balance() throws -> JSONValue? {
            try binary.request("GET", "/v1/wallets/dora", key: binary.key, body: nil).json()["balances"]
        }
        // Bought coins, all of them paid.
        func paidCoins(_ amount: Int) -> JSONValue {
            .array([.object([("balance", JSONValue(amount)), ("currency", .string("coin")), ("held", 0),
                             ("available", JSONValue(amount)), ("paid", JSONValue(amount)), ("free", 0), ("debt", 0),
                             ("next_expiry", .null)])])
        }
        let coins600 = paidCoins(600)

        // A credit, then REFUND_REVERSED before the older REFUND it reverses.
        #expect(try credit("b-1").status == 201)
        #expect(try notify("REFUND_REVERSED", "b-1", secondsLater: 2) == "not_refunded")
        #expect(try notify("REFUND", "b-1", secondsLater: 1) == "superseded")
        #expect(try balance() == coins600)

        // Refund, reversal, then the credit of a flowNO never credited.
        #expect(try notify("REFUND", "b-2", secondsLater: 1) == "revoked")
        #expect(try credit("b-2").status == 422)
        #expect(try notify("REFUND_REVERSED", "b-2", secondsLater: 2) == "unrevoked")
        #expect(try credit("b-2").status == 201)
        #expect(try balance() == paidCoins(1200))

        let check = try runProcess([CommandLineTests.walletBinary, "check", "--full"],
                                   environment: ChaosRun.walletEnvironment(["WALLET_DATABASE_URL": binary.url]))
        #expect(check.status == 0, "\(check.output)\(check.error)")
    }

    @Test func aTieOnSignedDateEndsCredited() throws {
        let harness = try Harness()
        for flowNo in ["t-1", "t-2"] { #expect(try harness.credit(flowNo).status == 201) }
        #expect(try harness.service.balance(of: "cleo") == 1200)
        // In arrival order REFUND, REFUND_REVERSED.
        #expect(try harness.notify("REFUND", "t-1", secondsLater: 5) == "refunded")
        #expect(try harness.notify("REFUND_REVERSED", "t-1", secondsLater: 5) == "reversed")
        // The other way round.
        #expect(try harness.notify("REFUND_REVERSED", "t-2", secondsLater: 5) == "not_refunded")
        #expect(try harness.notify("REFUND", "t-2", secondsLater: 5) == "superseded")
        #expect(try harness.service.balance(of: "cleo") == 1200)
        #expect(try harness.status(of: "t-1") == "credited")
        #expect(try harness.status(of: "t-2") == "credited")
        // Never credited, reversal first: the credit goes through.
        #expect(try harness.notify("REFUND_REVERSED", "t-3", secondsLater: 5) == "not_refunded")
        #expect(try harness.notify("REFUND", "t-3", secondsLater: 5) == "superseded")
        #expect(try harness.credit("t-3").status == 201)
        #expect(try harness.service.balance(of: "cleo") == 1800)
        #expect(try harness.service.violations() == [])
    }

    @Test func anAdminRefundStaysOutOfApplesReach() throws {
        let harness = try Harness()
        #expect(try harness.credit("a-1").status == 201)
        let connection = try Connection(options: harness.service.database)
        defer { connection.close() }
        try connection.query("SELECT * FROM wallet.refund_credit('a-1', 'support case', 'alice')")
        #expect(try harness.notify("REFUND", "a-1", secondsLater: 1) == "already_refunded")
        #expect(try harness.notify("REFUND_REVERSED", "a-1", secondsLater: 2) == "not_reversible")
        #expect(try harness.notify("REFUND", "a-1", secondsLater: 1) == "superseded")
        #expect(try harness.service.balance(of: "cleo") == 0)
        #expect(try harness.status(of: "a-1") == "refunded")
        #expect(try harness.service.violations() == [])
    }
}

/// Signed REFUND / REFUND_REVERSED notifications for consumables.
enum RefundNotifications {
    static func uuid(_ number: Int) -> String {
        "00000000-0000-4000-8000-\(String(format: "%012d", number))"
    }

    /// The request body `{"signedPayload": …}` of one notification.
    static func body(apple: FakeAppStore, type: String, flowNo: String, uuid: String,
                     signedDateMilliseconds: Int64) -> String {
        var transaction = FakeAppStore.transaction(transactionID: flowNo)
        transaction.removeValue(forKey: "appAccountToken")
        var notification = FakeAppStore.notification(type: type, signedTransactionInfo: apple.sign(transaction))
        notification["notificationUUID"] = uuid
        notification["signedDate"] = signedDateMilliseconds
        return #"{"signedPayload":"\#(apple.sign(notification))"}"#
    }

    /// The fake store's root certificate in a DER file, for
    /// WALLET_APPLE_ROOT_CERTS; the caller removes it.
    static func writeRoot(of apple: FakeAppStore) throws -> String {
        let path = NSTemporaryDirectory() + "wallet-fake-root-\(UUID().uuidString.prefix(8)).der"
        try Data(apple.root.certificate.derBytes).write(to: URL(fileURLWithPath: path))
        return path
    }
}
