import Foundation
import Postgres
import Testing
import TestSupport
import WalletCore
@testable import WalletStore

/// The hot statements (balance reads, history pages, and every statement
/// inside debit_many, credit_many and hold_many with the functions they
/// call) read the wallet tables by their indexes, without JIT compiling,
/// on tables that were never analyzed as much as on analyzed ones. A
/// freshly loaded database keeps no statistics until ANALYZE, and the
/// planner then guesses: a balance read it costed in the millions was
/// JIT-compiled on every call and ran at a ninth of its speed.
///
/// Each statement runs through the store's own code, seven times on a new
/// connection, so that both the first (custom) plans and the generic plan
/// PostgreSQL may cache after five runs are seen. auto_explain reports
/// every plan, nested statements included, as a NOTICE. Needs a role that
/// may LOAD auto_explain and set session_replication_role (a superuser,
/// as the harness's own cluster gives).
@Suite(.timeLimit(.minutes(3)))
struct PlanTests {
    static let walletCount = 200_000
    /// Wallets with coins (one lot and two entries each); the others are empty.
    static let fundedCount = 50_000
    static let tables = ["entries", "holds", "idempotency_keys", "lots", "wallets"]
    static let runs = 7

    @Test func hotStatementsReadByIndexWithoutJITBeforeAndAfterAnalyze() throws {
        let options = try TestDatabase.make()
        let setup = try Connection(options: options)
        try Self.seed(on: setup)
        #expect(try Self.statisticsRows(on: setup) == 0, "the wallet tables must start never analyzed")

        let unanalyzed = try Self.plansOfHotStatements(options: options, round: "u")
        #expect(Set(unanalyzed.flatMap(\.relations)).isSuperset(of: Self.tables), "\(Self.summary(unanalyzed))")
        #expect(Self.faults(in: unanalyzed) == [], "never analyzed")

        try setup.execute("ANALYZE wallet.wallets, wallet.entries, wallet.idempotency_keys, wallet.holds, wallet.lots")
        #expect(try Self.statisticsRows(on: setup) > 0)
        let analyzed = try Self.plansOfHotStatements(options: options, round: "a")
        #expect(Set(analyzed.flatMap(\.relations)).isSuperset(of: Self.tables), "\(Self.summary(analyzed))")
        #expect(Self.faults(in: analyzed) == [], "analyzed")
    }

    /// 200,000 wallets, 50,000 of them with 1,000 coins in one lot after two
    /// entries, 100,000 stored debit outcomes and 20,000 released holds, all
    /// written set-based with triggers and foreign-key checks off (the rows
    /// keep every constraint), and autovacuum off for these tables so that
    /// nothing analyzes them behind the test's back.
    static func seed(on connection: Connection) throws {
        let autovacuumOff = tables.map { "ALTER TABLE wallet.\($0) SET (autovacuum_enabled = off);" }.joined(separator: "\n")
        try connection.executeScript(unsafeSQL: """
            \(autovacuumOff)
            SET session_replication_role = replica;
            INSERT INTO wallet.wallets (user_id, currency, balance)
                SELECT 'p' || g, 'coin', CASE WHEN g < \(fundedCount) THEN 1000 ELSE 0 END
                FROM generate_series(0, \(walletCount - 1)) g;
            INSERT INTO wallet.entries (user_id, currency, amount, balance_after, kind, reference, client)
                SELECT 'p' || g % \(fundedCount), 'coin', CASE WHEN g < \(fundedCount) THEN 600 ELSE 400 END,
                       CASE WHEN g < \(fundedCount) THEN 600 ELSE 1000 END, 'grant', 'seed-' || g, 'seed'
                FROM generate_series(0, \(2 * fundedCount - 1)) g;
            INSERT INTO wallet.lots (user_id, currency, source, paid, amount, remaining)
                SELECT 'p' || g, 'coin', 'grant', FALSE, 1000, 1000 FROM generate_series(0, \(fundedCount - 1)) g;
            INSERT INTO wallet.idempotency_keys (client, key, request_hash, outcome, amount, balance)
                SELECT 'seed', 'seed-' || g, '\\x00', 'insufficient_funds', 5000, 0 FROM generate_series(0, 99999) g;
            INSERT INTO wallet.holds (client, user_id, currency, amount, status, expires_at, released_at)
                SELECT 'seed', 'p' || g % \(fundedCount), 'coin', 1, 'released', now(), now()
                FROM generate_series(0, 19999) g;
            RESET session_replication_role;
            """)
    }

    static func statisticsRows(on connection: Connection) throws -> Int {
        try connection.query("""
            SELECT count(*) FROM pg_stats WHERE schemaname = 'wallet' AND tablename = ANY(\(tables)::text[])
            """)[0].decode(Int.self, at: 0)
    }

    /// Every plan auto_explain reports while the hot statements run `runs`
    /// times each on a new connection (so no plan is cached yet).
    static func plansOfHotStatements(options: Connection.Options, round: String) throws -> [Plan] {
        let connection = try Connection(options: options)
        try connection.executeScript(unsafeSQL: """
            LOAD 'auto_explain';
            SET auto_explain.log_min_duration = 0;
            SET auto_explain.log_nested_statements = on;
            SET auto_explain.log_format = json;
            SET auto_explain.log_settings = on;
            SET auto_explain.log_level = notice;
            SET client_min_messages = notice;
            """)
        let setting = try connection.query("SELECT current_setting('jit_above_cost')::float8")[0]
            .decode(Double.self, at: 0)
        // -1 turns JIT off.
        let jitAboveCost = setting < 0 ? Double.infinity : setting
        let (_, notices) = try connection.collectingNotices { connection in
            for run in 0..<runs {
                try hotStatements(run: "\(round)\(run)", on: connection)
            }
        }
        return try notices.compactMap { try Plan(notice: $0, jitAboveCost: jitAboveCost) }
    }

    /// One of each hot statement, as the service sends them.
    static func hotStatements(run: String, on connection: Connection) throws {
        // A reader's batch: 64 users spread over the table, a few of them funded.
        let users = (0..<64).map { "p\($0 * 3_119 % walletCount)" }
        #expect(try LedgerStore.balances(of: users, on: connection).count == 64)
        // A history page, then the next one of one currency.
        let page = try LedgerStore.entries(of: UserID("p7")!, currency: nil, beforeID: nil, limit: 50, on: connection)
        #expect(page.count == 2)
        _ = try LedgerStore.entries(of: UserID("p7")!, currency: .coin, beforeID: page.last?.id, limit: 50,
                                    on: connection)
        let debits = (0..<4).map { index in
            LedgerStore.DebitOperation(client: "game", key: IdempotencyKey("\(run)-d\(index)")!, requestHash: [1],
                                       userID: UserID("p\(index * 101)")!, currency: .coin, amount: Amount(1)!,
                                       reason: nil, metadata: nil, requestID: "r-\(run)-d\(index)")
        }
        #expect(try LedgerStore.debit(debits, on: connection).map(\.outcome) == Array(repeating: .debited, count: 4))
        // Credits to a funded wallet and to one the credit makes.
        let credits = ["p3", "new-\(run)"].enumerated().map { index, user in
            LedgerStore.CreditOperation(client: "app", flowNo: FlowNumber("\(run)-c\(index)")!, userID: UserID(user)!,
                                        productID: ProductID("guodong600")!, quantity: Quantity(1)!,
                                        claimedAmount: nil, source: .caller, environment: nil)
        }
        #expect(try LedgerStore.credit(credits, on: connection).count == 2)
        // Two holds placed, then one captured and one released.
        let placed = try LedgerStore.holds((0..<2).map { index in
            hold("\(run)-h\(index)", .place(user: UserID("p\(index * 103 + 1)")!, currency: .coin, amount: Amount(5)!,
                                            reason: nil, metadata: nil, expiresInSeconds: 300))
        }, on: connection).compactMap(\.hold?.id)
        #expect(placed.count == 2)
        let settled = try LedgerStore.holds([hold("\(run)-cap", .capture(holdID: placed[0], amount: nil)),
                                             hold("\(run)-rel", .release(holdID: placed[1]))], on: connection)
        #expect(settled.map(\.outcome) == [.captured, .released])
    }

    static func hold(_ key: String, _ operation: LedgerStore.HoldOperation) -> LedgerStore.HoldRequest {
        LedgerStore.HoldRequest(client: "game", anyClient: false, key: IdempotencyKey(key)!, requestHash: [1],
                                requestID: "r-\(key)", operation: operation)
    }

    /// What is wrong with the plans: a sequential scan of a wallet table,
    /// or JIT compiling (done, or due: costed at jit_above_cost or more with
    /// JIT on, which catches it on a server built without JIT too).
    static func faults(in plans: [Plan]) -> [String] {
        Array(Set(plans.flatMap { plan -> [String] in
            var found = plan.sequentialScans.filter { tables.contains($0) }
                .map { "Seq Scan on \($0): \(plan.query)" }
            if plan.compiles { found.append("JIT at cost \(Int(plan.totalCost)): \(plan.query)") }
            return found
        })).sorted()
    }

    static func summary(_ plans: [Plan]) -> String {
        "\(plans.count) plans over \(Set(plans.flatMap(\.relations)).sorted())"
    }

    /// One plan auto_explain reported ("duration: … ms  plan:" then JSON).
    struct Plan {
        var query: String
        var totalCost: Double
        var relations: [String]
        var sequentialScans: [String]
        var compiles: Bool

        /// Nil for a notice that is not a plan.
        init?(notice: String, jitAboveCost: Double) throws {
            guard let start = notice.range(of: "plan:\n") else { return nil }
            let json = try JSONSerialization.jsonObject(with: Data(notice[start.upperBound...].utf8))
            guard let report = json as? [String: Any], let root = report["Plan"] as? [String: Any] else { return nil }
            query = String(((report["Query Text"] as? String) ?? "").prefix(160))
            totalCost = (root["Total Cost"] as? Double) ?? 0
            let settings = (report["Settings"] as? [String: Any]) ?? [:]
            compiles = report["JIT"] != nil || (totalCost >= jitAboveCost && (settings["jit"] as? String) != "off")
            var nodes: [[String: Any]] = [root]
            relations = []
            sequentialScans = []
            // A plan is a finite tree; each node is visited once.
            while let node = nodes.popLast() {
                if let relation = node["Relation Name"] as? String {
                    relations.append(relation)
                    if node["Node Type"] as? String == "Seq Scan" { sequentialScans.append(relation) }
                }
                nodes += (node["Plans"] as? [[String: Any]]) ?? []
            }
        }
    }
}
