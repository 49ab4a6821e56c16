import Foundation
import HTTPServer
import JSON
import Locking
import Postgres
import ServiceTestSupport
import Testing
import TestSupport

/// Holds through the real server: placing against what is available,
/// capture, release and expiry, their idempotency, and races among them.
@Suite(.timeLimit(.minutes(3)))
struct HoldTests {
    /// A service whose `user` has `coins` granted.
    static func service(granting coins: Int64, to user: String) throws -> TestService {
        let service = try TestService()
        let connection = try Connection(options: service.database)
        defer { connection.close() }
        try connection.query("SELECT * FROM wallet.grant_coins(\(user), \(coins)::bigint, 'coin', 'setup', 'tests')")
        return service
    }

    static func hold(_ service: TestService, user: String, amount: Int64, key: String, expiresIn: Int? = nil,
                     apiKey: String? = nil) throws -> HTTPTestResponse {
        let expiry = expiresIn.map { #","expires_in_seconds":\#($0)"# } ?? ""
        return try service.request("POST", "/v1/holds", key: apiKey ?? service.gameServerKey,
                                   json: #"{"user_id":"\#(user)","amount":\#(amount),"reason":"match entry"\#(expiry)}"#,
                                   headers: [("Idempotency-Key", key)])
    }

    static func act(_ service: TestService, _ action: String, id: Int64, key: String, json: String? = nil,
                    apiKey: String? = nil) throws -> HTTPTestResponse {
        try service.request("POST", "/v1/holds/\(id)/\(action)", key: apiKey ?? service.gameServerKey, json: json,
                            headers: [("Idempotency-Key", key)])
    }

    static func id(_ response: HTTPTestResponse) throws -> Int64 {
        guard case .number(let digits)? = try response.json()["hold"]?["id"], let id = Int64(digits) else {
            throw HoldTestError.noID(response.text)
        }
        return id
    }

    enum HoldTestError: Error {
        case noID(String)
    }

    static func available(_ service: TestService, _ user: String) throws -> JSONValue? {
        first(try service.request("GET", "/v1/wallets/\(user)", key: service.gameServerKey).json()["balances"])?["available"]
    }

    static func first(_ array: JSONValue?) -> JSONValue? {
        guard case .array(let elements)? = array else { return nil }
        return elements.first
    }

    /// A debit's ledger reference is its idempotency key, and a capture's is
    /// `hold:<id>`: a debit key in that space would make a debit that reads
    /// as a hold's capture.
    @Test func aDebitKeyCannotTakeACapturesReference() throws {
        let service = try Self.service(granting: 1_000, to: "p1")
        defer { service.stop() }
        let id = try Self.id(try Self.hold(service, user: "p1", amount: 100, key: "h-1"))
        #expect(try Self.act(service, "capture", id: id, key: "c-1").status == 201)
        for key in ["hold:\(id)", "hold:\(id + 1)", "hold:", "hold:anything"] {
            let refused = try service.debit(userID: "p1", amount: 5, idempotencyKey: key)
            #expect(refused.status == 400, "\(key): \(refused.text)")
            #expect(try refused.json()["code"] == "idempotency_key_required")
            #expect(try refused.json()["detail"]
                    == "a debit's Idempotency-Key may not begin with hold:, which names the ledger entries of captured holds")
        }
        let sharing = try service.count("SELECT count(*) FROM wallet.entries WHERE reference = 'hold:\(id)'")
        print("entries with reference hold:\(id): \(sharing)")
        #expect(sharing == 1, "only the capture's")
        // Keys that merely look alike are the caller's own, and so are hold keys.
        for key in ["HOLD:\(id)", "hold-\(id)", "my-hold:\(id)"] {
            #expect(try service.debit(userID: "p1", amount: 5, idempotencyKey: key).status == 201, "\(key)")
        }
        #expect(try Self.hold(service, user: "p1", amount: 5, key: "hold:\(id)").status == 201)
        #expect(try service.balance(of: "p1") == 1_000 - 100 - 15)
        #expect(try service.violations() == [])
    }

    @Test func aHoldReservesCoinsThatACaptureDebitsAndTheRestIsReleased() throws {
        let service = try Self.service(granting: 1_000, to: "p1")
        defer { service.stop() }
        let placed = try Self.hold(service, user: "p1", amount: 700, key: "h-1")
        #expect(placed.status == 201, "\(placed.text)")
        let body = try placed.json()
        #expect(body["hold"]?["status"] == "held")
        #expect(body["hold"]?["amount"] == 700)
        #expect(body["hold"]?["reason"] == "match entry")
        #expect(body["balance"]?["balance"] == 1_000)
        #expect(body["balance"]?["held"] == 700)
        #expect(body["balance"]?["available"] == 300)
        let id = try Self.id(placed)

        // Debits and new holds see only what is available.
        let debit = try service.debit(userID: "p1", amount: 301, idempotencyKey: "d-1")
        #expect(debit.status == 409, "\(debit.text)")
        #expect(try debit.json()["available"] == 300)
        #expect(try debit.json()["detail"] == "the available balance is 300, below the amount")
        let second = try Self.hold(service, user: "p1", amount: 301, key: "h-2")
        #expect(second.status == 409)
        #expect(try second.json()["code"] == "insufficient_funds")
        #expect(try second.json()["balance"] == 1_000)
        #expect(try second.json()["available"] == 300)
        #expect(try Self.available(service, "p1") == 300)

        // More than the hold is refused; then 500 of the 700 is captured.
        let tooMuch = try Self.act(service, "capture", id: id, key: "c-0", json: #"{"amount":701}"#)
        #expect(tooMuch.status == 422, "\(tooMuch.text)")
        #expect(try tooMuch.json()["code"] == "amount_exceeds_hold")
        let captured = try Self.act(service, "capture", id: id, key: "c-1", json: #"{"amount":500}"#)
        #expect(captured.status == 201, "\(captured.text)")
        let capture = try captured.json()
        #expect(capture["hold"]?["status"] == "captured")
        #expect(capture["hold"]?["captured_amount"] == 500)
        #expect(capture["debit"]?["amount"] == 500)
        #expect(capture["balance"]?["balance"] == 500)
        #expect(capture["balance"]?["held"] == 0)
        #expect(capture["balance"]?["available"] == 500)
        #expect(try service.count("SELECT count(*) FROM wallet.entries WHERE kind = 'debit' AND reference = 'hold:\(id)' AND amount = -500") == 1)

        // Once only: a second capture and a release are 409.
        let again = try Self.act(service, "capture", id: id, key: "c-2")
        #expect(again.status == 409)
        #expect(try again.json()["code"] == "hold_not_active")
        #expect(try again.json()["hold_status"] == "captured")
        let release = try Self.act(service, "release", id: id, key: "r-1")
        #expect(release.status == 409)
        #expect(try release.json()["code"] == "hold_not_active")

        let lookup = try service.request("GET", "/v1/holds/\(id)", key: service.gameServerKey)
        #expect(lookup.status == 200, "\(lookup.text)")
        #expect(try lookup.json()["hold"]?["status"] == "captured")
        #expect(try service.violations() == [])
    }

    @Test func answersReplayUnderTheirKeysAndHoldsBelongToTheirClient() throws {
        let service = try Self.service(granting: 100, to: "p2")
        defer { service.stop() }
        let first = try Self.hold(service, user: "p2", amount: 40, key: "same")
        let replay = try Self.hold(service, user: "p2", amount: 40, key: "same")
        #expect(first.status == 201)
        #expect(replay.status == 201)
        #expect(replay.header("Idempotent-Replayed") == "true")
        #expect(replay.body == first.body)
        #expect(try service.count("SELECT count(*) FROM wallet.holds") == 1)
        let reused = try Self.hold(service, user: "p2", amount: 41, key: "same")
        #expect(reused.status == 422)
        #expect(try reused.json()["code"] == "idempotency_key_reused")
        // A refusal is sticky too.
        let refused = try Self.hold(service, user: "p2", amount: 61, key: "big")
        let refusedAgain = try Self.hold(service, user: "p2", amount: 61, key: "big")
        #expect(refused.status == 409)
        #expect(refusedAgain.status == 409)
        #expect(refusedAgain.header("Idempotent-Replayed") == "true")
        #expect(try refusedAgain.json()["instance"] == (try refused.json()["instance"]))

        let id = try Self.id(first)
        // Another client sees nothing; an admin key may act.
        let stranger = try service.request("GET", "/v1/holds/\(id)", key: service.appBackendKey)
        #expect(stranger.status == 404)
        #expect(try stranger.json()["code"] == "not_found")
        let otherClient = try Self.act(service, "release", id: id, key: "x", apiKey: service.adminKey)
        #expect(otherClient.status == 200, "\(otherClient.text)")
        #expect(try otherClient.json()["hold"]?["status"] == "released")
        #expect(try otherClient.json()["balance"]?["available"] == 100)
        let releasedReplay = try Self.act(service, "release", id: id, key: "x", apiKey: service.adminKey)
        #expect(releasedReplay.body == otherClient.body)
        #expect(try service.count("SELECT count(*) FROM wallet.entries WHERE kind = 'debit'") == 0)
        #expect(try service.request("GET", "/v1/holds/999999", key: service.gameServerKey).status == 404)
        #expect(try service.request("GET", "/v1/holds/abc", key: service.gameServerKey).status == 404)
        #expect(try service.violations() == [])
    }

    /// A placement's answer is stored as values and rebuilt for a replay:
    /// after the hold is captured (or released), a retry of the placement
    /// still answers the bytes it first answered, a hold that is held.
    @Test func aPlacementReplaysAsFirstAnsweredAfterItsHoldIsSettled() throws {
        let service = try Self.service(granting: 1_000, to: "p3")
        defer { service.stop() }
        for (index, action) in ["capture", "release"].enumerated() {
            let body = #"{"user_id":"p3","amount":200,"reason":"match","metadata":{"seat":[1,2.50],"team":"blue"}}"#
            let placed = try service.request("POST", "/v1/holds", key: service.gameServerKey, json: body,
                                             headers: [("Idempotency-Key", "place-\(index)")])
            #expect(placed.status == 201, "\(placed.text)")
            #expect(try placed.json()["hold"]?["metadata"]?["team"] == "blue")
            let id = try Self.id(placed)
            let settled = try Self.act(service, action, id: id, key: "\(action)-\(index)")
            #expect([200, 201].contains(settled.status), "\(settled.text)")
            let replay = try service.request("POST", "/v1/holds", key: service.gameServerKey, json: body,
                                             headers: [("Idempotency-Key", "place-\(index)")])
            #expect(replay.status == 201)
            #expect(replay.header("Idempotent-Replayed") == "true")
            #expect(replay.text == placed.text)
            let settledAgain = try Self.act(service, action, id: id, key: "\(action)-\(index)")
            #expect(settledAgain.text == settled.text)
            #expect(settledAgain.status == settled.status)
            let lookup = try service.request("GET", "/v1/holds/\(id)", key: service.gameServerKey)
            #expect(try lookup.json()["hold"]?["status"] == (action == "capture" ? "captured" : "released"))
            #expect(try lookup.json()["hold"] == (try settled.json()["hold"]))
        }
        #expect(try service.violations() == [])
    }

    @Test func sixtyFourThreadsHoldSevenOfAThousandAndExactly142Succeed() throws {
        let service = try Self.service(granting: 1_000, to: "crowd")
        defer { service.stop() }
        let statuses = Locked<[Int]>([])
        let negative = Locked(false)
        // Each thread places holds of 7 until it is refused: 1,000 / 7 is 142.
        #expect(runOnThreads(64) { index in
            for attempt in 0..<50 {
                let status = (try? Self.hold(service, user: "crowd", amount: 7, key: "k-\(index)-\(attempt)").status) ?? 0
                statuses.withLock { $0.append(status) }
                // Nothing ever shows less than nothing available.
                if case .number(let digits)? = try? Self.available(service, "crowd"), (Int64(digits) ?? 0) < 0 {
                    negative.withLock { $0 = true }
                }
                if status != 201 { break }
            }
        })
        let seen = statuses.withLock { $0 }
        #expect(seen.filter { $0 == 201 }.count == 142, "\(seen.sorted())")
        #expect(seen.filter { $0 == 409 }.count == 64, "\(seen.sorted())")
        #expect(seen.count == 142 + 64)
        #expect(!negative.withLock { $0 })
        #expect(try Self.available(service, "crowd") == 6)
        #expect(try service.count("SELECT held FROM wallet.wallets WHERE user_id = 'crowd'") == 994)
        #expect(try service.violations() == [])
    }

    @Test func captureReleaseAndExpiryRaceAndExactlyOneWins() throws {
        let service = try Self.service(granting: 10_000, to: "racer")
        defer { service.stop() }
        for round in 0..<6 {
            let placed = try Self.hold(service, user: "racer", amount: 100, key: "h-\(round)", expiresIn: 1)
            let id = try Self.id(placed)
            // Expiring a second after placing, while capture and release race:
            // the sleep is the race's timing, not synchronisation. PostgreSQL's
            // clock decides expiry, so no clock of the service can stand in.
            Thread.sleep(forTimeInterval: 0.9 + Double(round) * 0.04)
            let statuses = Locked<[String: Int]>([:])
            #expect(runOnThreads(8) { index in
                let action = index % 2 == 0 ? "capture" : "release"
                let status = (try? Self.act(service, action, id: id, key: "\(action)-\(round)-\(index)").status) ?? 0
                statuses.withLock { $0["\(action)-\(index)"] = status }
            })
            let seen = statuses.withLock { $0 }
            let wins = seen.values.filter { $0 == 200 || $0 == 201 }.count
            #expect(wins <= 1, "\(seen)")
            #expect(seen.values.allSatisfy { [200, 201, 409].contains($0) }, "\(seen)")
            // Whoever won, the hold's coins went one way only.
            let rows = try service.count("""
                SELECT count(*) FROM wallet.holds h WHERE h.id = \(id) AND (
                    (h.status = 'captured' AND h.captured_amount = 100)
                    OR (h.status IN ('released', 'expired') AND h.captured_amount IS NULL)
                    OR (h.status = 'held' AND h.expires_at <= now()))
                """)
            #expect(rows == 1)
            if wins == 0 {
                // Expiry won: the hold reads as expired, and capture is refused.
                let lookup = try service.request("GET", "/v1/holds/\(id)", key: service.gameServerKey)
                #expect(try lookup.json()["hold"]?["status"] == "expired")
            }
        }
        let captured = try service.count("SELECT coalesce(sum(captured_amount), 0) FROM wallet.holds")
        let debited = try service.count("SELECT coalesce(-sum(amount), 0) FROM wallet.entries WHERE kind = 'debit'")
        #expect(captured == debited)
        #expect(try service.violations() == [])
    }

    @Test func concurrentCapturesOfOneHoldWithDifferentKeysCaptureOnce() throws {
        let service = try Self.service(granting: 500, to: "cc")
        defer { service.stop() }
        let id = try Self.id(try Self.hold(service, user: "cc", amount: 300, key: "h"))
        let statuses = Locked<[Int]>([])
        #expect(runOnThreads(16) { index in
            let response = try? Self.act(service, "capture", id: id, key: "cap-\(index)")
            let code = (try? response?.json()["code"]).flatMap { $0 }
            statuses.withLock { $0.append(response?.status == 409 && code == "hold_not_active" ? 409 : response?.status ?? 0) }
        })
        let seen = statuses.withLock { $0 }
        #expect(seen.filter { $0 == 201 }.count == 1, "\(seen)")
        #expect(seen.filter { $0 == 409 }.count == 15, "\(seen)")
        #expect(try service.balance(of: "cc") == 200)
        #expect(try service.violations() == [])
    }

    @Test func anExpiredHoldFreesItsCoinsWithoutACallAndCannotBeCaptured() throws {
        let service = try Self.service(granting: 50, to: "late")
        defer { service.stop() }
        let id = try Self.id(try Self.hold(service, user: "late", amount: 50, key: "h", expiresIn: 1))
        #expect(try Self.available(service, "late") == 0)
        #expect(waitFor(seconds: 10) { (try? Self.available(service, "late")) == 50 })
        let capture = try Self.act(service, "capture", id: id, key: "c")
        #expect(capture.status == 409, "\(capture.text)")
        #expect(try capture.json()["hold_status"] == "expired")
        #expect(try service.debit(userID: "late", amount: 50, idempotencyKey: "d").status == 201)
        #expect(try service.violations() == [])
    }

    @Test func aWalletAnOperatorHoldsOpenIsBusyNotStuck() throws {
        let service = try Self.service(granting: 100, to: "locked")
        defer { service.stop() }
        let blocker = try Connection(options: service.database)
        defer { blocker.close() }
        try blocker.execute("BEGIN")
        try blocker.execute("SELECT balance FROM wallet.wallets WHERE user_id = 'locked' FOR UPDATE")
        let busy = try Self.hold(service, user: "locked", amount: 10, key: "h")
        #expect(busy.status == 503, "\(busy.text)")
        #expect(try busy.json()["code"] == "wallet_busy")
        try blocker.execute("ROLLBACK")
        // Nothing was stored under the key: the retry holds.
        let retried = try Self.hold(service, user: "locked", amount: 10, key: "h")
        #expect(retried.status == 201, "\(retried.text)")
        #expect(retried.header("Idempotent-Replayed") == nil)
        #expect(try service.violations() == [])
    }

    @Test func aCaptureNeverTakesTheBalanceBelowZero() throws {
        let service = try TestService()
        defer { service.stop() }
        #expect(try service.credit(userID: "refunded", flowNo: "h-flow-1").status == 201)
        let id = try Self.id(try Self.hold(service, user: "refunded", amount: 600, key: "h"))
        // A refund takes the balance below what is held.
        let connection = try Connection(options: service.database)
        defer { connection.close() }
        try connection.query("SELECT * FROM wallet.refund_credit('h-flow-1', 'chargeback', 'alice')")
        #expect(try Self.available(service, "refunded") == -600)
        let capture = try Self.act(service, "capture", id: id, key: "c")
        #expect(capture.status == 409)
        #expect(try capture.json()["code"] == "insufficient_funds")
        let lookup = try service.request("GET", "/v1/holds/\(id)", key: service.gameServerKey)
        #expect(try lookup.json()["hold"]?["status"] == "held")
        #expect(try Self.act(service, "release", id: id, key: "r").status == 200)
        #expect(try service.violations() == [])
    }
}
