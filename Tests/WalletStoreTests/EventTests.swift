import Foundation
import JSON
import Postgres
import Synchronization
import Testing
import TestSupport
@testable import WalletCore
@testable import WalletStore

/// Every change to a wallet is an event, written with the change by
/// wallet.post_entries; the feed reads them in id order under a visibility
/// rule that never lets an event appear behind a cursor already given out.
@Suite(.timeLimit(.minutes(3)))
struct EventTests {
    static func credit(_ flowNo: String, _ user: String, _ product: String = "guodong600") -> LedgerStore.CreditOperation {
        .init(client: "app", flowNo: FlowNumber(flowNo)!, userID: UserID(user)!, productID: ProductID(product)!,
              quantity: Quantity(1)!, claimedAmount: nil, source: .caller, environment: nil)
    }

    static func debit(_ key: String, _ user: String, _ amount: Int64) -> LedgerStore.DebitOperation {
        .init(client: "game", key: IdempotencyKey(key)!, requestHash: [1], userID: UserID(user)!, currency: .coin,
              amount: Amount(amount)!, reason: "sword", metadata: nil, requestID: "r-\(key)")
    }

    static func hold(_ key: String, _ operation: LedgerStore.HoldOperation) -> LedgerStore.HoldRequest {
        .init(client: "game", anyClient: false, key: IdempotencyKey(key)!, requestHash: [1], requestID: "r-\(key)",
              operation: operation)
    }

    static func place(_ key: String, _ user: String, _ amount: Int64, seconds: Int = 600) -> LedgerStore.HoldRequest {
        hold(key, .place(user: UserID(user)!, currency: .coin, amount: Amount(amount)!, reason: "match", metadata: nil,
                         expiresInSeconds: seconds))
    }

    static func types(_ connection: Connection, _ user: String) throws -> [String] {
        try connection.query("SELECT type FROM wallet.events WHERE user_id = \(user) ORDER BY id").map { $0[0] ?? "" }
    }

    /// Each wallet's events add up to it: amounts to the balance, and the
    /// last event's balance_after, held and available are the wallet's.
    /// Each ledger entry is told by exactly one event that names it.
    static func expectEventsAddUp(_ connection: Connection) throws {
        let wrong = try connection.query("""
            SELECT w.user_id FROM wallet.wallets w
            LEFT JOIN LATERAL (SELECT sum(e.amount) AS amount FROM wallet.events e
                               WHERE e.user_id = w.user_id AND e.currency = w.currency) s ON TRUE
            LEFT JOIN LATERAL (SELECT e.balance_after, e.held, e.available FROM wallet.events e
                               WHERE e.user_id = w.user_id AND e.currency = w.currency ORDER BY e.id DESC LIMIT 1) l ON TRUE
            WHERE coalesce(s.amount, 0) <> w.balance
               OR (l.balance_after, l.held, l.available) IS DISTINCT FROM (w.balance, w.held, w.balance - w.held)
            """).map { $0[0] }
        #expect(wrong == [])
        let untold = try connection.query("""
            SELECT e.id::text FROM wallet.entries e
            WHERE (SELECT count(*) FROM wallet.events v WHERE v.entry_id = e.id AND v.type <> 'balance.negative') <> 1
            """).map { $0[0] }
        #expect(untold == [])
    }

    @Test func everyKindOfChangeIsOneEventInTheOrderItWasMade() throws {
        let connection = try Connection(options: try TestDatabase.make())
        #expect(try LedgerStore.credit([Self.credit("f-1", "ann"), Self.credit("f-2", "ann", "guodong1200")],
                                       on: connection).map(\.outcome) == [.credited, .credited])
        #expect(try LedgerStore.debit([Self.debit("d-1", "ann", 100)], on: connection).map(\.outcome) == [.debited])
        let placed = try LedgerStore.holds([Self.place("h-1", "ann", 50), Self.place("h-2", "ann", 40),
                                            Self.place("h-3", "ann", 30, seconds: 1)], on: connection)
        let ids = placed.map { $0.hold!.id }
        _ = try LedgerStore.holds([Self.hold("c-1", .capture(holdID: ids[0], amount: Amount(20)!)),
                                   Self.hold("r-1", .release(holdID: ids[1]))], on: connection)
        try connection.query("SELECT * FROM wallet.grant_coins('ann', 7, 'coin', 'gift', 'tests')")
        // A Google partial refund; a revoke; an Apple refund that leaves ann
        // below zero, reversed.
        try connection.query("SELECT * FROM wallet.refund_credit('f-2', NULL, NULL, 200, 'google', 'googleplay')")
        try connection.query("SELECT * FROM wallet.revoke_coins('ann', 1480, 'coin', 'abuse', 'tests')")
        try connection.query("SELECT * FROM wallet.refund_credit('f-1', NULL, NULL, NULL, 'apple', 'appstore')")
        try connection.query("SELECT * FROM wallet.reverse_refund('f-1')")
        // The hold of one second expires at the next batch on ann's wallet.
        try connection.query("SELECT pg_sleep(1.1)")
        #expect(try LedgerStore.debit([Self.debit("d-2", "ann", 1)], on: connection).map(\.outcome) == [.debited])

        #expect(try Self.types(connection, "ann") == [
            "credit.created", "credit.created", "debit.created", "hold.placed", "hold.placed", "hold.placed",
            "hold.captured", "hold.released", "grant.created", "credit.refunded", "revoke.created",
            "credit.refunded", "balance.negative", "credit.refund_reversed", "hold.expired", "debit.created"])
        try Self.expectEventsAddUp(connection)
        // What the refunds say.
        let refunds = try connection.query("""
            SELECT flow_no, amount::text, data->>'refunded_amount', data->>'partial', data->>'source'
            FROM wallet.events WHERE type = 'credit.refunded' ORDER BY id
            """).map { [$0[0], $0[1], $0[2], $0[3], $0[4]] }
        #expect(refunds == [["f-2", "-200", "200", "true", "google"], ["f-1", "-600", "600", "false", "apple"]])
        // Hold events carry the hold and move held coins, not the balance.
        let holds = try connection.query("""
            SELECT type, hold_id::text, amount::text, held::text, coalesce(entry_id::text, '-') FROM wallet.events
            WHERE type LIKE 'hold.%' ORDER BY id
            """).map { [$0[0] ?? "", $0[1] ?? "", $0[2] ?? "", $0[3] ?? "", $0[4] ?? ""] }
        #expect(holds.map { $0[0] } == ["hold.placed", "hold.placed", "hold.placed", "hold.captured", "hold.released",
                                         "hold.expired"])
        #expect(holds.map { $0[1] } == ids.map(String.init) + [String(ids[0]), String(ids[1]), String(ids[2])])
        #expect(holds.map { $0[2] } == ["0", "0", "0", "-20", "0", "0"])
        #expect(holds.map { $0[3] } == ["50", "90", "120", "70", "30", "0"])
        #expect(holds[3][4] != "-" && holds[0][4] == "-")
        #expect(try LedgerStore.checkInvariants(on: connection) == [])
    }

    @Test func eventsAreNeverChangedAndLeaveOnlyByRetention() throws {
        let connection = try Connection(options: try TestDatabase.make())
        for user in ["ann", "bob", "cat"] {
            try connection.query("SELECT * FROM wallet.grant_coins(\(user), 10, 'coin', 'gift', 'tests')")
        }
        for sql in ["UPDATE wallet.events SET amount = 1000", "DELETE FROM wallet.events", "TRUNCATE wallet.events"] {
            let error = #expect(throws: PostgresError.self) { try connection.execute(PostgresQuery(unsafeSQL: sql)) }
            #expect(error?.sqlState == SQLState("WL001"), "\(sql)")
        }
        let ids = try connection.query("SELECT id FROM wallet.events ORDER BY id").map { try $0.decode(Int64.self, at: 0) }
        #expect(ids.count == 3)
        // Nothing is older than a day: nothing goes.
        #expect(try EventStore.purge(olderThanDays: 1, limit: 100, on: connection) == 0)
        // Nothing the console's rollups have not taken goes.
        #expect(try connection.query("SELECT wallet.purge_events(now() + interval '1 day', 2)")[0]
            .decode(Int.self, at: 0) == 0)
        try connection.query("SELECT wallet.roll_up_console(100)")
        // Everything is older than a day from now: the oldest two go (a
        // limit of two), and a cursor behind them is expired.
        #expect(try connection.query("SELECT wallet.purge_events(now() + interval '1 day', 2)")[0]
            .decode(Int.self, at: 0) == 2)
        #expect(try connection.query("SELECT purged_through FROM wallet.events_horizon")[0].decode(Int64.self, at: 0) == ids[1])
        let first = try EventStore.page(EventQuery(after: 0, limit: 10), on: connection)
        #expect(first.events.map(\.userID) == ["cat"])
        let error = #expect(throws: WalletError.self) {
            try EventStore.page(EventQuery(after: ids[0], limit: 10), on: connection)
        }
        guard case .cursorExpired = error else { Issue.record("expected cursorExpired, got \(String(describing: error))"); return }
        #expect(try EventStore.page(EventQuery(after: ids[1], limit: 10), on: connection).events.map(\.userID) == ["cat"])
    }

    @Test func aPageFiltersByPlayerAndTypeAndSaysWhereToGoOn() throws {
        let connection = try Connection(options: try TestDatabase.make())
        for (index, user) in ["ann", "bob", "ann", "bob", "ann"].enumerated() {
            try connection.query("SELECT * FROM wallet.grant_coins(\(user), \(index + 1), 'coin', \("g\(index)"), 'tests')")
        }
        _ = try LedgerStore.debit([Self.debit("d-1", "ann", 2)], on: connection)
        let anns = try EventStore.page(EventQuery(after: 0, limit: 2, userID: UserID("ann")), on: connection)
        #expect(anns.events.map(\.amount) == [1, 3])
        #expect(anns.nextAfter == anns.events[1].id)
        let rest = try EventStore.page(EventQuery(after: anns.nextAfter, limit: 10, userID: UserID("ann")), on: connection)
        #expect(rest.events.map(\.amount) == [5, -2])
        #expect(rest.events.map(\.type) == [.grantCreated, .debitCreated])
        // Not full: the cursor moves to the bound, past every event there is.
        let last = try connection.query("SELECT max(id) FROM wallet.events")[0].decode(Int64.self, at: 0)
        #expect(rest.nextAfter >= last)
        let debits = try EventStore.page(EventQuery(after: 0, limit: 10, type: .debitCreated), on: connection)
        #expect(debits.events.map(\.userID) == ["ann"])
        #expect(debits.events[0].data["reason"] == .string("sword"))
        // Caught up: an empty page, the cursor where it was.
        let caughtUp = try EventStore.page(EventQuery(after: rest.nextAfter, limit: 10), on: connection)
        #expect(caughtUp.events.isEmpty && caughtUp.nextAfter == rest.nextAfter)
        // A full page's cursor is its last event, whatever the bound.
        let two = try EventStore.page(EventQuery(after: 0, limit: 2), on: connection)
        #expect(two.events.count == 2 && two.nextAfter == two.events[1].id)
    }

    /// Eight writers commit in an order of their own (each waits a moment
    /// after drawing its ids, and some roll back) while twenty readers
    /// follow the feed: each reader sees every committed event once, in id
    /// order, and none appears behind a cursor it was given.
    @Test func readersFollowingTheFeedUnderConcurrentWritersMissNothing() throws {
        let options = try TestDatabase.make()
        let setup = try Connection(options: options)
        for user in 0..<8 {
            try setup.query("SELECT * FROM wallet.grant_coins(\("p\(user)"), 1000000, 'coin', 'setup', 'tests')")
        }
        let writing = Atomic<Int>(8)
        let outOfOrder = Atomic<Int>(0)
        let failures = Mutex<[String]>([])
        let seen = Mutex<[[Int64]]>([])
        let threads = (0..<28).map { index in
            Thread {
                do {
                    let connection = try Connection(options: options)
                    if index < 8 {
                        defer { writing.subtract(1, ordering: .sequentiallyConsistent) }
                        for round in 0..<60 {
                            try connection.execute("BEGIN")
                            _ = try LedgerStore.debit([Self.debit("w\(index)-\(round)", "p\(index)", 1),
                                                       Self.debit("x\(index)-\(round)", "p\((index + 1) % 8)", 1)],
                                                      on: connection)
                            try connection.query("SELECT pg_sleep(\(Double((round * 7 + index) % 5) / 1000))")
                            try connection.execute(round % 10 == 3 ? "ROLLBACK" : "COMMIT")
                        }
                    } else {
                        var cursor: Int64 = 0
                        var ids: [Int64] = []
                        let until = ContinuousClock.now + .seconds(90)
                        while ContinuousClock.now < until {
                            let done = writing.load(ordering: .sequentiallyConsistent) == 0
                            let ahead = try connection.query("""
                                SELECT (SELECT max(id) FROM wallet.events) > wallet.events_visible_through()
                                """)[0].decode(Bool.self, at: 0)
                            if ahead { outOfOrder.add(1, ordering: .relaxed) }
                            let page = try EventStore.page(EventQuery(after: cursor, limit: 50), on: connection)
                            ids += page.events.map(\.id)
                            cursor = page.nextAfter
                            if page.events.isEmpty {
                                if done { break }
                                Thread.sleep(forTimeInterval: 0.001)
                            }
                        }
                        seen.withLock { $0.append(ids) }
                    }
                } catch {
                    failures.withLock { $0.append("\(index): \(error)") }
                }
            }
        }
        threads.forEach { $0.start() }
        let deadline = ContinuousClock.now + .seconds(150)
        while threads.contains(where: { !$0.isFinished }) && ContinuousClock.now < deadline {
            Thread.sleep(forTimeInterval: 0.05)
        }
        #expect(failures.withLock { $0 } == [])
        let committed = try setup.query("SELECT id FROM wallet.events ORDER BY id").map { try $0.decode(Int64.self, at: 0) }
        // 8 grants, and 54 committed rounds of two debits per writer.
        #expect(committed.count == 8 + 8 * 54 * 2)
        let views = seen.withLock { $0 }
        #expect(views.count == 20)
        for ids in views {
            #expect(ids == committed)
        }
        // The rule had something to hold back: some reader saw an event
        // committed past an id still in flight.
        #expect(outOfOrder.load(ordering: .relaxed) > 0)
        try Self.expectEventsAddUp(setup)
    }
}
