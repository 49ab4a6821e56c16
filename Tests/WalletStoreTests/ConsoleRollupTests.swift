import Foundation
import Logging
import Postgres
import Testing
import TestSupport
@testable import WalletCore
@testable import WalletStore

/// The console's overview reads rollups that a job keeps from the event log
/// (Migrations/functions/20_console_rollups.sql), plus what the job has not
/// reached yet; whatever the watermark, its numbers are a direct
/// aggregation's over the whole ledger.
@Suite(.timeLimit(.minutes(5)))
struct ConsoleRollupTests {
    static let logger = Logger(label: "test", level: .error, sink: .discard)

    /// What the overview showed when it aggregated the ledger and scanned
    /// the wallets on every view: the comparison's other side.
    struct Direct: Equatable, CustomStringConvertible {
        var days: [ConsoleStore.DayTotals]
        var purchases: Int64
        var refunds: Int64
        var consumptionRequests: Int64
        var largest: [ConsoleStore.WalletRow]
        var negative: [ConsoleStore.WalletRow]

        var description: String {
            "purchases \(purchases) refunds \(refunds) consumption \(consumptionRequests) days \(days.count) "
                + "largest \(largest.map { "\($0.userID)/\($0.currency)=\($0.balance)" }) "
                + "negative \(negative.map { "\($0.userID)/\($0.currency)=\($0.balance)" })"
        }

        init(_ overview: ConsoleStore.Overview) {
            days = overview.days
            purchases = overview.purchases
            refunds = overview.refunds
            consumptionRequests = overview.consumptionRequests
            largest = overview.largestBalances
            negative = overview.mostNegativeBalances
        }

        init(days count: Int, on connection: Connection) throws {
            let window = "(now() AT TIME ZONE 'UTC')::date - \(count - 1)"
            let start = "((\(window))::timestamp AT TIME ZONE 'UTC')"
            days = try connection.query("""
                WITH sums AS (
                    SELECT (e.created_at AT TIME ZONE 'UTC')::date AS day,
                           coalesce(sum(e.amount) FILTER (WHERE e.kind = 'credit'), 0) AS credited,
                           coalesce(-sum(e.amount) FILTER (WHERE e.kind = 'debit'), 0) AS debited,
                           coalesce(-sum(e.amount) FILTER (WHERE e.kind = 'refund'), 0) AS refunded
                    FROM wallet.entries e WHERE e.created_at >= \(unsafeSQL: start) GROUP BY 1
                )
                SELECT d::date::text, coalesce(s.credited, 0)::bigint, coalesce(s.debited, 0)::bigint,
                       coalesce(s.refunded, 0)::bigint
                FROM generate_series(\(unsafeSQL: window), (now() AT TIME ZONE 'UTC')::date, INTERVAL '1 day') d
                LEFT JOIN sums s ON s.day = d::date ORDER BY d
                """).map {
                ConsoleStore.DayTotals(day: try $0.decode(String.self, at: 0), credited: try $0.decode(Int64.self, at: 1),
                                       debited: try $0.decode(Int64.self, at: 2), refunded: try $0.decode(Int64.self, at: 3))
            }
            let counts = try connection.query("""
                SELECT (SELECT count(*) FROM wallet.credits WHERE created_at >= \(unsafeSQL: start)),
                       (SELECT count(*) FROM wallet.entries WHERE kind = 'refund' AND created_at >= \(unsafeSQL: start)),
                       (SELECT count(*) FROM wallet.outbox
                        WHERE kind = 'appstore_consumption' AND created_at >= \(unsafeSQL: start))
                """)[0]
            purchases = try counts.decode(Int64.self, at: 0)
            refunds = try counts.decode(Int64.self, at: 1)
            consumptionRequests = try counts.decode(Int64.self, at: 2)
            largest = try Self.wallets("ORDER BY balance DESC, user_id, currency", on: connection)
            negative = try Self.wallets("WHERE balance < 0 ORDER BY balance, user_id, currency", on: connection)
        }

        static func wallets(_ order: String, on connection: Connection) throws -> [ConsoleStore.WalletRow] {
            try connection.query("SELECT user_id, currency, balance FROM wallet.wallets \(unsafeSQL: order) LIMIT 10").map {
                ConsoleStore.WalletRow(userID: try $0.decode(String.self, at: 0), currency: try $0.decode(String.self, at: 1),
                                       balance: try $0.decode(Int64.self, at: 2))
            }
        }
    }

    /// The overview for 7, 30 and 90 days equals the direct aggregation.
    static func expectOverviewIsDirect(_ connection: Connection, _ comment: Comment,
                                       sourceLocation: SourceLocation = #_sourceLocation) throws {
        for days in ConsoleStore.windows {
            let shown = Direct(try ConsoleStore.overview(days: days, on: connection))
            let direct = try Direct(days: days, on: connection)
            #expect(shown == direct, "\(comment), \(days) days: \(shown) vs \(direct)", sourceLocation: sourceLocation)
        }
    }

    static func watermark(_ connection: Connection) throws -> Int64 {
        try connection.query("SELECT rolled_through FROM wallet.console_rollup_state")[0].decode(Int64.self, at: 0)
    }

    @discardableResult
    static func rollUp(_ connection: Connection, limit: Int) throws -> Int {
        try connection.query("SELECT wallet.roll_up_console(\(limit))")[0].decode(Int.self, at: 0)
    }

    /// The browser tests' seed (Tests/Browser/seed.sql) for 1,000 players
    /// (about 20,000 entries over 90 days: credits, debits, grants, refunds
    /// by Apple and by admins, balances below zero), run as psql would.
    static func seed(_ connection: Connection) throws {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../Browser/seed.sql").standardizedFileURL.path
        let text = try String(contentsOfFile: path, encoding: .utf8)
        #expect(text.contains("FROM generate_series(1, 10000) AS u;"))
        let script = text.split(separator: "\n", omittingEmptySubsequences: false)
            .filter { !$0.hasPrefix("\\") }
            .joined(separator: "\n")
            .replacingOccurrences(of: "FROM generate_series(1, 10000) AS u;", with: "FROM generate_series(1, 1000) AS u;")
        try connection.executeScript(unsafeSQL: script)
    }

    static func credit(_ flowNo: String, _ user: String, _ product: String) -> LedgerStore.CreditOperation {
        .init(client: "app", flowNo: FlowNumber(flowNo)!, userID: UserID(user)!, productID: ProductID(product)!,
              quantity: Quantity(1)!, claimedAmount: nil, source: .caller, environment: nil)
    }

    static func debit(_ key: String, _ user: String, _ amount: Int64) -> LedgerStore.DebitOperation {
        .init(client: "game", key: IdempotencyKey(key)!, requestHash: [1], userID: UserID(user)!, currency: .coin,
              amount: Amount(amount)!, reason: "sword", metadata: nil, requestID: "r-\(key)")
    }

    /// A database of the release before the rollups, with history (some of
    /// it older than its events), upgraded while a writer is still open;
    /// the job then runs in steps while more is written through the real
    /// functions and another writer commits late. At every point the
    /// overview is the direct aggregation, and nothing is lost.
    @Test func theOverviewIsADirectAggregationWhereverTheJobHasReached() throws {
        let options = try TestDatabase.makeEmpty()
        let connection = try Connection(options: options)
        defer { connection.close() }
        try Migrator(files: Schema.migrationFiles.filter { $0.name < "0033" },
                     functionFiles: Schema.functionFiles.filter { $0.name < "20_" }, logger: Self.logger)
            .migrate(connection: connection)
        try Self.seed(connection)
        // The oldest history is told by no event, as if written before
        // events existed (or its events were purged).
        try connection.execute("SELECT set_config('wallet.purging_events', 'on', FALSE)")
        try connection.execute("DELETE FROM wallet.events WHERE id < (SELECT min(id) + 3000 FROM wallet.events)")
        try connection.execute("SELECT set_config('wallet.purging_events', 'off', FALSE)")

        // A writer of the old release's time still open when the schema
        // moves: its event is above what the backfill may take.
        let early = try Connection(options: options)
        defer { early.close() }
        try early.execute("BEGIN")
        try early.query("SELECT * FROM wallet.grant_coins('seed-user-00007', 7000, 'coin', 'late', 'tests')")
        #expect(try Schema.migrator(logger: Self.logger).migrate(connection: connection)
            .contains("0033_console_rollups.sql"))
        let backfilled = try Self.watermark(connection)
        #expect(backfilled > 0)
        // Until the job runs, the balance lists are scanned.
        try Self.expectOverviewIsDirect(connection, "after the upgrade")
        try early.execute("COMMIT")
        try Self.expectOverviewIsDirect(connection, "the early writer committed")

        // More, through the real functions: purchases in two currencies, a
        // new largest balance, debits, a refund that leaves a balance below
        // zero, a revoke below zero, and a consumption request.
        try connection.query("SELECT wallet.upsert_currency('gem', 'Gems')")
        try connection.query("SELECT wallet.upsert_product('gem100', 100, 'gem')")
        var credits: [LedgerStore.CreditOperation] = []
        for index in 0..<40 {
            credits.append(Self.credit("rollup-\(index)", "buyer-\(index % 8)", index % 2 == 0 ? "guodong5000" : "gem100"))
        }
        #expect(try LedgerStore.credit(credits, on: connection).allSatisfy { $0.outcome == .credited })
        #expect(try LedgerStore.debit(stride(from: 0, to: 8, by: 2).map { Self.debit("d-\($0)", "buyer-\($0)", 100 + Int64($0)) }, on: connection)
            .allSatisfy { $0.outcome == .debited })
        try connection.query("SELECT * FROM wallet.refund_credit('rollup-0', NULL, NULL, NULL, 'apple', 'appstore')")
        try connection.query("SELECT * FROM wallet.revoke_coins('buyer-3', 99999, 'gem', 'abuse', 'tests', TRUE)")
        try connection.execute("""
            INSERT INTO wallet.outbox (kind, key, flow_no, environment, window_ends_at)
            VALUES ('appstore_consumption', 'rollup-consumption', 'rollup-2', 'Production', now() + INTERVAL '12 hours')
            """)
        try Self.expectOverviewIsDirect(connection, "nothing rolled up since the upgrade")

        // The job part of the way: the watermark in the middle.
        let total = try connection.query("SELECT count(*) FROM wallet.events WHERE id > \(backfilled)")[0]
            .decode(Int.self, at: 0)
        #expect(total > 20)
        #expect(try Self.rollUp(connection, limit: total / 2) == total / 2)
        let middle = try Self.watermark(connection)
        #expect(middle > backfilled)
        try Self.expectOverviewIsDirect(connection, "watermark in the middle")

        // A writer that drew its ids and is still open while the job runs,
        // and writers that commit after it: the job stops below its ids.
        let late = try Connection(options: options)
        defer { late.close() }
        try late.execute("BEGIN")
        try late.query("SELECT * FROM wallet.grant_coins('buyer-5', 900000, 'coin', 'late', 'tests')")
        let lateEvent = try late.query("SELECT max(id) FROM wallet.events WHERE user_id = 'buyer-5'")[0]
            .decode(Int64.self, at: 0)
        try connection.query("SELECT * FROM wallet.grant_coins('buyer-6', 5, 'coin', 'after', 'tests')")
        #expect(try LedgerStore.debit([Self.debit("d-after", "buyer-0", 1)], on: connection)
            .allSatisfy { $0.outcome == .debited })
        for _ in 0..<3 { try Self.rollUp(connection, limit: 1_000) }
        #expect(try Self.watermark(connection) < lateEvent)
        try Self.expectOverviewIsDirect(connection, "a writer still open")
        try late.execute("COMMIT")
        try Self.expectOverviewIsDirect(connection, "the late writer committed, not rolled up yet")
        #expect(try Self.rollUp(connection, limit: 1_000) > 0)
        #expect(try Self.watermark(connection) >= lateEvent)
        try Self.expectOverviewIsDirect(connection, "the late writer rolled up")
        #expect(Direct(try ConsoleStore.overview(days: 7, on: connection)).largest.first?.userID == "buyer-5")

        // Events purged for retention never pass the watermark, and what
        // went is still counted.
        try connection.query("SELECT * FROM wallet.grant_coins('buyer-7', 11, 'coin', 'tail', 'tests')")
        let watermark = try Self.watermark(connection)
        let above = try connection.query("SELECT count(*) FROM wallet.events WHERE id > \(watermark)")[0]
            .decode(Int.self, at: 0)
        #expect(above > 0)
        let purged = try connection.query("SELECT wallet.purge_events(now() + INTERVAL '1 day', 1000000)")[0]
            .decode(Int.self, at: 0)
        #expect(purged > 0)
        #expect(try connection.query("SELECT max(id) FROM wallet.events WHERE id <= \(watermark)")[0][0] == nil)
        #expect(try connection.query("SELECT count(*) FROM wallet.events WHERE id > \(watermark)")[0]
            .decode(Int.self, at: 0) == above)
        try Self.expectOverviewIsDirect(connection, "events purged up to the watermark")
        while try Self.rollUp(connection, limit: 1_000) == 1_000 {}
        try Self.expectOverviewIsDirect(connection, "everything rolled up")
        #expect(try connection.query("SELECT count(*) FROM wallet.console_balance_candidates")[0]
            .decode(Int.self, at: 0) <= 200)
        #expect(try connection.query("SELECT * FROM wallet.check_invariants()").isEmpty)
    }

    /// The balance lists stay exact as their candidates fall out: members
    /// that drop below the threshold leave, and when too few are left the
    /// list is worked out afresh; a wallet that climbs past every candidate
    /// shows at once.
    @Test func theBalanceListsFollowEveryChange() throws {
        let options = try TestDatabase.make()
        let connection = try Connection(options: options)
        defer { connection.close() }
        try connection.execute("""
            SELECT wallet.grant_coins('p-' || lpad(n::text, 3, '0'), n * 10, 'coin', 'seed', 'tests') FROM generate_series(1, 150) n
            """)
        try connection.execute("""
            SELECT wallet.revoke_coins('p-' || lpad(n::text, 3, '0'), n * 10 + n, 'coin', 'seed', 'tests', TRUE)
            FROM generate_series(1, 150, 3) n
            """)
        try Self.rollUp(connection, limit: 50_000)
        // 100 balances above zero: the best 100 and the 100th's rank; 50
        // below zero: all of them, with no threshold.
        let lists = try connection.query("""
            SELECT l.list || ' ' || count(c.user_id) || ' ' || coalesce(l.threshold_key::text, 'none')
            FROM wallet.console_balance_lists l LEFT JOIN wallet.console_balance_candidates c USING (list)
            GROUP BY l.list, l.threshold_key ORDER BY l.list
            """).map { $0[0] ?? "" }
        #expect(lists == ["largest 100 -20", "negative 50 none"])
        try Self.expectOverviewIsDirect(connection, "rolled up")
        // The best fall, one by one, below every other balance; the job
        // runs between some of them.
        for n in stride(from: 149, through: 40, by: -1) where n % 3 != 1 {
            let user = "p-" + String(n).leftPadded(to: 3)
            try connection.query("SELECT wallet.revoke_coins(\(user), \(n * 10 - 1), 'coin', 'drop', 'tests')")
            if n % 7 == 0 {
                try Self.rollUp(connection, limit: 50_000)
                try Self.expectOverviewIsDirect(connection, "after \(user) fell")
            }
        }
        try Self.expectOverviewIsDirect(connection, "the best have fallen")
        try connection.query("SELECT wallet.grant_coins('p-001', 1000000, 'coin', 'climb', 'tests')")
        try connection.query("SELECT wallet.revoke_coins('p-002', 1000000, 'coin', 'sink', 'tests', TRUE)")
        try Self.expectOverviewIsDirect(connection, "a climb and a fall above the watermark")
        // A step while another instance's holds the watermark does nothing,
        // at once; the console still counts everything.
        let other = try Connection(options: options)
        defer { other.close() }
        try other.execute("BEGIN")
        try other.query("SELECT * FROM wallet.console_rollup_state FOR UPDATE")
        let before = try Self.watermark(connection)
        #expect(try Self.rollUp(connection, limit: 50_000) == 0)
        #expect(try Self.watermark(connection) == before)
        try other.execute("ROLLBACK")
        try Self.expectOverviewIsDirect(connection, "a step skipped")
        #expect(try Self.rollUp(connection, limit: 50_000) > 0)
        try Self.expectOverviewIsDirect(connection, "rolled up again")
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        String(repeating: "0", count: max(0, width - count)) + self
    }
}
