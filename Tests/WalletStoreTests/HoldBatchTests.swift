import Foundation
import Postgres
import Synchronization
import Testing
import TestSupport
import WalletCore
@testable import WalletStore

/// wallet.hold_many decides a whole batch at once. Its answers are what the
/// same requests get applied one call each, in batch order, and what it
/// writes is what those calls write.
@Suite(.timeLimit(.minutes(2)))
struct HoldBatchTests {
    typealias Request = LedgerStore.HoldRequest

    static func request(_ key: String, _ operation: LedgerStore.HoldOperation, hash: UInt8 = 1,
                        client: String = "game") -> Request {
        Request(client: client, anyClient: false, key: IdempotencyKey(key)!, requestHash: [hash],
                requestID: "req-\(key)-\(hash)", operation: operation)
    }

    static func place(_ key: String, _ amount: Int64, currency: String = "coin", hash: UInt8 = 1) -> Request {
        request(key, .place(user: UserID("ann")!, currency: Currency(currency)!, amount: Amount(amount)!,
                            reason: "match", metadata: #"{"round": 1}"#, expiresInSeconds: 600), hash: hash)
    }

    static func capture(_ key: String, _ hold: Int64, _ amount: Int64?, hash: UInt8 = 1) -> Request {
        request(key, .capture(holdID: hold, amount: amount.map { Amount($0)! }), hash: hash)
    }

    static func release(_ key: String, _ hold: Int64, client: String = "game") -> Request {
        request(key, .release(holdID: hold), client: client)
    }

    /// A database where ann has 100 coins and two holds, of 30 and 20, and
    /// the ids of those holds.
    static func seeded() throws -> (Connection, [Int64]) {
        let connection = try Connection(options: try TestDatabase.make())
        try connection.query("SELECT * FROM wallet.grant_coins('ann', 100, 'coin', 'setup', 'tests')")
        let placed = try LedgerStore.holds([place("h-1", 30), place("h-2", 20)], on: connection)
        return (connection, placed.map { $0.hold!.id })
    }

    /// One of everything, in one batch: duplicates of a key, a hold settled
    /// twice, a refusal, a release freeing coins for nothing later, a hold
    /// of another client, an unknown hold and currency.
    static func batch(_ holds: [Int64]) -> [Request] {
        [place("p-1", 10), place("p-1", 10), place("p-1", 10, hash: 2),
         capture("c-1", holds[0], 25), release("r-1", holds[0]),
         capture("c-2", holds[1], 30), release("r-2", holds[1]), capture("c-2", holds[1], 30),
         place("p-2", 66), place("p-3", 65),
         capture("c-3", 999_999, nil), release("r-3", holds[1], client: "other"),
         place("p-4", 5, currency: "gem")]
    }

    /// What an answer shows, times aside (each transaction has its own now()).
    static func shown(_ result: LedgerStore.HoldResult) -> String {
        let hold = result.hold.map { hold in
            "\(hold.id) \(hold.status) \(hold.amount) \(hold.capturedAmount ?? 0) \(hold.entryID ?? 0) \(hold.metadataJSON ?? "-")"
        }
        return "\(result.outcome.rawValue) replayed=\(result.replayed) \(result.requestID ?? "-") hold=\(hold ?? "-") "
            + "balance=\(result.balance ?? -1) held=\(result.held ?? -1)"
    }

    /// The rows the batch leaves, times aside.
    static func written(_ connection: Connection) throws -> [String] {
        try connection.query("""
            SELECT format('wallet %s %s %s', user_id, balance, held) FROM wallet.wallets
            UNION ALL SELECT * FROM (SELECT format('hold %s %s %s %s %s %s', id, status, amount, captured_amount, entry_id,
                                                   release_reason) FROM wallet.holds ORDER BY id) h
            UNION ALL SELECT * FROM (SELECT format('entry %s %s %s %s %s %s', id, kind, amount, balance_after, reference,
                                                   metadata) FROM wallet.entries ORDER BY id) e
            UNION ALL SELECT * FROM (SELECT format('key %s %s %s %s %s %s %s %s', client, key, outcome, request_id,
                                                   entry_id, amount, balance, held) FROM wallet.idempotency_keys
                                     ORDER BY client, key) k
            """).map { try $0.decode(String.self, at: 0) }
    }

    @Test func aBatchAnswersAndWritesAsItsRequestsOneAtATime() throws {
        let (together, holds) = try Self.seeded()
        defer { together.close() }
        let (apart, sameHolds) = try Self.seeded()
        defer { apart.close() }
        #expect(holds == sameHolds)

        let batch = Self.batch(holds)
        let answers = try LedgerStore.holds(batch, on: together).map(Self.shown)
        let oneByOne = try batch.flatMap { try LedgerStore.holds([$0], on: apart) }.map(Self.shown)
        #expect(answers == oneByOne)
        #expect(try Self.written(together) == Self.written(apart))
        #expect(try LedgerStore.checkInvariants(on: together) == [])

        // The answers themselves, beyond agreeing.
        let outcomes = answers.map { $0.prefix { $0 != " " } }
        #expect(outcomes == ["held", "held", "idempotency_key_reused", "captured", "hold_not_active",
                             "amount_exceeds_hold", "released", "amount_exceeds_hold", "insufficient_funds", "held",
                             "not_found", "not_found", "unknown_currency"])
        #expect(answers[1].contains("replayed=true"))
        #expect(answers[3].hasSuffix("balance=75 held=30"))
        #expect(answers[9].hasSuffix("balance=75 held=75"))
        let wallet = try together.query("SELECT balance, held FROM wallet.wallets WHERE user_id = 'ann'")[0]
        #expect(try wallet.decode(Int64.self, at: 0) == 75)
        #expect(try wallet.decode(Int64.self, at: 1) == 75)

        // Sent again, every stored answer replays as it was given, its hold
        // as it is now (the refused capture's hold was released after it);
        // the rest are decided again.
        let again = try LedgerStore.holds(batch, on: together)
        for (index, (first, second)) in zip(answers, again.map(Self.shown)).enumerated() {
            switch index {
            case 2, 10, 11, 12: #expect(second == first)
            case 5:
                #expect(second == first.replacingOccurrences(of: "replayed=false", with: "replayed=true")
                    .replacingOccurrences(of: " held 20 ", with: " released 20 "))
            default: #expect(second == first.replacingOccurrences(of: "replayed=false", with: "replayed=true"))
            }
        }
        #expect(try Self.written(together) == Self.written(apart))
    }

    /// Holds past their time stop counting for every wallet of a batch, in
    /// one statement: an expired hold cannot be captured, and the coins it
    /// kept are available to the rest of the batch.
    @Test func aBatchExpiresTheDueHoldsOfAllItsWallets() throws {
        func seeded() throws -> (Connection, [Int64]) {
            let connection = try Connection(options: try TestDatabase.make())
            for user in ["ann", "bob"] {
                try connection.query(PostgresQuery(
                    unsafeSQL: "SELECT * FROM wallet.grant_coins('\(user)', 100, 'coin', 'setup', 'tests')"))
            }
            let placed = try LedgerStore.holds([("ann", 30, 1), ("ann", 20, 600), ("bob", 40, 1)].map { user, amount, seconds in
                Self.request("h-\(user)-\(amount)", .place(user: UserID(user)!, currency: Currency("coin")!,
                                                          amount: Amount(amount)!, reason: nil, metadata: nil,
                                                          expiresInSeconds: seconds))
            }, on: connection)
            return (connection, placed.map { $0.hold!.id })
        }
        let (together, holds) = try seeded()
        defer { together.close() }
        let (apart, _) = try seeded()
        defer { apart.close() }
        // Until the database's clock passes both short holds' time (a second).
        let due = "SELECT clock_timestamp() > max(expires_at) FROM wallet.holds WHERE amount IN (30, 40)"
        for connection in [together, apart] {
            #expect(waitFor(seconds: 10) { (try? connection.query(PostgresQuery(unsafeSQL: due))[0].decode(Bool.self, at: 0)) == true })
        }
        let batch = [Self.capture("c-1", holds[0], nil), Self.release("r-1", holds[1]),
                     Self.request("p-1", .place(user: UserID("bob")!, currency: Currency("coin")!, amount: Amount(100)!,
                                                reason: nil, metadata: nil, expiresInSeconds: 600))]
        let answers = try LedgerStore.holds(batch, on: together)
        #expect(answers.map(\.outcome) == [.holdNotActive, .released, .held])
        #expect(answers[0].hold?.status == .expired)
        #expect(answers.map(\.held) == [20, 0, 100])
        let oneByOne = try batch.flatMap { try LedgerStore.holds([$0], on: apart) }
        #expect(answers.map(Self.shown) == oneByOne.map(Self.shown))
        #expect(try together.query("SELECT status FROM wallet.holds ORDER BY id").map { try $0.decode(String.self, at: 0) }
                == ["expired", "released", "expired", "held"])
        #expect(try LedgerStore.checkInvariants(on: together) == [])
    }

    /// Two batches that each settle the other's holds, from two connections
    /// at once, many times: each takes its wallets in key order, so neither
    /// waits on the other forever, and every hold is settled once.
    @Test func crossedBatchesSettleEachHoldOnce() throws {
        let options = try TestDatabase.make()
        let setup = try Connection(options: options)
        defer { setup.close() }
        for user in ["ann", "bob"] {
            try setup.query(PostgresQuery(unsafeSQL: "SELECT * FROM wallet.grant_coins('\(user)', 1000, 'coin', 'setup', 'tests')"))
        }
        let rounds = 40
        var holds: [[Int64]] = []
        for round in 0..<rounds {
            let placed = try LedgerStore.holds(["ann", "bob"].map { user in
                Self.request("place-\(user)-\(round)", .place(user: UserID(user)!, currency: Currency("coin")!,
                                                              amount: Amount(3)!, reason: nil, metadata: nil,
                                                              expiresInSeconds: 600))
            }, on: setup)
            holds.append(placed.map { $0.hold!.id })
        }
        let settled = holds
        let outcomes = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 2) { side in
            guard let connection = try? Connection(options: options) else { return }
            defer { connection.close() }
            for round in 0..<rounds {
                // Side 0 captures ann's then bob's; side 1 the other way round.
                let order = side == 0 ? settled[round] : settled[round].reversed()
                let batch = order.enumerated().map { place, hold in
                    Self.capture("s\(side)-\(round)-\(place)", hold, 1)
                }
                let answers = (try? LedgerStore.holds(batch, on: connection)) ?? []
                outcomes.withLock { $0 += answers.map(\.outcome.rawValue) }
            }
        }
        let all = outcomes.withLock { $0 }
        #expect(all.count == 2 * 2 * rounds)
        #expect(all.filter { $0 == "captured" }.count == 2 * rounds)
        #expect(all.filter { $0 == "hold_not_active" }.count == 2 * rounds)
        #expect(try setup.query("SELECT count(*) FROM wallet.entries WHERE kind = 'debit'")[0].decode(Int.self, at: 0)
                == 2 * rounds)
        #expect(try LedgerStore.checkInvariants(on: setup) == [])
    }
}
