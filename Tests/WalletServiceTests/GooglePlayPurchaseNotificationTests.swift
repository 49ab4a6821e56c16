import Foundation
import GooglePlay
import JSON
import Postgres
import Testing
import TestSupport

/// Google Play's ONE_TIME_PRODUCT_PURCHASED notifications crediting the
/// player their obfuscatedExternalAccountId names, through the real
/// `wallet serve`, a fake Google that checks its service account's tokens,
/// and pushes signed as Pub/Sub signs them.
@Suite(.timeLimit(.minutes(3)))
struct GooglePlayPurchaseNotificationTests {
    static func oneTime(_ type: Int, token: String, sku: String = "guodong600") -> String {
        #""oneTimeProductNotification":{"version":"1.0","notificationType":\#(type),"purchaseToken":"\#(token)","sku":"\#(sku)"}"#
    }

    static func push(_ rig: GooglePlayRig, _ certs: FakeGoogleCerts, id: String, _ notification: String) throws -> Int {
        let body = GooglePlayVoidTests.push(messageID: id, eventMillis: GooglePlayVoidTests.nowMillis(), notification)
        return try GooglePlayVoidTests.send(rig, body, token: certs.token()).status
    }

    /// The player's Google account id, as the wallet issues it.
    static func accountID(_ rig: GooglePlayRig, of userID: String) throws -> String {
        let answer = try rig.request("GET", "/v1/wallets/\(userID)/account-tokens", key: rig.appKey, body: nil)
        guard case .string(let id)? = try answer.json()["google_obfuscated_account_id"] else { return "" }
        return id
    }

    @Test func aPurchaseCreditsOnceAndIsConsumedOnceWhateverCallsItToo() throws {
        let (rig, certs) = try GooglePlayVoidTests.rig()
        defer { rig.stop(); certs.stop() }
        let account = try Self.accountID(rig, of: "droid-20")
        rig.google.setPurchase(productID: "guodong600", token: "tok-rtdn", .purchased(orderId: "GPA.20-1", accountID: account))
        #expect(try Self.push(rig, certs, id: "m-20", Self.oneTime(1, token: "tok-rtdn")) == 204)
        #expect(try rig.rows("SELECT flow_no, user_id, source, environment, amount::text FROM wallet.credits")
            == [["GPA.20-1", "droid-20", "googleplay", "Production", "600"]])
        // Pub/Sub delivers it again, and the app calls late: the same credit.
        #expect(try Self.push(rig, certs, id: "m-20", Self.oneTime(1, token: "tok-rtdn")) == 204)
        let late = try rig.credit(token: "tok-rtdn", userID: "droid-20")
        #expect(late.status == 200 && late.header("Idempotent-Replayed") == "true")
        #expect(try rig.count("SELECT balance FROM wallet.wallets WHERE user_id = 'droid-20'") == 600)
        #expect(waitFor(seconds: 30) {
            (try? rig.count("SELECT count(*) FROM wallet.outbox WHERE kind = 'googleplay_consume' AND status = 'sent'")) == 1
        })
        #expect(rig.google.consumed.map(\.token) == ["tok-rtdn"])
        #expect(try rig.violations() == 0)
    }

    @Test func aCanceledPurchaseIsRecordedAndAPendingOneCreditsOnceItIsPaid() throws {
        let (rig, certs) = try GooglePlayVoidTests.rig()
        defer { rig.stop(); certs.stop() }
        let account = try Self.accountID(rig, of: "droid-21")
        // A pending purchase that never completed: Google cancels it.
        rig.google.setPurchase(productID: "guodong600", token: "tok-gone", .canceled(orderId: "GPA.21-0", accountID: account))
        #expect(try Self.push(rig, certs, id: "m-21-0", Self.oneTime(2, token: "tok-gone")) == 204)
        #expect(try rig.rows("SELECT kind FROM wallet.googleplay_notifications") == [["one_time_product"]])
        // Pending: nothing yet; paid, pushed again: credited once.
        rig.google.setPurchase(productID: "guodong1200", token: "tok-later",
                               .pending(orderId: "GPA.21-1", accountID: account))
        #expect(try Self.push(rig, certs, id: "m-21-1", Self.oneTime(1, token: "tok-later", sku: "guodong1200")) == 204)
        #expect(try rig.count("SELECT count(*) FROM wallet.credits") == 0)
        rig.google.setPurchase(productID: "guodong1200", token: "tok-later",
                               .purchased(orderId: "GPA.21-1", accountID: account))
        #expect(try Self.push(rig, certs, id: "m-21-2", Self.oneTime(1, token: "tok-later", sku: "guodong1200")) == 204)
        #expect(try Self.push(rig, certs, id: "m-21-3", Self.oneTime(1, token: "tok-later", sku: "guodong1200")) == 204)
        #expect(try rig.rows("SELECT flow_no, amount::text FROM wallet.credits") == [["GPA.21-1", "1200"]])
        #expect(try rig.count("SELECT balance FROM wallet.wallets WHERE user_id = 'droid-21'") == 1200)
        #expect(waitFor(seconds: 30) {
            (try? rig.count("SELECT count(*) FROM wallet.outbox WHERE kind = 'googleplay_consume' AND status = 'sent'")) == 1
        })
        #expect(rig.google.consumed.map(\.token) == ["tok-later"])
    }

    @Test func anUnknownAccountIsKeptUntilItsPlayerSignsIn() throws {
        let (rig, certs) = try GooglePlayVoidTests.rig()
        defer { rig.stop(); certs.stop() }
        let account = PurchasePolicy.accountID(forUserID: "droid-22")
        rig.google.setPurchase(productID: "guodong600", token: "tok-early", .purchased(orderId: "GPA.22-1", accountID: account))
        #expect(try Self.push(rig, certs, id: "m-22", Self.oneTime(1, token: "tok-early")) == 204)
        #expect(try rig.count("SELECT count(*) FROM wallet.credits") == 0)
        #expect(try rig.rows("SELECT store, flow_no, purchase_token FROM wallet.unclaimed_purchases")
            == [["google", "GPA.22-1", "tok-early"]])
        #expect(try Self.accountID(rig, of: "droid-22") == account)
        #expect(try rig.rows("SELECT user_id, source, purchase_token FROM wallet.credits")
            == [["droid-22", "googleplay", "tok-early"]])
        #expect(try rig.count("SELECT count(*) FROM wallet.unclaimed_purchases") == 0)
        #expect(waitFor(seconds: 30) { rig.google.consumed.map(\.token) == ["tok-early"] })
        #expect(try rig.violations() == 0)
    }
}
