import Crypto
import Foundation
import GooglePlay
import HTTPServer
import Locking
import Postgres
import Testing
import TestSupport
@testable import WalletService
import ServiceTestSupport
@testable import WalletStore

/// Google Play voids through the real `wallet serve`: pushed by Pub/Sub (an
/// OIDC token checked against a fake Google's keys), swept from the
/// voided-purchases list, or both, and always applied once.
@Suite(.timeLimit(.minutes(3)))
struct GooglePlayVoidTests {
    static func rig(_ extra: [String: String] = [:]) throws -> (GooglePlayRig, FakeGoogleCerts) {
        let certs = try FakeGoogleCerts()
        do {
            let rig = try GooglePlayRig(extra: [
                "WALLET_GOOGLE_PUSH_JWKS_URL": certs.url.absoluteString,
                "WALLET_GOOGLE_PUSH_AUDIENCE": FakeGoogleCerts.defaultAudience,
                "WALLET_GOOGLE_PUSH_SERVICE_ACCOUNT": FakeGoogleCerts.defaultEmail,
                "WALLET_GOOGLE_VOIDED_POLL_MINUTES": "0",
            ].merging(extra) { $1 })
            return (rig, certs)
        } catch {
            certs.stop()
            throw error
        }
    }

    /// A Pub/Sub push body of a developer notification.
    static func push(messageID: String, package: String = "com.example.coins", eventMillis: Int64,
                     _ notification: String) -> String {
        let data = #"{"version":"1.0","packageName":"\#(package)","eventTimeMillis":"\#(eventMillis)",\#(notification)}"#
        return #"{"message":{"data":"\#(Base64.encode(Array(data.utf8)))","messageId":"\#(messageID)","message_id":"\#(messageID)","publishTime":"2026-12-03T10:00:00Z","attributes":{}},"subscription":"projects/p/subscriptions/play","deliveryAttempt":1}"#
    }

    static func voided(token: String, orderID: String, refundType: Int) -> String {
        #""voidedPurchaseNotification":{"purchaseToken":"\#(token)","orderId":"\#(orderID)","productType":2,"refundType":\#(refundType)}"#
    }

    static func send(_ rig: GooglePlayRig, _ body: String, token: String?) throws -> HTTPTestResponse {
        let client = try HTTPTestClient(port: rig.port, timeoutSeconds: 15)
        defer { client.close() }
        var headers: [(name: String, value: String)] = [("Content-Type", "application/json")]
        if let token { headers.append(("Authorization", "Bearer \(token)")) }
        return try client.request(method: "POST", path: "/v1/googleplay/notifications", headers: headers,
                                  body: Array(body.utf8))
    }

    static func nowMillis() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    @Test func aPushedVoidRefundsOnceEvenWhenTheSweepFindsItToo() throws {
        let (rig, certs) = try Self.rig()
        defer { rig.stop(); certs.stop() }
        rig.google.setPurchase(productID: "guodong600", token: "tok-void", .purchased(orderId: "GPA.10-1"))
        #expect(try rig.credit(token: "tok-void", userID: "droid-10").status == 201)
        let event = Self.nowMillis() - 60_000
        let body = Self.push(messageID: "m-1", eventMillis: event, Self.voided(token: "tok-void", orderID: "GPA.10-1", refundType: 1))
        #expect(try Self.send(rig, body, token: certs.token()).status == 204)
        #expect(try rig.rows("SELECT status, refunded_by, refunded_amount::text FROM wallet.credits") == [["refunded", "google", "600"]])
        #expect(try rig.count("SELECT balance FROM wallet.wallets WHERE user_id = 'droid-10'") == 0)
        // Pub/Sub delivers it again: nothing more.
        #expect(try Self.send(rig, body, token: certs.token()).status == 204)
        #expect(try rig.rows("SELECT outcome FROM wallet.googleplay_notifications") == [["refunded"]])
        // The sweep lists the same void: nothing more.
        rig.google.addVoided(.init(purchaseToken: "tok-void", orderId: "GPA.10-1", voidedTimeMillis: event + 5))
        let sweep = try rig.walletCommand(["googleplay", "reconcile"])
        #expect(sweep.status == 0, "\(sweep)")
        #expect(sweep.output.contains("seen=1 applied=0 already=1 refused=0"), "\(sweep)")
        #expect(try rig.count("SELECT count(*) FROM wallet.entries WHERE kind = 'refund'") == 1)
        #expect(try rig.count("SELECT balance FROM wallet.wallets WHERE user_id = 'droid-10'") == 0)
        #expect(try rig.violations() == 0)
        // The console's credit page tells the story.
        let admin = try rig.walletCommand(["keys", "create", "--name", "support", "--scopes", "admin"])
        let adminKey = try #require(admin.output.split(separator: "\n").last.map(String.init))
        let login = try TestService.request(port: rig.port, "POST", "/admin/login", key: nil, json: nil,
                                            headers: [("Content-Type", "application/x-www-form-urlencoded")],
                                            body: "api_key=" + Forms.percentEncoded(adminKey))
        let cookie = try #require(login.header("Set-Cookie")?.split(separator: ";").first.map(String.init))
        let page = try TestService.request(port: rig.port, "GET", "/admin/credits/GPA.10-1", key: nil, json: nil,
                                           headers: [("Cookie", cookie)]).text
        #expect(page.contains("<dd>googleplay</dd>"))
        #expect(page.contains("<td>full</td><td class=\"number\"></td><td>push</td>"))
        #expect(page.contains("<td class=\"id\">m-1</td><td>voided_purchase</td>"))
        #expect(page.contains("<td>googleplay_consume</td>"))
        let metrics = try rig.request("GET", "/metrics", key: nil, body: nil).text
        #expect(metrics.contains(#"wallet_googleplay_notifications_total{outcome="refunded"} 1"#))
        #expect(metrics.contains(#"wallet_googleplay_notifications_total{outcome="duplicate"} 1"#))
        #expect(metrics.contains(#"wallet_coins_total{kind="refunded"} 600"#))
    }

    @Test func twoOfThreeRefundedThenTheRestConvergesOnGooglesCount() throws {
        let (rig, certs) = try Self.rig()
        defer { rig.stop(); certs.stop() }
        rig.google.setPurchase(productID: "guodong600", token: "tok-three", .purchased(orderId: "GPA.11-1", quantity: 3))
        #expect(try rig.credit(token: "tok-three", userID: "droid-11").status == 201)
        let event = Self.nowMillis() - 120_000
        rig.google.addVoided(.init(purchaseToken: "tok-three", orderId: "GPA.11-1", voidedTimeMillis: event, refundType: 2,
                                   voidedQuantity: 2))
        let body = Self.push(messageID: "m-2", eventMillis: event, Self.voided(token: "tok-three", orderID: "GPA.11-1", refundType: 2))
        #expect(try Self.send(rig, body, token: certs.token()).status == 204)
        #expect(try rig.rows("SELECT status, refunded_amount::text FROM wallet.credits") == [["partially_refunded", "1200"]])
        #expect(try rig.count("SELECT balance FROM wallet.wallets WHERE user_id = 'droid-11'") == 600)
        let read = try rig.request("GET", "/v1/credits/GPA.11-1", key: rig.appKey, body: nil)
        #expect(try read.json()["credit"]?["status"] == "partially_refunded")
        // Swept again: the same void, nothing more.
        #expect(try rig.walletCommand(["googleplay", "reconcile"]).output.contains("applied=0 already=1"))
        #expect(try rig.count("SELECT balance FROM wallet.wallets WHERE user_id = 'droid-11'") == 600)
        // Google voids the rest: the credit converges to all of it.
        rig.google.addVoided(.init(purchaseToken: "tok-three", orderId: "GPA.11-1", voidedTimeMillis: event + 30_000))
        let sweep = try rig.walletCommand(["googleplay", "reconcile"])
        #expect(sweep.output.contains("seen=2 applied=1 already=0"), "\(sweep)")
        #expect(try rig.rows("SELECT status, refunded_amount::text FROM wallet.credits") == [["refunded", "1800"]])
        #expect(try rig.rows("SELECT amount::text FROM wallet.entries WHERE kind = 'refund' ORDER BY id") == [["-1200"], ["-600"]])
        #expect(try rig.count("SELECT balance FROM wallet.wallets WHERE user_id = 'droid-11'") == 0)
        #expect(try rig.violations() == 0)
    }

    @Test func aVoidOfAPurchaseNeverCreditedRefusesItsCredit() throws {
        let (rig, certs) = try Self.rig()
        defer { rig.stop(); certs.stop() }
        rig.google.setPurchase(productID: "guodong600", token: "tok-early", .purchased(orderId: "GPA.12-1"))
        let body = Self.push(messageID: "m-3", eventMillis: Self.nowMillis(),
                             Self.voided(token: "tok-early", orderID: "GPA.12-1", refundType: 1))
        #expect(try Self.send(rig, body, token: certs.token()).status == 204)
        #expect(try rig.rows("SELECT outcome FROM wallet.googleplay_notifications") == [["revoked"]])
        let credit = try rig.credit(token: "tok-early", userID: "droid-12")
        #expect(credit.status == 422)
        #expect(try credit.json()["reason"] == "revoked")
        #expect(try rig.count("SELECT count(*) FROM wallet.credits") == 0)
    }

    @Test func aVoidAndCreditsOfOneTokenRacingEndConsistent() throws {
        let (rig, certs) = try Self.rig()
        defer { rig.stop(); certs.stop() }
        for round in 0..<4 {
            let token = "tok-race-\(round)"
            rig.google.setPurchase(productID: "guodong600", token: token, .purchased(orderId: "GPA.13-\(round)"))
            let body = Self.push(messageID: "m-race-\(round)", eventMillis: Self.nowMillis(),
                                 Self.voided(token: token, orderID: "GPA.13-\(round)", refundType: 1))
            let pushToken = certs.token()
            let pushed = Locked<Int?>(nil)
            #expect(runOnThreads(16) { index in
                if index == 7 {
                    let status = (try? Self.send(rig, body, token: pushToken))?.status
                    pushed.withLock { $0 = status }
                } else {
                    _ = try? rig.credit(token: token, userID: "droid-13")
                }
            })
            #expect(pushed.withLock { $0 } == 204)
            // Either the credit came first and was refunded, or the void came
            // first and no credit was made: never a credit left standing.
            let credits = try rig.rows("SELECT status FROM wallet.credits WHERE purchase_token = \(token)")
            #expect(credits == [] || credits == [["refunded"]], "\(credits)")
        }
        #expect(try rig.count("SELECT coalesce(sum(balance), 0) FROM wallet.wallets WHERE user_id = 'droid-13'") == 0)
        #expect(try rig.violations() == 0)
    }

    @Test func badPushTokensAreRefusedAndRecordNothing() throws {
        let (rig, certs) = try Self.rig()
        defer { rig.stop(); certs.stop() }
        let body = Self.push(messageID: "m-bad", eventMillis: Self.nowMillis(), #""testNotification":{"version":"1.0"}"#)
        let cases: [(String?, String)] = [
            (nil, "missing_token"),
            (certs.token(audience: "https://elsewhere.example.com"), "wrong_audience"),
            (certs.token(email: "someone@else.iam.gserviceaccount.com"), "wrong_email"),
            (certs.token(emailVerified: false), "email_not_verified"),
            (certs.token(expiresIn: 3_600, issuedAt: Date().addingTimeInterval(-7_200)), "expired"),
            (certs.token(kid: "no-such-kid"), "unknown_key"),
            (certs.token(signWith: certs.strayKey), "bad_signature"),
            (certs.token(issuer: "https://evil.example.com"), "wrong_issuer"),
        ]
        for (token, reason) in cases {
            let response = try Self.send(rig, body, token: token)
            #expect(response.status == 401, "\(reason)")
            #expect(try response.json()["code"] == "unauthorized", "\(reason)")
            #expect(try response.json()["reason"] == .string(reason), "\(reason)")
        }
        #expect(try rig.count("SELECT count(*) FROM wallet.googleplay_notifications") == 0)
        // A good token with a malformed body is 400; with a good body, 204.
        for malformed in ["{}", #"{"message":{"messageId":"m"}}"#, #"{"message":{"data":"!!","messageId":"m"}}"#, "[1]"] {
            let response = try Self.send(rig, malformed, token: certs.token())
            #expect(response.status == 400, "\(malformed)")
            #expect(try response.json()["code"] == "malformed_notification")
        }
        #expect(try Self.send(rig, body, token: certs.token()).status == 204)
        // Another app's notifications are settled and ignored.
        let other = Self.push(messageID: "m-other", package: "com.example.other", eventMillis: Self.nowMillis(),
                              Self.voided(token: "tok-x", orderID: "GPA.x", refundType: 1))
        #expect(try Self.send(rig, other, token: certs.token()).status == 204)
        #expect(try rig.rows("SELECT message_id, kind, outcome FROM wallet.googleplay_notifications") == [
            ["m-bad", "test", "recorded"],
        ])
    }
}
