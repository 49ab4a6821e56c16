import Crypto
import Foundation
import GooglePlay
import HTTPServer
import JSON
import Locking
import Postgres
import Testing
import TestSupport
@testable import ServiceAPI
@testable import ServiceSupport
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

    /// The voided-purchases sweep's mark, in epoch milliseconds.
    static func mark(_ rig: GooglePlayRig) throws -> Int64? {
        try rig.rows("""
            SELECT (extract(epoch FROM swept_until) * 1000)::bigint FROM wallet.appstore_reconcile_marks
            WHERE environment = 'googleplay-voided'
            """).first.flatMap { Int64($0[0]) }
    }

    /// Every credit's status and refunded coins, for expectations that
    /// show what they found.
    static func credits(_ rig: GooglePlayRig) throws -> [[String]] {
        try rig.rows("SELECT status, coalesce(refunded_amount, 0)::text FROM wallet.credits ORDER BY flow_no")
    }

    @Test func aPushedVoidRefundsOnceEvenWhenTheSweepFindsItToo() throws {
        let (rig, certs) = try Self.rig()
        defer { rig.stop(); certs.stop() }
        rig.google.setPurchase(productID: "guodong600", token: "tok-void", .purchased(orderId: "GPA.10-1"))
        #expect(try rig.credit(token: "tok-void", userID: "droid-10").status == 201)
        let event = Self.nowMillis() - 60_000
        // Google lists the void; the push says so too.
        rig.google.addVoided(.init(purchaseToken: "tok-void", orderId: "GPA.10-1", voidedTimeMillis: event + 5))
        let body = Self.push(messageID: "m-1", eventMillis: event, Self.voided(token: "tok-void", orderID: "GPA.10-1", refundType: 1))
        #expect(try Self.send(rig, body, token: certs.token()).status == 204)
        #expect(try rig.rows("SELECT status, refunded_by, refunded_amount::text FROM wallet.credits") == [["refunded", "google", "600"]])
        #expect(try rig.count("SELECT balance FROM wallet.wallets WHERE user_id = 'droid-10'") == 0)
        // Pub/Sub delivers it again: nothing more.
        #expect(try Self.send(rig, body, token: certs.token()).status == 204)
        #expect(try rig.rows("SELECT outcome FROM wallet.googleplay_notifications") == [["refunded"]])
        // The sweep lists the same void: nothing more.
        let sweep = try rig.walletCommand(["googleplay", "reconcile"])
        #expect(sweep.status == 0, "\(sweep)")
        #expect(sweep.output.contains("seen=1 applied=0 already=1 refused=0 failed=0"), "\(sweep)")
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
        #expect(metrics.contains(#"wallet_googleplay_voids_total{outcome="refunded"} 1"#))
        #expect(metrics.contains(#"wallet_coins_total{kind="refunded"} 600"#))
    }

    @Test func twoOfThreeRefundedThenTheRestConvergesOnGooglesCount() throws {
        let (rig, certs) = try Self.rig()
        defer { rig.stop(); certs.stop() }
        rig.google.setPurchase(productID: "guodong600", token: "tok-three", .purchased(orderId: "GPA.11-1", quantity: 3))
        #expect(try rig.credit(token: "tok-three", userID: "droid-11").status == 201)
        let event = Self.nowMillis() - 120_000
        // As Google lists a quantity-based partial refund: voidedQuantity, no refund type.
        rig.google.addVoided(.init(purchaseToken: "tok-three", orderId: "GPA.11-1", voidedTimeMillis: event, voidedQuantity: 2))
        let body = Self.push(messageID: "m-2", eventMillis: event, Self.voided(token: "tok-three", orderID: "GPA.11-1", refundType: 2))
        let pushed = try Self.send(rig, body, token: certs.token())
        #expect(pushed.status == 204, "\(pushed.text)")
        #expect(try Self.credits(rig) == [["partially_refunded", "1200"]], "\((try? Self.credits(rig)) ?? [])")
        #expect(try rig.count("SELECT balance FROM wallet.wallets WHERE user_id = 'droid-11'") == 600)
        let read = try rig.request("GET", "/v1/credits/GPA.11-1", key: rig.appKey, body: nil)
        #expect(try read.json()["credit"]?["status"] == "partially_refunded")
        // Swept again: the same void, nothing more.
        #expect(try rig.walletCommand(["googleplay", "reconcile"]).output.contains("applied=0 already=1"))
        #expect(try rig.count("SELECT balance FROM wallet.wallets WHERE user_id = 'droid-11'") == 600)
        // Google voids the rest: the credit converges to all of it.
        rig.google.addVoided(.init(purchaseToken: "tok-three", orderId: "GPA.11-1", voidedTimeMillis: event + 30_000))
        let sweep = try rig.walletCommand(["googleplay", "reconcile"])
        #expect(sweep.output.contains("seen=2 applied=1 already=1"), "\(sweep)")
        #expect(try Self.credits(rig) == [["refunded", "1800"]], "\((try? Self.credits(rig)) ?? [])")
        #expect(try rig.rows("SELECT amount::text FROM wallet.entries WHERE kind = 'refund' ORDER BY id") == [["-1200"], ["-600"]])
        #expect(try rig.count("SELECT balance FROM wallet.wallets WHERE user_id = 'droid-11'") == 0)
        #expect(try rig.violations() == 0)
    }

    /// The other order: the sweep meets the partial refund first, and the
    /// push comes after (and again). Two of three units are 1,200 coins,
    /// whichever way and however often Google's word arrives.
    @Test func aPartialVoidSweptThenPushedTakesTwoOfThreeOnce() throws {
        let (rig, certs) = try Self.rig()
        defer { rig.stop(); certs.stop() }
        rig.google.setPurchase(productID: "guodong600", token: "tok-swept", .purchased(orderId: "GPA.14-1", quantity: 3))
        #expect(try rig.credit(token: "tok-swept", userID: "droid-14").status == 201)
        let event = Self.nowMillis() - 90_000
        rig.google.addVoided(.init(purchaseToken: "tok-swept", orderId: "GPA.14-1", voidedTimeMillis: event, voidedQuantity: 2))
        let sweep = try rig.walletCommand(["googleplay", "reconcile"])
        #expect(sweep.status == 0, "\(sweep)")
        #expect(try Self.credits(rig) == [["partially_refunded", "1200"]], "\((try? Self.credits(rig)) ?? [])")
        #expect(try rig.rows("SELECT refund_type::text, voided_quantity::text, source FROM wallet.googleplay_voids")
            == [["2", "2", "sweep"]])
        for message in ["m-14a", "m-14b"] {
            let body = Self.push(messageID: message, eventMillis: event,
                                 Self.voided(token: "tok-swept", orderID: "GPA.14-1", refundType: 2))
            #expect(try Self.send(rig, body, token: certs.token()).status == 204)
        }
        #expect(try rig.rows("SELECT outcome FROM wallet.googleplay_notifications ORDER BY message_id") == [["unchanged"], ["unchanged"]])
        #expect(try rig.walletCommand(["googleplay", "reconcile", "--since", "2000-01-01T00:00:00Z"]).status == 0)
        #expect(try Self.credits(rig) == [["partially_refunded", "1200"]], "\((try? Self.credits(rig)) ?? [])")
        #expect(try rig.count("SELECT count(*) FROM wallet.entries WHERE kind = 'refund'") == 1)
        let balance = try rig.count("SELECT balance FROM wallet.wallets WHERE user_id = 'droid-14'")
        #expect(balance == 600, "\(balance)")
        #expect(try rig.violations() == 0)
    }

    @Test func aVoidOfAPurchaseNeverCreditedRefusesItsCredit() throws {
        let (rig, certs) = try Self.rig()
        defer { rig.stop(); certs.stop() }
        rig.google.setPurchase(productID: "guodong600", token: "tok-early", .purchased(orderId: "GPA.12-1"))
        rig.google.addVoided(.init(purchaseToken: "tok-early", orderId: "GPA.12-1", voidedTimeMillis: Self.nowMillis() - 1_000))
        let body = Self.push(messageID: "m-3", eventMillis: Self.nowMillis(),
                             Self.voided(token: "tok-early", orderID: "GPA.12-1", refundType: 1))
        #expect(try Self.send(rig, body, token: certs.token()).status == 204)
        #expect(try rig.rows("SELECT outcome FROM wallet.googleplay_notifications") == [["revoked"]])
        let credit = try rig.credit(token: "tok-early", userID: "droid-12")
        #expect(credit.status == 422)
        #expect(try credit.json()["reason"] == "revoked")
        // Google voided it, and the answer says so.
        let detail = try #require(try credit.json()["detail"].flatMap { value -> String? in
            if case .string(let text) = value { return text }
            return nil
        })
        #expect(detail.contains("Google Play"), "\(detail)")
        #expect(!detail.contains("Apple"), "\(detail)")
        #expect(try rig.count("SELECT count(*) FROM wallet.credits") == 0)
    }

    /// A push's bearer token proves Pub/Sub sent something, not what: a body
    /// naming a purchase Google does not show voided changes nothing, and
    /// its retry, once Google does show it, is applied afresh.
    @Test func aForgedVoidUnderAGenuineBearerChangesNothing() throws {
        let (rig, certs) = try Self.rig()
        defer { rig.stop(); certs.stop() }
        rig.google.setPurchase(productID: "guodong600", token: "tok-forged", .purchased(orderId: "GPA.15-1"))
        let bearer = certs.token()
        // Before the credit: a forged void would make it `revoked`.
        let early = Self.push(messageID: "m-15a", eventMillis: Self.nowMillis(),
                              Self.voided(token: "tok-forged", orderID: "GPA.15-1", refundType: 1))
        let refused = try Self.send(rig, early, token: bearer)
        #expect(refused.status == 503, "\(refused.text)")
        #expect(try refused.json()["code"] == "void_not_confirmed")
        #expect(refused.header("Retry-After") != nil)
        #expect(try rig.count("SELECT count(*) FROM wallet.googleplay_notifications") == 0)
        #expect(try rig.count("SELECT count(*) FROM wallet.googleplay_voids") == 0)
        #expect(try rig.credit(token: "tok-forged", userID: "droid-15").status == 201)
        // After it: neither a whole nor a partial void is taken on the push's word.
        for (message, refundType) in [("m-15b", 1), ("m-15c", 2)] {
            let forged = Self.push(messageID: message, eventMillis: Self.nowMillis(),
                                   Self.voided(token: "tok-forged", orderID: "GPA.15-1", refundType: refundType))
            let answer = try Self.send(rig, forged, token: bearer)
            #expect(answer.status == 503, "\(refundType): \(answer.text)")
            #expect(try answer.json()["code"] == "void_not_confirmed")
        }
        #expect(try rig.rows("SELECT status FROM wallet.credits") == [["credited"]])
        #expect(try rig.count("SELECT balance FROM wallet.wallets WHERE user_id = 'droid-15'") == 600)
        #expect(try rig.count("SELECT count(*) FROM wallet.googleplay_notifications") == 0)
        // Google really voids it later: Pub/Sub's retry of the same message is
        // applied, not answered as a duplicate.
        rig.google.addVoided(.init(purchaseToken: "tok-forged", orderId: "GPA.15-1", voidedTimeMillis: Self.nowMillis() - 500))
        #expect(try Self.send(rig, early, token: bearer).status == 204)
        #expect(try rig.rows("SELECT message_id, outcome FROM wallet.googleplay_notifications") == [["m-15a", "refunded"]])
        #expect(try rig.count("SELECT balance FROM wallet.wallets WHERE user_id = 'droid-15'") == 0)
        let metrics = try rig.request("GET", "/metrics", key: nil, body: nil).text
        #expect(metrics.contains(#"wallet_googleplay_notifications_total{outcome="unconfirmed"} 3"#))
        #expect(try rig.violations() == 0)
    }

    /// Google's list can lag behind its push. A whole void of a credited
    /// purchase is confirmed by the purchase itself: canceled.
    @Test func aWholeVoidTheListDoesNotShowYetIsConfirmedByTheCanceledPurchase() throws {
        let (rig, certs) = try Self.rig()
        defer { rig.stop(); certs.stop() }
        rig.google.setPurchase(productID: "guodong600", token: "tok-canceled", .purchased(orderId: "GPA.16-1"))
        #expect(try rig.credit(token: "tok-canceled", userID: "droid-16").status == 201)
        rig.google.setPurchase(productID: "guodong600", token: "tok-canceled", .canceled(orderId: "GPA.16-1"))
        let body = Self.push(messageID: "m-16", eventMillis: Self.nowMillis(),
                             Self.voided(token: "tok-canceled", orderID: "GPA.16-1", refundType: 1))
        #expect(try Self.send(rig, body, token: certs.token()).status == 204)
        #expect(try Self.credits(rig) == [["refunded", "600"]], "\((try? Self.credits(rig)) ?? [])")
        #expect(try rig.rows("SELECT refund_type::text, flow_no, source FROM wallet.googleplay_voids")
            == [["1", "GPA.16-1", "push"]])
        // Canceled is not a partial refund: that takes the list.
        rig.google.setPurchase(productID: "guodong600", token: "tok-part", .purchased(orderId: "GPA.16-2", quantity: 2))
        #expect(try rig.credit(token: "tok-part", userID: "droid-16").status == 201)
        rig.google.setPurchase(productID: "guodong600", token: "tok-part", .canceled(orderId: "GPA.16-2", quantity: 2))
        let partial = Self.push(messageID: "m-16b", eventMillis: Self.nowMillis(),
                                Self.voided(token: "tok-part", orderID: "GPA.16-2", refundType: 2))
        #expect(try Self.send(rig, partial, token: certs.token()).status == 503)
        #expect(try rig.count("SELECT balance FROM wallet.wallets WHERE user_id = 'droid-16'") == 1200)
    }

    /// A credit and a void of one purchase take the same lock, the token's,
    /// whatever orderId the push names: 80 rounds, each a void pushed with
    /// an orderId other than the purchase's, racing credits of the same
    /// token. No purchase may end both credited and voided.
    @Test(.timeLimit(.minutes(5))) func creditsRacingAVoidThatNamesAnotherOrderIDNeverBothCommit() throws {
        let (rig, certs) = try Self.rig()
        defer { rig.stop(); certs.stop() }
        let rounds = 80
        let pushed = Locked<[Int?]>([])
        for round in 0..<rounds {
            let token = "tok-race-\(round)"
            rig.google.setPurchase(productID: "guodong600", token: token, .purchased(orderId: "GPA.13-\(round)"))
            let voidOrderID = "GPA.13-\(round)-other"
            rig.google.addVoided(.init(purchaseToken: token, orderId: voidOrderID, voidedTimeMillis: Self.nowMillis() - 1_000))
            let body = Self.push(messageID: "m-race-\(round)", eventMillis: Self.nowMillis(),
                                 Self.voided(token: token, orderID: voidOrderID, refundType: 1))
            let bearer = certs.token()
            #expect(runOnThreads(5) { index in
                if index == 0 {
                    let status = (try? Self.send(rig, body, token: bearer))?.status
                    pushed.withLock { $0.append(status) }
                } else {
                    _ = try? rig.credit(token: token, userID: "droid-13")
                }
            })
        }
        #expect(pushed.withLock { $0 } == Array(repeating: 204, count: rounds))
        let both = try rig.count("""
            SELECT count(*) FROM wallet.credits c
            WHERE c.purchase_token LIKE 'tok-race-%' AND c.status = 'credited'
              AND EXISTS (SELECT 1 FROM wallet.googleplay_voids g WHERE g.purchase_token = c.purchase_token)
            """)
        #expect(both == 0, "\(both) of \(rounds) purchases ended both credited and voided")
        // Either the credit came first and was refunded, or the void came
        // first and no credit was made: never a credit left standing.
        #expect(try rig.count("SELECT count(*) FROM wallet.googleplay_voids WHERE purchase_token LIKE 'tok-race-%'") == rounds)
        let left = try rig.count("SELECT coalesce(sum(balance), 0) FROM wallet.wallets WHERE user_id = 'droid-13'")
        #expect(left == 0, "\(left) coins of voided purchases left standing")
        #expect(try rig.violations() == 0)
    }

    /// The same race, pinned so it happens every time: the credit has read
    /// the voids (none) and waits for its wallet, which this test holds;
    /// then the void, naming another orderId, is pushed. It must wait for
    /// the credit's purchase-token lock and then refund the credit, not
    /// commit beside it. The test lets the wallet go once the push has
    /// answered or is itself waiting for a lock.
    @Test func aVoidPushedWhileItsCreditWaitsForTheWalletWaitsForTheCredit() throws {
        let (rig, certs) = try Self.rig(["WALLET_LOCK_TIMEOUT_MILLISECONDS": "15000"])
        defer { rig.stop(); certs.stop() }
        try rig.execute("INSERT INTO wallet.wallets (user_id, currency) VALUES ('droid-19', 'coin')")
        let holder = try Connection(options: rig.options)
        defer { holder.close() }
        /// Sessions of this database waiting for a lock.
        func waiting() -> Int {
            (try? rig.count("""
                SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'
                """)) ?? -1
        }
        /// Runs `body` on a thread of its own; the answer, once there.
        func started(_ body: @escaping @Sendable () -> Int?) -> Locked<Int??> {
            let answer = Locked<Int??>(nil)
            Thread { let status = body(); answer.withLock { $0 = .some(status) } }.start()
            return answer
        }
        let rounds = 10
        var both: [String] = []
        for round in 0..<rounds {
            let token = "tok-pin-\(round)"
            rig.google.setPurchase(productID: "guodong600", token: token, .purchased(orderId: "GPA.19-\(round)"))
            rig.google.addVoided(.init(purchaseToken: token, orderId: "GPA.19-\(round)-other",
                                       voidedTimeMillis: Self.nowMillis() - 1_000))
            let body = Self.push(messageID: "m-pin-\(round)", eventMillis: Self.nowMillis(),
                                 Self.voided(token: token, orderID: "GPA.19-\(round)-other", refundType: 1))
            let bearer = certs.token()
            try holder.execute("BEGIN")
            _ = try holder.query("SELECT 1 FROM wallet.wallets WHERE user_id = 'droid-19' FOR UPDATE")
            let credit = started { (try? rig.credit(token: token, userID: "droid-19"))?.status }
            #expect(waitFor(seconds: 30) { waiting() == 1 }, "the credit waits for the wallet")
            let push = started { (try? Self.send(rig, body, token: bearer))?.status }
            #expect(waitFor(seconds: 30) { push.withLock { $0 } != nil || waiting() == 2 })
            try holder.execute("ROLLBACK")
            #expect(waitFor(seconds: 30) { credit.withLock { $0 } != nil && push.withLock { $0 } != nil })
            #expect(credit.withLock { $0 } == .some(201), "round \(round)")
            #expect(push.withLock { $0 } == .some(204), "round \(round)")
            let state = try rig.rows("SELECT status FROM wallet.credits WHERE purchase_token = \(token)")
            if state == [["credited"]] { both.append(token) }
            #expect(state == [["refunded"]], "round \(round): \(state)")
        }
        #expect(both.isEmpty, "\(both.count) of \(rounds) purchases ended both credited and voided")
        #expect(try rig.count("SELECT balance FROM wallet.wallets WHERE user_id = 'droid-19'") == 0)
        #expect(try rig.violations() == 0)
    }

    /// One void the database refuses is logged, counted and skipped: the
    /// others are applied, and the sweep's mark stays at the last void
    /// applied before it, so the next sweep tries it again.
    @Test func theSweepSkipsAVoidTheDatabaseRefusesAndTriesItAgainNextRun() throws {
        let (rig, certs) = try Self.rig()
        defer { rig.stop(); certs.stop() }
        let base = Self.nowMillis() - 600_000
        for index in 1...3 {
            let token = "tok-sweep-\(index)"
            rig.google.setPurchase(productID: "guodong600", token: token, .purchased(orderId: "GPA.17-\(index)"))
            #expect(try rig.credit(token: token, userID: "droid-17-\(index)").status == 201)
            rig.google.addVoided(.init(purchaseToken: token, orderId: "GPA.17-\(index)",
                                       voidedTimeMillis: base + Int64(index) * 60_000))
        }
        // The database refuses the second void, as it would a row its checks do not take.
        try rig.execute("""
            CREATE FUNCTION public.refuse_second_void() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.purchase_token = 'tok-sweep-2' THEN
                    RAISE EXCEPTION 'refused for this test' USING ERRCODE = '23514';
                END IF;
                RETURN NEW;
            END $$
            """)
        try rig.execute("""
            CREATE TRIGGER refuse_second_void BEFORE INSERT ON wallet.googleplay_voids
            FOR EACH ROW EXECUTE FUNCTION public.refuse_second_void()
            """)
        // The scheduled sweep of a second instance (it starts 5 s after start).
        let sweeper = try ServerProcess(binary: CommandLineTests.walletBinary,
                                        environment: rig.environment.merging(["WALLET_GOOGLE_VOIDED_POLL_MINUTES": "60"]) { $1 },
                                        capturingLog: true)
        defer { sweeper.kill() }
        let port = try sweeper.waitForPort()
        var metrics = ""
        #expect(waitFor(seconds: 60) {
            metrics = (try? TestService.request(port: port, "GET", "/metrics", key: nil, json: nil).text) ?? ""
            // The sweep goes on past the failed void: the third comes after it.
            return metrics.contains(#"wallet_googleplay_voids_total{outcome="failed"} 1"#)
                && metrics.contains(#"wallet_googleplay_voids_total{outcome="refunded"} 2"#)
        }, "\(metrics)")
        #expect(sweeper.waitForOutput(containing: "a Google Play void could not be applied", seconds: 10))
        let swept = try rig.rows("SELECT purchase_token, status FROM wallet.credits ORDER BY purchase_token")
        #expect(swept == [["tok-sweep-1", "refunded"], ["tok-sweep-2", "credited"], ["tok-sweep-3", "refunded"]], "\(swept)")
        #expect(waitFor(seconds: 10) { (try? Self.mark(rig)) == base + 60_000 })
        #expect(try Self.mark(rig) == base + 60_000, "the mark stays at the last void applied before the failed one")

        // While the database still refuses it, a run says so and fails.
        let again = try rig.walletCommand(["googleplay", "reconcile"])
        #expect(again.status == 1, "\(again)")
        #expect(again.output.contains("seen=3 applied=0 already=2 refused=0 failed=1"), "\(again)")
        #expect(again.error.contains("could not be applied"), "\(again)")
        #expect(!again.error.contains("tok-sweep-2"), "no purchase token in what is printed")
        #expect(try Self.mark(rig) == base + 60_000)

        // Once it takes it, the next run applies it and moves the mark on.
        try rig.execute("DROP TRIGGER refuse_second_void ON wallet.googleplay_voids")
        let fixed = try rig.walletCommand(["googleplay", "reconcile"])
        #expect(fixed.status == 0, "\(fixed)")
        #expect(fixed.output.contains("seen=3 applied=1 already=2 refused=0 failed=0"), "\(fixed)")
        #expect(try rig.rows("SELECT status FROM wallet.credits WHERE purchase_token = 'tok-sweep-2'") == [["refunded"]])
        #expect(try Self.mark(rig) ?? 0 > Self.nowMillis() - 120_000)
        #expect(try rig.violations() == 0)
    }

    /// What Google lists, the ledger stores; what it cannot store is refused
    /// by the parser, named, and the rest still applied. A partial refund of
    /// more units than a credit takes (a purchase of 15 the wallet refused)
    /// is recorded; a token longer than the ledger holds is refused.
    @Test func theSweepStoresWhatItTakesAndRefusesWhatTheLedgerCannotHold() throws {
        let (rig, certs) = try Self.rig()
        defer { rig.stop(); certs.stop() }
        let base = Self.nowMillis() - 600_000
        rig.google.addVoided(.init(purchaseToken: "tok-fifteen", orderId: "GPA.18-1", voidedTimeMillis: base,
                                   voidedQuantity: 15))
        let longToken = String(repeating: "L", count: 2_000)
        rig.google.addVoided(.init(purchaseToken: longToken, orderId: "GPA.18-2", voidedTimeMillis: base + 60_000))
        rig.google.setPurchase(productID: "guodong600", token: "tok-after", .purchased(orderId: "GPA.18-3", quantity: 3))
        #expect(try rig.credit(token: "tok-after", userID: "droid-18").status == 201)
        // More units voided than the purchase holds: the refund stops at the purchase.
        rig.google.addVoided(.init(purchaseToken: "tok-after", orderId: "GPA.18-3", voidedTimeMillis: base + 120_000,
                                   voidedQuantity: 11))
        let sweep = try rig.walletCommand(["googleplay", "reconcile"])
        #expect(sweep.status == 0, "\(sweep)")
        #expect(sweep.output.contains("seen=3 applied=2 already=0 refused=1 failed=0"), "\(sweep)")
        #expect(sweep.error.contains("purchaseToken is empty, longer than 1024 bytes"), "\(sweep)")
        #expect(!sweep.error.contains("LLLLLLLL"), "no purchase token in what is printed")
        #expect(try rig.rows("""
            SELECT purchase_token, voided_quantity::text FROM wallet.googleplay_voids ORDER BY voided_at
            """) == [["tok-fifteen", "15"], ["tok-after", "11"]])
        #expect(try Self.credits(rig) == [["refunded", "1800"]], "\((try? Self.credits(rig)) ?? [])")
        #expect(try rig.count("SELECT balance FROM wallet.wallets WHERE user_id = 'droid-18'") == 0)
        #expect(try Self.mark(rig) ?? 0 > Self.nowMillis() - 120_000, "a refused entry does not hold the mark")
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
        // A notification the ledger could not keep (jsonb takes no NUL, no
        // unpaired surrogate) is malformed, not a fault of the service.
        for (index, member) in [#""x":"a\u0000b","#, #""x":"\ud800","#].enumerated() {
            let unstorable = Self.push(messageID: "m-nul-\(index)", eventMillis: Self.nowMillis(),
                                       member + #""testNotification":{"version":"1.0"}"#)
            let response = try Self.send(rig, unstorable, token: certs.token())
            #expect(response.status == 400, "\(member): \(response.text)")
            #expect(try response.json()["code"] == "malformed_notification")
        }
        // Another app's notifications are settled and ignored.
        let other = Self.push(messageID: "m-other", package: "com.example.other", eventMillis: Self.nowMillis(),
                              Self.voided(token: "tok-x", orderID: "GPA.x", refundType: 1))
        #expect(try Self.send(rig, other, token: certs.token()).status == 204)
        #expect(try rig.rows("SELECT message_id, kind, outcome FROM wallet.googleplay_notifications") == [
            ["m-bad", "test", "recorded"],
        ])
    }
}
