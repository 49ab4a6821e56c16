import Foundation
import Postgres
import Synchronization
import Testing
import TestSupport
@testable import WalletCore
@testable import WalletStore

/// Lots (Migrations/0026_lots.sql): every increase makes a lot or refills
/// one, every decrease takes from lots in spending order, and what no lot
/// covers is debt. Each test ends with wallet.check_invariants() clean.
@Suite(.timeLimit(.minutes(3)))
struct LotTests {
    static func credit(_ flowNo: String, _ user: String = "ann", _ product: String = "guodong5000")
        -> LedgerStore.CreditOperation {
        LedgerStore.CreditOperation(client: "app", flowNo: FlowNumber(flowNo)!, userID: UserID(user)!,
                                    productID: ProductID(product)!, quantity: Quantity(1)!, claimedAmount: nil,
                                    source: .caller, environment: nil)
    }

    static func debit(_ key: String, _ amount: Int64, _ user: String = "ann") -> LedgerStore.DebitOperation {
        LedgerStore.DebitOperation(client: "game", key: IdempotencyKey(key)!, requestHash: [1], userID: UserID(user)!,
                                   currency: .coin, amount: Amount(amount)!, reason: nil, metadata: nil,
                                   requestID: "r-\(key)")
    }

    /// The wallet's lots, in id order: "source paid amount remaining".
    static func lots(_ connection: Connection, _ user: String = "ann") throws -> [String] {
        try connection.query("""
            SELECT source || ' ' || paid || ' ' || amount || ' ' || remaining FROM wallet.lots
            WHERE user_id = \(user) ORDER BY id
            """).map { $0[0] ?? "-" }
    }

    /// What an entry took from or gave to each lot: "lot-index:amount",
    /// the lot index counted in the wallet's lots by id from 1.
    static func moves(_ connection: Connection, entry: Int64, _ user: String = "ann") throws -> [String] {
        try connection.query("""
            SELECT l.n || ':' || t.amount
            FROM wallet.entry_lots t
            JOIN (SELECT id, row_number() OVER (ORDER BY id) AS n FROM wallet.lots WHERE user_id = \(user)) l
              ON l.id = t.lot_id
            WHERE t.entry_id = \(entry) ORDER BY l.n
            """).map { $0[0] ?? "-" }
    }

    static func entryID(_ connection: Connection, _ sql: String) throws -> Int64 {
        try connection.query(PostgresQuery(unsafeSQL: "SELECT entry_id FROM \(sql)"))[0].decode(Int64.self, at: 0)
    }

    static func balance(_ connection: Connection, _ user: String = "ann") throws -> Int64 {
        try connection.query("SELECT balance FROM wallet.wallets WHERE user_id = \(user)")[0].decode(Int64.self, at: 0)
    }

    /// The issue's bundle, without its bonus: 5,000 paid coins and 500
    /// free ones. Spending 600 takes the free 500 first, then 100 paid; a
    /// refund takes its own purchase's 4,900 and leaves a debt of 100; the
    /// next grant of 300 repays it and keeps 200.
    @Test func spendingTakesFreeCoinsFirstAndARefundItsOwnPurchaseThenDebt() throws {
        let connection = try Connection(options: try TestDatabase.make())
        _ = try LedgerStore.credit([Self.credit("f-1")], on: connection)
        try connection.query("SELECT * FROM wallet.grant_coins('ann', 500, 'coin', 'event prize', 'ops')")
        #expect(try Self.lots(connection) == ["purchase true 5000 5000", "grant false 500 500"])

        let spent = try LedgerStore.debit([Self.debit("sword", 600)], on: connection)
        #expect(try Self.moves(connection, entry: try #require(spent[0].entryID)) == ["1:-100", "2:-500"])
        #expect(try Self.lots(connection) == ["purchase true 5000 4900", "grant false 500 0"])

        let refund = try Self.entryID(connection, "wallet.refund_credit('f-1', 'chargeback', 'ops')")
        #expect(try Self.moves(connection, entry: refund) == ["1:-4900"])
        #expect(try Self.balance(connection) == -100)
        #expect(try Self.lots(connection) == ["purchase true 5000 0", "grant false 500 0"])

        let grant = try Self.entryID(connection, "wallet.grant_coins('ann', 300, 'coin', 'apology', 'ops')")
        #expect(try Self.moves(connection, entry: grant) == ["3:200"])
        #expect(try Self.balance(connection) == 200)
        #expect(try Self.lots(connection) == ["purchase true 5000 0", "grant false 500 0", "grant false 200 200"])
        #expect(try LedgerStore.checkInvariants(on: connection) == [])
    }

    /// WALLET_SPEND_PAID_FIRST flips the second key of the order: paid
    /// coins go before free ones (expiry still comes first).
    @Test func thePaidFirstOrderSpendsPaidCoinsBeforeFreeOnes() throws {
        let connection = try Connection(options: try TestDatabase.make())
        try connection.query("SELECT wallet.set_spending_order(TRUE)")
        _ = try LedgerStore.credit([Self.credit("f-1", "ann", "guodong600")], on: connection)
        try connection.query("SELECT * FROM wallet.grant_coins('ann', 100, 'coin', 'prize', 'ops')")
        try connection.query("SELECT * FROM wallet.grant_coins('ann', 30, 'coin', 'week', 'ops', p_expires_in_days => 7)")
        let spent = try LedgerStore.debit([Self.debit("d-1", 650)], on: connection)
        // The 30 that expire, then the paid 600, then 20 of the free 100.
        #expect(try Self.moves(connection, entry: try #require(spent[0].entryID)) == ["1:-600", "2:-20", "3:-30"])
        try connection.query("SELECT wallet.set_spending_order(FALSE)")
        let more = try LedgerStore.debit([Self.debit("d-2", 10)], on: connection)
        #expect(try Self.moves(connection, entry: try #require(more[0].entryID)) == ["2:-10"])
        #expect(try Self.lots(connection) == ["purchase true 600 0", "grant false 100 70", "grant false 30 0"])
        #expect(try LedgerStore.checkInvariants(on: connection) == [])
    }

    /// A refund takes its own purchase first even when spending order
    /// would take other lots first, then other lots in spending order.
    @Test func aRefundTakesItsOwnPurchaseBeforeAnyOtherLot() throws {
        let connection = try Connection(options: try TestDatabase.make())
        _ = try LedgerStore.credit([Self.credit("f-1", "ann", "guodong600"), Self.credit("f-2", "ann", "guodong1200")],
                                   on: connection)
        try connection.query("SELECT * FROM wallet.grant_coins('ann', 50, 'coin', 'prize', 'ops')")
        _ = try LedgerStore.debit([Self.debit("potion", 1000)], on: connection)
        // Spending order: the free 50, then the oldest paid lot (600), then 350 of the second.
        #expect(try Self.lots(connection) == ["purchase true 600 0", "purchase true 1200 850", "grant false 50 0"])
        let refund = try Self.entryID(connection, "wallet.refund_credit('f-2', 'chargeback', 'ops', 1000)")
        #expect(try Self.moves(connection, entry: refund) == ["2:-850"])
        #expect(try Self.balance(connection) == -150)
        #expect(try LedgerStore.checkInvariants(on: connection) == [])
    }

    /// An Apple refund reversed gives back to each lot what the refund
    /// took, and its debt: repaid by the reversal itself while it is owed,
    /// a new lot of the purchase when something else repaid it first.
    @Test func aReversalRefillsWhatItsRefundTook() throws {
        let connection = try Connection(options: try TestDatabase.make())
        _ = try LedgerStore.credit([Self.credit("f-1", "ann", "guodong1200"), Self.credit("f-2", "bob", "guodong1200")],
                                   on: connection)
        _ = try LedgerStore.debit([Self.debit("a-1", 200, "ann"), Self.debit("b-1", 200, "bob")], on: connection)
        for flowNo in ["f-1", "f-2"] {
            try connection.query(PostgresQuery(unsafeSQL: """
                SELECT * FROM wallet.refund_credit('\(flowNo)', NULL, NULL, NULL, 'apple', 'appstore')
                """))
        }
        #expect(try Self.balance(connection, "ann") == -200)
        // bob's debt is repaid by a grant before Apple reverses the refund.
        try connection.query("SELECT * FROM wallet.grant_coins('bob', 300, 'coin', 'apology', 'ops')")

        let annBack = try Self.entryID(connection, "wallet.reverse_refund('f-1')")
        #expect(try Self.moves(connection, entry: annBack, "ann") == ["1:1000"])
        #expect(try Self.lots(connection, "ann") == ["purchase true 1200 1000"])
        #expect(try Self.balance(connection, "ann") == 1000)

        let bobBack = try Self.entryID(connection, "wallet.reverse_refund('f-2')")
        #expect(try Self.moves(connection, entry: bobBack, "bob") == ["1:1000", "3:200"])
        #expect(try Self.lots(connection, "bob")
            == ["purchase true 1200 1000", "grant false 100 100", "purchase true 200 200"])
        #expect(try Self.balance(connection, "bob") == 1300)
        #expect(try LedgerStore.checkInvariants(on: connection) == [])
    }

    /// Debits of one wallet in one batch take consecutive stretches of its
    /// lots: the same lots, the same amounts, as one debit at a time.
    @Test func aBatchTakesWhatTheSameDebitsTakeOneAtATime() throws {
        func run(batched: Bool) throws -> [String] {
            let connection = try Connection(options: try TestDatabase.make())
            try connection.query("SELECT * FROM wallet.grant_coins('ann', 100, 'coin', 'a', 'ops')")
            try connection.query("SELECT * FROM wallet.grant_coins('ann', 200, 'coin', 'b', 'ops')")
            _ = try LedgerStore.credit([Self.credit("f-1", "ann", "guodong600")], on: connection)
            try connection.query("SELECT * FROM wallet.grant_coins('bob', 90, 'coin', 'c', 'ops')")
            let debits = [Self.debit("d-1", 150), Self.debit("d-2", 60, "bob"), Self.debit("d-3", 150),
                          Self.debit("d-4", 300), Self.debit("d-5", 400)]
            var results: [LedgerStore.DebitResult] = []
            if batched {
                try connection.execute("BEGIN")
                results = try LedgerStore.debit(debits, on: connection)
                try connection.execute("COMMIT")
            } else {
                for debit in debits { results += try LedgerStore.debit([debit], on: connection) }
            }
            #expect(try LedgerStore.checkInvariants(on: connection) == [])
            return try results.map { result in
                "\(result.outcome.rawValue) "
                    + (try result.entryID.map { try Self.moves(connection, entry: $0, $0 == results[1].entryID ? "bob" : "ann") }
                        ?? []).joined(separator: ",")
            } + Self.lots(connection)
        }
        let batched = try run(batched: true)
        #expect(batched == ["debited 1:-100,2:-50", "debited 1:-60", "debited 2:-150", "debited 3:-300",
                            "insufficient_funds ",
                            "grant false 100 0", "grant false 200 0", "purchase true 600 300"])
        #expect(batched == (try run(batched: false)))
    }

    /// A batch of debits, one per wallet, takes the short way
    /// (wallet.take_from_first_lots) when each wallet's first lot holds its
    /// debit, and the general way (wallet.take_from_lots) when one does not.
    /// Either way each debit takes, lot by lot, what the spending order says:
    /// soonest expiry first (never-expiring coins last), then free before
    /// paid (or paid first), then oldest first. Random wallets of free,
    /// paid and expiring lots, in both orders, against a model of that order.
    @Test(arguments: [false, true]) func batchesOfDebitsSpendInTheSpendingOrder(paidFirst: Bool) throws {
        let connection = try Connection(options: try TestDatabase.make())
        try connection.query(PostgresQuery(unsafeSQL: "SELECT wallet.set_spending_order(\(paidFirst))"))
        try connection.execute("SET track_functions = 'pl'")  // which way each batch took
        var random = SplitMix64(seed: paidFirst ? 7_202 : 7_201)
        let users = (0..<24).map { "w\($0)" }
        for (index, user) in users.enumerated() {
            for lot in 0...random.below(3) {
                switch random.below(3) {
                case 0:
                    _ = try LedgerStore.credit([Self.credit("f-\(index)-\(lot)", user, "guodong600")], on: connection)
                case 1:
                    try connection.query(PostgresQuery(unsafeSQL: """
                        SELECT * FROM wallet.grant_coins('\(user)', \(1 + random.below(900)), 'coin', 'free \(lot)', 'ops')
                        """))
                default:
                    try connection.query(PostgresQuery(unsafeSQL: """
                        SELECT * FROM wallet.grant_coins('\(user)', \(1 + random.below(900)), 'coin', 'promo \(lot)', 'ops',
                                                         p_expires_in_days => \(1 + random.below(3)))
                        """))
                }
            }
        }
        struct Lot { let id: Int64; let paid: Bool; let expiry: Int64?; var remaining: Int64 }
        func lotsInSpendingOrder(_ user: String) throws -> [Lot] {
            try connection.query(PostgresQuery(unsafeSQL: """
                SELECT id, paid::text, (extract(epoch FROM expires_at) * 1000000)::bigint, remaining
                FROM wallet.lots WHERE user_id = '\(user)' AND remaining > 0
                """)).map { row in
                Lot(id: try row.decode(Int64.self, at: 0), paid: row[1] == "true",
                    expiry: row[2].flatMap { Int64($0) }, remaining: try row.decode(Int64.self, at: 3))
            }.sorted { a, b in
                let order = { (lot: Lot) in (lot.expiry ?? Int64.max, lot.paid == paidFirst ? 0 : 1, lot.id) }
                return order(a) < order(b)
            }
        }
        for round in 0..<8 {
            // Even rounds stay within each first lot; odd ones may go past it.
            let short = round.isMultiple(of: 2)
            var expected: [String: [String]] = [:]
            var debits: [LedgerStore.DebitOperation] = []
            for user in users where random.below(3) > 0 {
                let lots = try lotsInSpendingOrder(user)
                let limit = short ? (lots.first?.remaining ?? 0) : lots.reduce(0) { $0 + $1.remaining }
                guard limit > 0 else { continue }
                var left = Int64(1 + random.below(Int(limit)))
                debits.append(Self.debit("d-\(round)-\(user)", left, user))
                var takes: [String] = []
                for index in lots.indices where left > 0 {
                    let taken = min(left, lots[index].remaining)
                    takes.append("\(lots[index].id):\(-taken)")
                    left -= taken
                }
                expected[user] = takes.sorted()
            }
            // The session's calls of each way so far (counted until its
            // statistics are flushed), before and after the batch.
            func calls() throws -> [Int64] {
                try connection.query("""
                    SELECT coalesce(pg_stat_get_xact_function_calls('wallet.take_from_first_lots'::regproc), 0),
                           coalesce(pg_stat_get_xact_function_calls('wallet.take_from_lots'::regproc), 0)
                    """).map { row in [try row.decode(Int64.self, at: 0), try row.decode(Int64.self, at: 1)] }[0]
            }
            try connection.execute("BEGIN")
            let before = try calls()
            let results = try LedgerStore.debit(debits, on: connection)
            let after = try calls()
            try connection.execute("COMMIT")
            let wentPast = debits.contains { debit in
                (expected[debit.userID.rawValue]?.count ?? 0) > 1
            }
            #expect(zip(after, before).map { $0 - $1 } == (wentPast ? [1, 1] : [1, 0]), "round \(round)")
            for (debit, result) in zip(debits, results) {
                #expect(result.outcome == .debited)
                let moved = try connection.query(PostgresQuery(unsafeSQL: """
                    SELECT lot_id || ':' || amount FROM wallet.entry_lots WHERE entry_id = \(try #require(result.entryID))
                    """)).map { $0[0] ?? "" }.sorted()
                #expect(moved == expected[debit.userID.rawValue], "round \(round), \(debit.userID.rawValue)")
            }
        }
        #expect(try LedgerStore.checkInvariants(on: connection) == [])
    }

    /// A capture takes from lots as a debit does; a call that makes and
    /// takes lots of one wallet at once (here an adjustment posted by hand)
    /// moves them one posting at a time, in order.
    @Test func capturesAndMixedCallsMoveLotsInPostingOrder() throws {
        let connection = try Connection(options: try TestDatabase.make())
        try connection.query("SELECT * FROM wallet.grant_coins('ann', 100, 'coin', 'a', 'ops')")
        let placed = try LedgerStore.holds([HoldBatchTests.place("h-1", 80)], on: connection)
        let captured = try LedgerStore.holds([HoldBatchTests.capture("c-1", placed[0].hold!.id, 70)], on: connection)
        #expect(try Self.moves(connection, entry: try #require(captured[0].hold?.entryID)) == ["1:-70"])
        func posting(_ kind: String, _ amount: Int, _ reference: String) -> String {
            "wallet.new_posting(p_kind => '\(kind)', p_user_id => 'ann', p_currency => 'coin', "
                + "p_amount => \(amount), p_reference => '\(reference)', p_client => 'tests')"
        }
        try connection.query(PostgresQuery(unsafeSQL: """
            SELECT wallet.post_entries(ARRAY[\(posting("revoke", -30, "r-1")), \(posting("grant", 50, "g-1")),
                                             \(posting("revoke", -40, "r-2"))])
            """))
        // The revoke of 30 empties the first lot and owes 0 (30 were left);
        // the grant makes a lot of 50; the second revoke takes 40 of it.
        #expect(try Self.lots(connection) == ["grant false 100 0", "grant false 50 10"])
        #expect(try LedgerStore.checkInvariants(on: connection) == [])
    }

    /// Moves a lot's expiry into the past, as time passing would (its
    /// wallet's next_expiry too, as move_lots keeps it).
    static func letExpire(_ connection: Connection, lot: Int64) throws {
        try connection.execute(PostgresQuery(unsafeSQL: """
            UPDATE wallet.lots SET expires_at = now() - interval '1 second' WHERE id = \(lot)
            """))
        try connection.execute(PostgresQuery(unsafeSQL: """
            UPDATE wallet.wallets w SET next_expiry = now() - interval '1 second'
            FROM wallet.lots l WHERE l.id = \(lot) AND w.user_id = l.user_id AND w.currency = l.currency
            """))
    }

    static func expiring(_ connection: Connection) throws -> Int64 {
        try connection.query("SELECT id FROM wallet.lots WHERE expires_at IS NOT NULL ORDER BY id LIMIT 1")[0]
            .decode(Int64.self, at: 0)
    }

    /// A grant that expires is spent first; past its expiry its coins stop
    /// counting at once, and the sweeper takes out exactly those, except
    /// what a hold still needs, which goes once the hold lets it go.
    @Test func expiredCoinsGoToTheCoinKeepingWhatHoldsNeed() throws {
        let connection = try Connection(options: try TestDatabase.make())
        try connection.query("SELECT * FROM wallet.grant_coins('ann', 1000, 'coin', 'a', 'ops')")
        try connection.query("SELECT * FROM wallet.grant_coins('ann', 300, 'coin', 'week', 'ops', p_expires_in_days => 7)")
        #expect(try connection.query("SELECT (next_expiry - now() > interval '6 days')::text FROM wallet.wallets")[0][0]
            == "true")
        _ = try LedgerStore.debit([Self.debit("d-1", 100)], on: connection)
        #expect(try Self.lots(connection) == ["grant false 1000 1000", "grant false 300 200"])
        let placed = try LedgerStore.holds([HoldBatchTests.place("h-1", 1100)], on: connection)
        let hold = try #require(placed[0].hold)

        try Self.letExpire(connection, lot: try Self.expiring(connection))
        // Read before any sweep: the 100 expired coins the hold does not need are not available.
        let read = try LedgerStore.balances(of: ["ann"], on: connection)
        #expect(read.map { "\($0.balance) \($0.held) \($0.expired)" } == ["1200 1100 100"])
        #expect(try connection.query("SELECT wallet.expire_lots()")[0][0] == "100")
        #expect(try connection.query("SELECT wallet.expire_lots()")[0][0] == "0")
        #expect(try Self.lots(connection) == ["grant false 1000 1000", "grant false 300 100"])
        #expect(try Self.balance(connection) == 1100)

        // The hold let go, its 100 expire too, before anything else decides.
        _ = try LedgerStore.holds([HoldBatchTests.release("r-1", hold.id)], on: connection)
        #expect(try LedgerStore.balances(of: ["ann"], on: connection).map(\.expired) == [100])
        let refused = try LedgerStore.debit([Self.debit("d-2", 1001)], on: connection)
        #expect(refused[0].outcome == .insufficientFunds)
        #expect(try Self.balance(connection) == 1000)
        #expect(try Self.lots(connection) == ["grant false 1000 1000", "grant false 300 0"])
        #expect(try connection.query("SELECT next_expiry IS NULL FROM wallet.wallets")[0][0] == "t")

        // Breakage is the expired coins, to the coin, each told as an event.
        #expect(try connection.query("""
            SELECT -sum(amount) || ' ' || count(*) FROM wallet.entries WHERE kind = 'expire'
            """)[0][0] == "200 2")
        #expect(try connection.query("SELECT count(*) FROM wallet.events WHERE type = 'coins.expired'")[0][0] == "2")
        #expect(try LedgerStore.checkInvariants(on: connection) == [])
    }

    /// A debit never spends coins past their expiry, even before they are
    /// taken out; a capture spends the ones kept for its hold.
    @Test func aDebitSkipsExpiredCoinsAndACaptureUsesTheOnesKeptForIt() throws {
        let connection = try Connection(options: try TestDatabase.make())
        try connection.query("SELECT * FROM wallet.grant_coins('ann', 50, 'coin', 'a', 'ops')")
        try connection.query("SELECT * FROM wallet.grant_coins('ann', 100, 'coin', 'b', 'ops', p_expires_in_days => 1)")
        let placed = try LedgerStore.holds([HoldBatchTests.place("h-1", 120)], on: connection)
        try Self.letExpire(connection, lot: try Self.expiring(connection))
        // 30 of the expired 100 may go; 70 are kept for the hold.
        let debit = try LedgerStore.debit([Self.debit("d-1", 1)], on: connection)
        #expect(debit[0].outcome == .insufficientFunds)
        #expect(try Self.lots(connection) == ["grant false 50 50", "grant false 100 70"])
        let captured = try LedgerStore.holds([HoldBatchTests.capture("c-1", placed[0].hold!.id, 120)], on: connection)
        #expect(try Self.moves(connection, entry: try #require(captured[0].hold?.entryID)) == ["1:-50", "2:-70"])
        #expect(try Self.balance(connection) == 0)
        #expect(try LedgerStore.checkInvariants(on: connection) == [])
    }

    /// The check sees a lot that no longer matches its entries, and a
    /// balance its lots do not hold.
    @Test func theCheckFindsLotsThatDoNotMatch() throws {
        let connection = try Connection(options: try TestDatabase.make())
        try connection.query("SELECT * FROM wallet.grant_coins('ann', 100, 'coin', 'a', 'ops')")
        try connection.execute("UPDATE wallet.lots SET remaining = 90")
        let found = Set(try LedgerStore.checkInvariants(on: connection).map(\.invariant))
        #expect(found == ["lots_hold_balance", "lot_matches_its_entries"])
        try connection.execute("UPDATE wallet.lots SET remaining = 100")
        try connection.execute("""
            INSERT INTO wallet.entries (user_id, currency, amount, balance_after, kind, reference, client)
            VALUES ('ann', 'coin', -5, 95, 'revoke', 'by-hand', 'tests')
            """)
        let after = Set(try LedgerStore.checkInvariants(on: connection).map(\.invariant))
        #expect(after.contains("entry_moves_its_lots"))
    }

    /// One batch with bonuses: a credit, its replay, another credit with a
    /// bonus in the same currency, and one whose bonus is in another: each
    /// answer's balance is the wallet's at that point of the batch, bonuses
    /// included, and each bonus posts once, right after its credit.
    @Test func aBatchOfCreditsWithBonusesAnswersAsOneAtATime() throws {
        let connection = try Connection(options: try TestDatabase.make())
        try connection.query("SELECT * FROM wallet.upsert_currency('gem', 'Gems')")
        try connection.query("SELECT * FROM wallet.upsert_product('guodong600', 600, 'coin', p_bonus_amount => 60)")
        try connection.query("""
            SELECT * FROM wallet.upsert_product('guodong1200', 1200, 'coin', p_bonus_amount => 5, p_bonus_currency => 'gem')
            """)
        let results = try LedgerStore.credit([Self.credit("b-1", "bea", "guodong600"), Self.credit("b-1", "bea", "guodong600"),
                                              Self.credit("b-2", "bea", "guodong600"), Self.credit("b-3", "bea", "guodong1200"),
                                              Self.credit("b-4", "bea", "guodong5000")], on: connection)
        #expect(results.map(\.outcome) == [.credited, .replayed, .credited, .credited, .credited])
        #expect(results.map(\.balance) == [660, 660, 1_320, 2_520, 7_520])
        #expect(try connection.query("""
            SELECT kind || ' ' || currency || ' ' || amount || ' ' || reference FROM wallet.entries ORDER BY id
            """).map { $0[0] ?? "" } == ["credit coin 600 b-1", "bonus coin 60 b-1", "credit coin 600 b-2",
                                         "bonus coin 60 b-2", "credit coin 1200 b-3", "bonus gem 5 b-3",
                                         "credit coin 5000 b-4"])
        #expect(try LedgerStore.checkInvariants(on: connection) == [])
    }

    /// 64 threads on one wallet of many lots: debits, grants, credits,
    /// holds placed and captured, refunds of its purchases, while lots
    /// expire (on the clock, during the race) and a sweeper expires them.
    /// No lot goes below zero (a constraint), no coin is taken twice, no
    /// coin past its expiry is left once the last sweep ran, and the books
    /// balance lot by lot.
    @Test func sixtyFourThreadsOnOneWalletKeepEveryLotExact() throws {
        var database = try TestDatabase.make()
        // 64 threads queue on one wallet row: a statement may wait for all
        // the others ahead of it, longer than the default 5 s on a busy machine.
        database.statementTimeoutMilliseconds = 120_000
        let options = database
        let setup = try Connection(options: options)
        try setup.query("SELECT * FROM wallet.grant_coins('ann', 2000, 'coin', 'seed', 'ops')")
        // 16 expiring lots of 5,000, more than the race spends, whose expiry
        // falls during it: the n-th 0.15·n seconds from now.
        for index in 1...16 {
            try setup.query("SELECT * FROM wallet.grant_coins('ann', 5000, 'coin', \("promo \(index)"), 'ops', p_expires_in_days => 1)")
        }
        try setup.execute("""
            UPDATE wallet.lots l SET expires_at = clock_timestamp() + n.rank * interval '150 milliseconds'
            FROM (SELECT id, row_number() OVER (ORDER BY id) AS rank FROM wallet.lots WHERE expires_at IS NOT NULL) n
            WHERE l.id = n.id
            """)
        try setup.execute("UPDATE wallet.wallets SET next_expiry = (SELECT min(expires_at) FROM wallet.lots)")
        let failures = Mutex<[String]>([])
        let finished = runOnThreads(64, timeoutSeconds: 120) { thread in
            do {
                let connection = try Connection(options: options)
                for round in 0..<8 {
                    let name = "t\(thread)-\(round)"
                    if thread % 8 == 0 {
                        _ = try connection.query("SELECT wallet.expire_lots()")
                    }
                    switch (thread + round) % 5 {
                    case 0: _ = try LedgerStore.credit([Self.credit("f-\(name)", "ann", "guodong600")], on: connection)
                    case 1: _ = try LedgerStore.debit([Self.debit("d-\(name)", Int64(37 + thread))], on: connection)
                    case 2: try connection.query("SELECT * FROM wallet.grant_coins('ann', 25, 'coin', 'g', 'ops')")
                    case 3:
                        let placed = try LedgerStore.holds([HoldBatchTests.request("h-\(name)", .place(
                            user: UserID("ann")!, currency: .coin, amount: Amount(90)!, reason: nil, metadata: nil,
                            expiresInSeconds: 600))], on: connection)
                        if let hold = placed[0].hold {
                            _ = try LedgerStore.holds([HoldBatchTests.capture("c-\(name)", hold.id, 60)], on: connection)
                        }
                    default:
                        // This thread credited f-…-(round - 4): refund it.
                        if round >= 4 {
                            try connection.query(PostgresQuery(unsafeSQL: """
                                SELECT * FROM wallet.refund_credit('f-t\(thread)-\(round - 4)', 'test', 'ops')
                                """))
                        }
                    }
                }
            } catch {
                failures.withLock { $0.append("\(thread): \(error)") }
            }
        }
        #expect(finished)
        #expect(failures.withLock { $0 } == [])
        // Past the last expiry, one sweep to the end: no coin past its
        // expiry is left (no hold is still active to keep any).
        while try setup.query("SELECT clock_timestamp() <= max(expires_at) FROM wallet.lots")[0][0] == "t" {
            Thread.sleep(forTimeInterval: 0.1)
        }
        while try setup.query("SELECT wallet.expire_lots()")[0].decode(Int64.self, at: 0) > 0 {}
        #expect(try setup.query("SELECT count(*) FROM wallet.holds WHERE status = 'held'")[0][0] == "0")
        #expect(try setup.query("SELECT coalesce(sum(remaining), 0) FROM wallet.lots WHERE expires_at <= now()")[0][0] == "0")
        #expect(try setup.query("SELECT count(*) FROM wallet.entries WHERE kind = 'expire'")[0].decode(Int.self, at: 0) > 0)
        // Breakage is what the expire entries took, all of it from expiring lots.
        let expired = try setup.query("""
            SELECT (SELECT -sum(amount) FROM wallet.entries WHERE kind = 'expire')::text,
                   (SELECT -sum(t.amount) FROM wallet.entry_lots t JOIN wallet.entries e ON e.id = t.entry_id
                    JOIN wallet.lots l ON l.id = t.lot_id WHERE e.kind = 'expire' AND l.expires_at IS NOT NULL)::text
            """)[0]
        #expect(expired[0] == expired[1])
        #expect(try LedgerStore.checkInvariants(on: setup) == [])
        // Every coin any entry took came from a lot that held it: the lots'
        // takings equal the decreases above the debt line, lot by lot.
        let taken = try setup.query("""
            SELECT coalesce(-sum(t.amount), 0)::text FROM wallet.entry_lots t WHERE t.amount < 0
            """)[0][0]
        let decreases = try setup.query("""
            SELECT coalesce(-sum(greatest(0, balance_after) - greatest(0, balance_after - amount)), 0)::text
            FROM wallet.entries WHERE amount < 0
            """)[0][0]
        #expect(taken == decreases)
        #expect(try setup.query("SELECT count(*) FROM wallet.entry_lots WHERE amount < 0")[0].decode(Int.self, at: 0) > 100)
    }
}
