import AppStore
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

/// Credits backed by App Store evidence, and Apple's refund notifications,
/// through the real service.
@Suite(.timeLimit(.minutes(3)))
struct AppStoreCreditTests {
    static let vectors = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("AppStoreTests/Vectors")

    static func vector(_ name: String) throws -> JSONValue {
        try JSONParser.parse(Array(try Data(contentsOf: vectors.appendingPathComponent(name + ".json"))))
    }

    static func string(_ value: JSONValue?) -> String? {
        if case .string(let text)? = value { return text }
        return nil
    }

    /// A service that trusts the real Apple root and the apps of the vectors.
    func appleService() throws -> TestService {
        try TestService {
            $0.creditVerification = [.appStoreJWS]
            $0.apple.bundleIDs = ["com.cynet.xingqi"]
            $0.apple.environments = ["Sandbox"]
            $0.apple.appAppleID = 1_659_344_089
        }
    }

    @Test func realAppleTransactionCreditsAndItsRefundNotificationTakesItBack() throws {
        let service = try appleService()
        defer { service.stop() }
        // 1. The product, through the admin script.
        let product = try runProcess(["psql", "-X", TestService.conninfo(service.database), "-v", "ON_ERROR_STOP=1",
                                      "-v", "product_id=cynet.coci.5usd", "-v", "amount=500", "-v", "currency=coin",
                                      "-v", "operator=tests", "-f", "Scripts/admin/product.sql"])
        #expect(product.status == 0, "\(product.error)")

        // 2. The Apple-signed transaction nested in a real notification.
        let consumption = try Self.vector("real-notification-consumption-request-1")
        guard case .array(let nested)? = consumption["nested"],
              let transaction = nested.compactMap({ Self.string($0["jws"]) }).first else {
            Issue.record("the vector has no nested transaction")
            return
        }
        let body = #"{"user_id":"player-7","flow_no":"2000000849195831","product_id":"cynet.coci.5usd","signed_transaction":"\#(transaction)"}"#
        let credit = try service.request("POST", "/v1/credits", key: service.appBackendKey, json: body)
        #expect(credit.status == 201, "\(credit.text)")
        #expect(try credit.json()["credit"]?["amount"] == 500)
        #expect(try service.balance(of: "player-7") == 500)
        let environment = try service.count("SELECT count(*) FROM wallet.credits WHERE environment = 'Sandbox' AND source = 'appstore-jws'")
        #expect(environment == 1)

        // 3. Apple's refund notification for that transaction.
        let refund = try Self.vector("real-notification-refund-1")
        let payload = #"{"signedPayload":"\#(Self.string(refund["jws"]) ?? "")"}"#
        let applied = try service.request("POST", "/v1/appstore/notifications", json: payload)
        #expect(applied.status == 200, "\(applied.text)")
        #expect(try applied.json()["outcome"] == "refunded")
        // 4. The balance is back to 0, and a second post changes nothing.
        #expect(try service.balance(of: "player-7") == 0)
        let again = try service.request("POST", "/v1/appstore/notifications", json: payload)
        #expect(again.status == 200)
        #expect(try again.json()["outcome"] == "duplicate")
        #expect(try service.balance(of: "player-7") == 0)
        #expect(try service.count("SELECT count(*) FROM wallet.entries") == 2)
        let status = try service.request("GET", "/v1/credits/2000000849195831", key: service.adminKey)
        #expect(try status.json()["credit"]?["status"] == "refunded")
        #expect(try service.violations() == [])
    }

    @Test func signedTransactionsMustMatchTheRequestAndThePolicy() throws {
        let apple = try FakeAppStore()
        let rootFile = NSTemporaryDirectory() + "wallet-fake-root-\(UUID().uuidString.prefix(8)).der"
        try Data(apple.root.certificate.derBytes).write(to: URL(fileURLWithPath: rootFile))
        defer { try? FileManager.default.removeItem(atPath: rootFile) }
        let namespace = "3f1b0c4e-7d2a-4c59-9a7e-52b1d0f6a8c3"
        let service = try TestService {
            $0.creditVerification = [.appStoreJWS]
            $0.apple.bundleIDs = [FakeAppStore.bundleID]
            $0.apple.environments = ["Sandbox", "Production"]
            $0.apple.appAppleID = FakeAppStore.appAppleID
            $0.apple.rootCertificatePaths = [rootFile]
            $0.apple.accountTokenNamespace = namespace
        }
        defer { service.stop() }
        let connection = try Connection(options: service.database)
        try connection.query("SELECT * FROM wallet.upsert_product('coins.1000', 1000, 'coin', true, 'tests', 'test product')")

        let token = NameBasedUUID.v5(namespace: namespace, name: "alice")!
        func transaction(_ id: String, quantity: Int = 1, type: String = "Consumable", accountToken: String? = token,
                         revoked: Bool = false) -> String {
            var payload = FakeAppStore.transaction(transactionID: id)
            payload["quantity"] = quantity
            payload["type"] = type
            payload["appAccountToken"] = accountToken
            if revoked { payload["revocationDate"] = FakeAppStore.signedDateMilliseconds }
            return apple.sign(payload)
        }
        func credit(_ flowNo: String, _ jws: String, user: String = "alice", extra: String = "") throws -> HTTPTestResponse {
            try service.request("POST", "/v1/credits", key: service.appBackendKey, json: """
                {"user_id":"\(user)","flow_no":"\(flowNo)","product_id":"coins.1000","signed_transaction":"\(jws)"\(extra)}
                """)
        }
        func reason(_ response: HTTPTestResponse) throws -> String? {
            #expect(response.status == 422, "\(response.text)")
            return Self.string(try response.json()["reason"])
        }

        let three = try credit("t-1", transaction("t-1", quantity: 3))
        #expect(three.status == 201, "\(three.text)")
        #expect(try three.json()["credit"]?["quantity"] == 3)
        #expect(try service.balance(of: "alice") == 3000)

        #expect(try reason(credit("t-other", transaction("t-2"))) == "transaction_mismatch")
        #expect(try reason(credit("t-3", transaction("t-3", quantity: 2), extra: #","quantity":1"#)) == "transaction_mismatch")
        #expect(try reason(credit("t-4", transaction("t-4", type: "Non-Consumable"))) == "not_consumable")
        #expect(try reason(credit("t-5", transaction("t-5", revoked: true))) == "revoked")
        // One user's signed purchase cannot be claimed by another account.
        #expect(try reason(credit("t-6", transaction("t-6"), user: "mallory")) == "account_mismatch")
        // Evidence the service cannot verify.
        let stranger = try FakeAppStore()
        var foreign = FakeAppStore.transaction(transactionID: "t-7")
        foreign["appAccountToken"] = token
        #expect(try reason(credit("t-7", stranger.sign(foreign))) == "untrusted_root")
        let parts = transaction("t-8").split(separator: ".")
        let tampered = parts[0] + "." + parts[1] + "." + Base64URL.encode([UInt8](repeating: 7, count: 64))
        #expect(try reason(credit("t-8", tampered)) == "bad_signature")
        // No evidence: the caller's word is not enabled here.
        let bare = try service.credit(userID: "alice", flowNo: "t-9", productID: "coins.1000")
        #expect(try reason(bare) == "mode_not_enabled")
        #expect(try service.balance(of: "alice") == 3000)
        #expect(try service.count("SELECT count(*) FROM wallet.entries") == 1)
    }

    @Test func refundNotificationsFollowApplesLifecycle() throws {
        let apple = try FakeAppStore()
        let rootFile = NSTemporaryDirectory() + "wallet-fake-root-\(UUID().uuidString.prefix(8)).der"
        try Data(apple.root.certificate.derBytes).write(to: URL(fileURLWithPath: rootFile))
        defer { try? FileManager.default.removeItem(atPath: rootFile) }
        let service = try TestService {
            $0.creditVerification = [.appStoreJWS, .caller]
            $0.apple.bundleIDs = [FakeAppStore.bundleID]
            $0.apple.environments = ["Sandbox"]
            $0.apple.rootCertificatePaths = [rootFile]
        }
        defer { service.stop() }
        let connection = try Connection(options: service.database)
        try connection.query("SELECT * FROM wallet.upsert_product('coins.1000', 1000, 'coin', true, 'tests', 'test product')")

        var notificationNumber = 0
        func notify(_ type: String, transactionID: String, extra: [String: Any] = [:]) throws -> String? {
            var transaction = FakeAppStore.transaction(transactionID: transactionID)
            transaction.removeValue(forKey: "appAccountToken")
            transaction.merge(extra) { _, new in new }
            var notification = FakeAppStore.notification(type: type, signedTransactionInfo: apple.sign(transaction))
            notificationNumber += 1
            notification["notificationUUID"] = "00000000-0000-4000-8000-\(String(format: "%012d", notificationNumber))"
            // Apple's order is signedDate order: each one a second after the last.
            notification["signedDate"] = FakeAppStore.signedDateMilliseconds + Int64(notificationNumber) * 1000
            let response = try service.request("POST", "/v1/appstore/notifications",
                                               json: #"{"signedPayload":"\#(apple.sign(notification))"}"#)
            #expect(response.status == 200, "\(response.text)")
            return Self.string(try response.json()["outcome"])
        }
        func creditCaller(_ flowNo: String) throws -> Int {
            try service.credit(userID: "bea", flowNo: flowNo, productID: "coins.1000").status
        }

        #expect(try creditCaller("r-1") == 201)
        #expect(try notify("REFUND", transactionID: "r-1") == "refunded")
        #expect(try service.balance(of: "bea") == 0)
        #expect(try notify("REFUND", transactionID: "r-1") == "already_refunded")
        #expect(try notify("REFUND_REVERSED", transactionID: "r-1") == "reversed")
        #expect(try service.balance(of: "bea") == 1000)
        #expect(try notify("REFUND_REVERSED", transactionID: "r-1") == "not_refunded")
        // A later refund may refund it again, prorated this time.
        #expect(try notify("REFUND", transactionID: "r-1",
                           extra: ["revocationDate": FakeAppStore.signedDateMilliseconds,
                                   "revocationType": "REFUND_PRORATED", "revocationPercentage": 25_000]) == "refunded")
        #expect(try service.balance(of: "bea") == 750)

        // An admin refund is not Apple's to reverse.
        #expect(try creditCaller("r-2") == 201)
        try connection.query("SELECT * FROM wallet.refund_credit('r-2', 'support case', 'alice')")
        #expect(try notify("REFUND_REVERSED", transactionID: "r-2") == "not_reversible")
        #expect(try notify("REFUND", transactionID: "r-2") == "already_refunded")
        #expect(try service.balance(of: "bea") == 750)

        // A refund before any credit makes the flowNO uncreditable.
        #expect(try notify("REFUND", transactionID: "r-3") == "revoked")
        let late = try service.credit(userID: "bea", flowNo: "r-3", productID: "coins.1000")
        #expect(late.status == 422)
        #expect(Self.string(try late.json()["reason"]) == "revoked")

        // Other notifications are kept without touching balances.
        #expect(try notify("REFUND_DECLINED", transactionID: "r-1") == "recorded")
        #expect(try notify("CONSUMPTION_REQUEST", transactionID: "r-1") == "recorded")
        #expect(try notify("REFUND", transactionID: "sub-1", extra: ["type": "Auto-Renewable Subscription"]) == "recorded")
        #expect(try service.balance(of: "bea") == 750)
        #expect(try service.count("SELECT count(*) FROM wallet.appstore_notifications") == notificationNumber)
        #expect(try service.violations() == [])

        // A notification that fails verification is refused and kept nowhere.
        let stranger = try FakeAppStore()
        let forged = stranger.sign(FakeAppStore.notification(type: "REFUND"))
        let refused = try service.request("POST", "/v1/appstore/notifications", json: #"{"signedPayload":"\#(forged)"}"#)
        #expect(refused.status == 422)
        #expect(try refused.json()["code"] == "verification_failed")
        #expect(Self.string(try refused.json()["reason"]) == "untrusted_root")
        #expect(try service.count("SELECT count(*) FROM wallet.appstore_notifications") == notificationNumber)
    }

    @Test func legacyReceiptsAreCheckedWithAppleAndFallBackToSandbox() throws {
        func receipt(environment: String, transactionID: String = "5000000000000001") -> FakeVerifyReceiptServer.Reply {
            let object: [String: Any] = [
                "status": 0, "environment": environment,
                "receipt": ["bundle_id": FakeAppStore.bundleID, "in_app": [[
                    "transaction_id": transactionID, "original_transaction_id": transactionID,
                    "product_id": "coins.1000", "quantity": "2", "purchase_date_ms": "1700000000000",
                ]]],
            ]
            return .json(String(decoding: try! JSONSerialization.data(withJSONObject: object), as: UTF8.self))
        }
        let production = try FakeVerifyReceiptServer(reply: .json(#"{"status":21007}"#))
        let sandbox = try FakeVerifyReceiptServer(reply: receipt(environment: "Sandbox"))
        defer { production.stop(); sandbox.stop() }
        let service = try TestService {
            $0.creditVerification = [.appStoreReceipt]
            $0.apple.bundleIDs = [FakeAppStore.bundleID]
            $0.apple.environments = ["Production", "Sandbox"]
            $0.apple.appAppleID = FakeAppStore.appAppleID
            $0.apple.verifyReceiptURL = production.url
            $0.apple.verifyReceiptSandboxURL = sandbox.url
            $0.apple.sharedSecret = "shared-secret-for-tests"
            $0.apple.verifyReceiptTimeoutSeconds = 5
        }
        defer { service.stop() }
        let connection = try Connection(options: service.database)
        try connection.query("SELECT * FROM wallet.upsert_product('coins.1000', 1000, 'coin', true, 'tests', 'test product')")

        let body = #"{"user_id":"cy","flow_no":"5000000000000001","product_id":"coins.1000","receipt_data":"TUlJVDFRWUpLb1pJaHZjTg=="}"#
        let credit = try service.request("POST", "/v1/credits", key: service.appBackendKey, json: body)
        #expect(credit.status == 201, "\(credit.text)")
        #expect(try credit.json()["credit"]?["quantity"] == 2)
        #expect(try service.balance(of: "cy") == 2000)
        #expect(production.requests.count == 1)
        #expect(sandbox.requests.count == 1)
        #expect((sandbox.requests.first?.json?["password"] as? String) == "shared-secret-for-tests")
        #expect(try service.count("SELECT count(*) FROM wallet.credits WHERE environment = 'Sandbox'") == 1)

        // The receipt does not hold this flowNO.
        let other = try service.request("POST", "/v1/credits", key: service.appBackendKey,
                                        json: body.replacingOccurrences(of: "5000000000000001", with: "5000000000000002"))
        #expect(other.status == 422)
        #expect(Self.string(try other.json()["reason"]) == "transaction_mismatch")
        #expect(try service.balance(of: "cy") == 2000)
    }

    @Test func appleUnreachableIs503AndWritesNothing() throws {
        let silent = try FakeVerifyReceiptServer(reply: .http(status: 503, body: "down"))
        defer { silent.stop() }
        let service = try TestService {
            $0.creditVerification = [.appStoreReceipt]
            $0.apple.bundleIDs = [FakeAppStore.bundleID]
            $0.apple.appAppleID = FakeAppStore.appAppleID
            $0.apple.verifyReceiptURL = silent.url
            $0.apple.verifyReceiptTimeoutSeconds = 2
        }
        defer { service.stop() }
        let response = try service.request("POST", "/v1/credits", key: service.appBackendKey, json: """
            {"user_id":"dd","flow_no":"6000000000000001","product_id":"guodong600","receipt_data":"TUlJ"}
            """)
        #expect(response.status == 503)
        #expect(try response.json()["code"] == "verification_unavailable")
        #expect(response.header("Retry-After") != nil)
        #expect(try service.count("SELECT count(*) FROM wallet.entries") == 0)
    }
}
