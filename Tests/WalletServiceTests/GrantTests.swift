import Dispatch
import Foundation
import JSON
import Postgres
import ServiceTestSupport
import Synchronization
import Testing
import TestSupport
import WalletService

/// `POST /v1/grants` through the real server: the game server's rewards,
/// under an idempotency key with a debit's rules, limited per call, and
/// never of a currency only purchases make.
@Suite(.timeLimit(.minutes(3)))
struct GrantTests {
    @Test func aGrantAnswersItsEntryAndTheBalanceAndReplaysOnce() throws {
        let service = try TestService()
        defer { service.stop() }
        let first = try service.grant(userID: "ana", amount: 250, idempotencyKey: "daily-1", expiresInDays: 7)
        #expect(first.status == 201, "\(first.text)")
        #expect(first.header("Idempotent-Replayed") == nil)
        let body = try first.json()
        #expect(body["grant"]?["amount"] == 250)
        #expect(body["grant"]?["currency"] == "coin")
        #expect(body["grant"]?["reason"] == "daily reward")
        #expect(body["balance"]?["balance"] == 250)
        #expect(body["balance"]?["available"] == 250)
        guard case .string(let expiresAt)? = body["grant"]?["expires_at"],
              let when = Date(rfc3339Text: expiresAt) else {
            Issue.record("no expires_at in \(first.text)")
            return
        }
        let days = when.timeIntervalSinceNow / 86_400
        #expect(days > 6.9 && days <= 7, "\(expiresAt)")

        // The same request again: the first answer, byte for byte, and no second entry.
        let again = try service.grant(userID: "ana", amount: 250, idempotencyKey: "daily-1", expiresInDays: 7)
        #expect(again.status == 201)
        #expect(again.header("Idempotent-Replayed") == "true")
        #expect(again.body == first.body)
        #expect(try service.balance(of: "ana") == 250)

        // Another request under the key is refused, and changes nothing.
        let other = try service.grant(userID: "ana", amount: 999, idempotencyKey: "daily-1", expiresInDays: 7)
        #expect(other.status == 422)
        #expect(try other.json()["code"] == "idempotency_key_reused")
        let lots = try service.count("""
            SELECT count(*) FROM wallet.lots WHERE user_id = 'ana' AND source = 'reward' AND expires_at IS NOT NULL
            """)
        #expect(lots == 1)
        #expect(try service.count("SELECT count(*) FROM wallet.events WHERE type = 'grant.created'") == 1)
        #expect(try service.violations() == [])
    }

    @Test func aGrantRepaysDebtFirst() throws {
        let service = try TestService()
        defer { service.stop() }
        #expect(try service.credit(userID: "ben", flowNo: "b-1").status == 201)
        #expect(try service.debit(userID: "ben", amount: 500, idempotencyKey: "armor").status == 201)
        try Connection(options: service.database).query("SELECT * FROM wallet.refund_credit('b-1', 'chargeback', 'ops')")
        #expect(try service.balance(of: "ben") == -500)
        let grant = try service.grant(userID: "ben", amount: 800, idempotencyKey: "apology")
        #expect(grant.status == 201, "\(grant.text)")
        #expect(try grant.json()["balance"]?["balance"] == 300)
        #expect(try service.count("SELECT sum(remaining) FROM wallet.lots WHERE user_id = 'ben'") == 300)
        #expect(try service.violations() == [])
    }

    @Test func refusalsNameTheirRuleAndWriteNothing() throws {
        let service = try TestService { $0.grantAmountMax = 1_000 }
        defer { service.stop() }
        let connection = try Connection(options: service.database)
        try connection.query("SELECT * FROM wallet.upsert_currency('gem', 'Gems', p_paid => TRUE)")
        try connection.query("SELECT * FROM wallet.upsert_currency('gold', 'Gold')")

        func refused(_ response: HTTPTestResponse, _ status: Int, _ code: String) throws {
            #expect(response.status == status, "\(response.text)")
            #expect(response.header("Content-Type") == "application/problem+json")
            #expect(try response.json()["code"] == .string(code), "\(response.text)")
        }
        try refused(try service.grant(userID: "cat", amount: 10, idempotencyKey: "g1", currency: "gem"),
                    422, "paid_currency_not_grantable")
        try refused(try service.grant(userID: "cat", amount: 10, idempotencyKey: "g2", currency: "silver"),
                    422, "unknown_currency")
        let tooMuch = try service.grant(userID: "cat", amount: 1_001, idempotencyKey: "g3", currency: "gold")
        try refused(tooMuch, 422, "grant_limit_exceeded")
        #expect(try tooMuch.json()["max_amount"] == 1_000)
        // Scope: the debit key may not grant.
        try refused(try service.grant(userID: "cat", amount: 10, idempotencyKey: "g4", key: service.gameServerKey),
                    403, "forbidden")
        // No key.
        try refused(try service.request("POST", "/v1/grants", key: service.rewardsKey,
                                        json: #"{"user_id":"cat","amount":10,"reason":"x"}"#),
                    400, "idempotency_key_required")
        for body in [#"{"user_id":"cat","amount":10}"#, #"{"user_id":"cat","amount":10,"reason":"  "}"#,
                     #"{"user_id":"cat","amount":0,"reason":"x"}"#,
                     #"{"user_id":"cat","amount":10,"reason":"x","expires_in_days":0}"#,
                     #"{"user_id":"cat","amount":10,"reason":"x","expires_in_days":3651}"#,
                     #"{"user_id":"cat","amount":10,"reason":"x","paid":true}"#] {
            try refused(try service.request("POST", "/v1/grants", key: service.rewardsKey, json: body,
                                            headers: [("Idempotency-Key", "g5")]),
                        422, "validation_failed")
        }
        // The refusals stored nothing: the key is still free.
        #expect(try service.grant(userID: "cat", amount: 1_000, idempotencyKey: "g1", currency: "gold").status == 201)
        #expect(try service.count("SELECT count(*) FROM wallet.entries") == 1)
        #expect(try service.count("SELECT count(*) FROM wallet.idempotency_keys") == 1)
        // An admin flips a currency to paid: grants of it stop.
        try connection.query("SELECT * FROM wallet.upsert_currency('gold', 'Gold', p_paid => TRUE)")
        try refused(try service.grant(userID: "cat", amount: 10, idempotencyKey: "g6", currency: "gold"),
                    422, "paid_currency_not_grantable")
        #expect(try service.violations() == [])
    }

    /// 32 threads send the same grant, 32 more each their own key for one
    /// wallet, and 16 more debit it meanwhile, so the writer's batches mix
    /// grants and debits: one entry for the shared key, one per other key
    /// and debit, and every answer for the shared key names the same entry.
    @Test func concurrentGrantsApplyEachKeyOnce() throws {
        let service = try TestService()
        defer { service.stop() }
        #expect(try service.credit(userID: "dan", flowNo: "dan-1", productID: "guodong1200").status == 201)
        let entries = Mutex<Set<String>>([])
        let failures = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 80) { index in
            do {
                if index >= 64 {
                    let debit = try service.debit(userID: "dan", amount: 5, idempotencyKey: "spend-\(index)")
                    if debit.status != 201 { failures.withLock { $0.append("debit \(debit.status) \(debit.text)") } }
                    return
                }
                let shared = index % 2 == 0
                let response = try service.grant(userID: "dan", amount: 10,
                                                 idempotencyKey: shared ? "shared" : "own-\(index)")
                // A lost race on the key row answers 503 wallet_busy: a retry replays.
                var final = response
                for _ in 0..<20 where final.status == 503 {
                    final = try service.grant(userID: "dan", amount: 10,
                                              idempotencyKey: shared ? "shared" : "own-\(index)")
                }
                guard final.status == 201 else {
                    failures.withLock { $0.append("\(final.status) \(final.text)") }
                    return
                }
                if shared, case .number(let id)? = try final.json()["grant"]?["entry_id"] {
                    entries.withLock { _ = $0.insert(id) }
                }
            } catch {
                failures.withLock { $0.append("\(error)") }
            }
        }
        #expect(failures.withLock { $0 } == [])
        #expect(entries.withLock { $0.count } == 1)
        #expect(try service.count("SELECT count(*) FROM wallet.entries WHERE user_id = 'dan'") == 1 + 33 + 16)
        #expect(try service.balance(of: "dan") == 1_200 + 330 - 16 * 5)
        #expect(try service.violations() == [])
    }
}
