import Foundation
import Postgres
import Testing
import TestSupport
@testable import WalletStore

/// `wallet check`'s incremental run (wallet.check_changes, with checkpoints
/// in wallet.check_checkpoints) against the full one: what each finds, when
/// the checkpoint moves, and that a writer committing late is not skipped.
@Suite(.timeLimit(.minutes(2)))
struct IncrementalCheckTests {
    func grant(_ connection: Connection, _ user: String, _ amount: Int, _ reference: String) throws {
        try connection.query(PostgresQuery(unsafeSQL:
            "SELECT * FROM wallet.grant_coins('\(user)', \(amount), 'coin', 'tests', 'tests', '\(reference)')"))
    }

    /// Changes an entry behind the append-only trigger's back.
    func tamper(_ connection: Connection, reference: String, amountBy delta: Int) throws {
        try connection.execute("SET session_replication_role = replica")
        try connection.execute(PostgresQuery(unsafeSQL:
            "UPDATE wallet.entries SET amount = amount + \(delta) WHERE reference = '\(reference)'"))
        try connection.execute("SET session_replication_role = DEFAULT")
    }

    func found(_ run: LedgerCheckRun) -> Set<String> {
        Set(run.violations.map { "\($0.invariant) \($0.subject)" })
    }

    func checkpoints(_ connection: Connection) throws -> Int {
        try connection.query("SELECT count(*) FROM wallet.check_checkpoints")[0].decode(Int.self, at: 0)
    }

    @Test func incrementalFindsTamperedRowsWrittenSinceItsCheckpointAndFullFindsTheRest() throws {
        let connection = try Connection(options: try TestDatabase.make())
        try grant(connection, "ann", 100, "ann-1")
        try grant(connection, "bob", 100, "bob-1")
        // No checkpoint yet: the whole ledger, and a checkpoint.
        let first = try LedgerCheck.run(full: false, on: connection)
        #expect(first.mode == .full && first.violations.isEmpty)
        #expect(try checkpoints(connection) == 1)
        let firstEntry = try #require(first.throughEntryID)

        // An entry written after the checkpoint, tampered: found, and the
        // checkpoint stays where it was.
        try grant(connection, "ann", 5, "ann-2")
        try tamper(connection, reference: "ann-2", amountBy: 1)
        let tampered = try LedgerCheck.run(full: false, on: connection)
        #expect(tampered.mode == .incremental)
        #expect(found(tampered).isSuperset(of: ["balance_matches_ledger ann/coin", "balance_after_chain ann/coin"]))
        #expect(!found(tampered).contains { $0.hasSuffix("bob/coin") })
        #expect(tampered.throughEventID == first.throughEventID)
        #expect(try checkpoints(connection) == 1)
        // Found again by the next run, until it is put right; then a clean
        // run moves the checkpoint on, past ann's entry.
        #expect(found(try LedgerCheck.run(full: false, on: connection)) == found(tampered))
        try tamper(connection, reference: "ann-2", amountBy: -1)
        let clean = try LedgerCheck.run(full: false, on: connection)
        #expect(clean.mode == .incremental && clean.violations.isEmpty)
        #expect(try checkpoints(connection) == 2)
        #expect((clean.throughEventID ?? 0) > (first.throughEventID ?? 0))
        #expect((clean.throughEntryID ?? 0) > firstEntry)

        // An old entry of a wallet nothing touches since: the incremental
        // run cannot see it; the full one does.
        try tamper(connection, reference: "bob-1", amountBy: 3)
        try grant(connection, "ann", 1, "ann-3")
        #expect(try LedgerCheck.run(full: false, on: connection).violations.isEmpty)
        let full = try LedgerCheck.run(full: true, on: connection)
        #expect(full.mode == .full)
        #expect(found(full).contains("balance_matches_ledger bob/coin"))
        // Even once bob's wallet moves: an incremental run reads what was
        // written since its checkpoint, not a wallet's history (which would
        // make every run as long as the touched wallets' histories), so
        // the old row stays the full check's to find.
        try grant(connection, "bob", 1, "bob-2")
        let moved = try LedgerCheck.run(full: false, on: connection)
        #expect(moved.mode == .incremental && moved.violations.isEmpty)
        #expect(found(try LedgerCheck.run(full: true, on: connection)).isSuperset(of:
            ["balance_matches_ledger bob/coin", "balance_after_chain bob/coin"]))
    }

    /// A round with a budget checks the events after its checkpoint up to
    /// it and stores that checkpoint; the next round goes on from there.
    @Test func aRoundWithABudgetChecksUpToItAndTheNextGoesOn() throws {
        let connection = try Connection(options: try TestDatabase.make())
        try grant(connection, "ann", 100, "ann-1")
        let first = try LedgerCheck.run(full: false, eventsMax: 1, on: connection)
        #expect(first.mode == .full && first.violations.isEmpty)
        let start = try #require(first.throughEventID)
        try grant(connection, "bob", 5, "bob-1")
        try grant(connection, "cat", 5, "cat-1")
        try tamper(connection, reference: "cat-1", amountBy: 1)
        let bobEvent = try connection.query("SELECT max(id) FROM wallet.events WHERE user_id = 'bob'")[0]
            .decode(Int64.self, at: 0)
        let part = try LedgerCheck.run(full: false, eventsMax: bobEvent - start, on: connection)
        #expect(part.mode == .incremental && part.violations.isEmpty)
        #expect(part.throughEventID == bobEvent)
        let rest = try LedgerCheck.run(full: false, eventsMax: 1_000, on: connection)
        #expect(found(rest).contains("balance_matches_ledger cat/coin"))
        #expect(!found(rest).contains { $0.hasSuffix("bob/coin") })
        #expect(rest.throughEventID == bobEvent)
    }

    /// A transaction that drew its ids before a check and commits after it
    /// is behind no checkpoint: the next run checks it.
    @Test func aWriterThatCommitsAfterTheCheckIsCheckedByTheNextRun() throws {
        let options = try TestDatabase.make()
        let connection = try Connection(options: options)
        let late = try Connection(options: options)
        try grant(connection, "ann", 100, "ann-1")
        try grant(connection, "bob", 100, "bob-1")
        #expect(try LedgerCheck.run(full: true, on: connection).violations.isEmpty)

        try late.execute("BEGIN")
        try grant(late, "ann", 7, "ann-late")
        let lateEvent = try late.query("SELECT max(id) FROM wallet.events WHERE user_id = 'ann'")[0].decode(Int64.self, at: 0)
        // Its entry is wrong, and nobody can see it yet.
        try tamper(late, reference: "ann-late", amountBy: 2)
        try grant(connection, "bob", 1, "bob-2")
        let during = try LedgerCheck.run(full: false, on: connection)
        #expect(during.mode == .incremental && during.violations.isEmpty)
        // The checkpoint stops below the open writer's event.
        #expect((during.throughEventID ?? .max) < lateEvent)
        try late.execute("COMMIT")

        let after = try LedgerCheck.run(full: false, on: connection)
        #expect(after.mode == .incremental)
        #expect(found(after).contains("balance_matches_ledger ann/coin"))
        #expect(found(after).contains("balance_after_chain ann/coin"))
    }

    /// Both runs over a ledger with credits, refunds, debits, holds and
    /// lots: the incremental run over everything since an empty
    /// checkpoint finds what the full one finds but a lot's history,
    /// nothing when it is clean.
    @Test func incrementalAndFullAgreeOverEveryKindOfRow() throws {
        let connection = try Connection(options: try TestDatabase.make())
        try connection.execute("""
            INSERT INTO wallet.check_checkpoints (through_event_id, through_entry_id, mode, duration_milliseconds)
            VALUES (0, 0, 'full', 0)
            """)
        try connection.query("""
            SELECT * FROM wallet.credit_many(ARRAY[
                ROW('tests', 'f-1', 'ann', 'guodong600', 1, NULL, 'caller', NULL, NULL)::wallet.credit_operation,
                ROW('tests', 'f-2', 'bob', 'guodong600', 1, NULL, 'caller', NULL, NULL)::wallet.credit_operation])
            """)
        try connection.query("""
            SELECT * FROM wallet.debit_many(ARRAY[
                ROW('tests', 'k-1', '\\x01', 'ann', 'coin', 100, NULL, NULL, 'r-1'),
                ROW('tests', 'k-2', '\\x02', 'bob', 'coin', 50, NULL, NULL, 'r-2')]::wallet.debit_request[])
            """)
        try grant(connection, "cat", 40, "cat-1")
        let events = try connection.query("SELECT max(id) FROM wallet.events")[0].decode(Int64.self, at: 0)
        func both() throws -> (full: Set<String>, incremental: Set<String>) {
            let full = try connection.query("SELECT invariant, subject FROM wallet.check_invariants()")
                .map { "\($0[0] ?? "") \($0[1] ?? "")" }
            let incremental = try connection.query("SELECT invariant, subject FROM wallet.check_changes(0, \(events))")
                .map { "\($0[0] ?? "") \($0[1] ?? "")" }
            return (Set(full), Set(incremental))
        }
        let clean = try both()
        #expect(clean.full.isEmpty && clean.incremental.isEmpty)

        try connection.execute("SET session_replication_role = replica")
        try connection.execute("UPDATE wallet.idempotency_keys SET amount = 51 WHERE key = 'k-2'")
        try connection.execute("UPDATE wallet.credits SET entry_id = entry_id + 1000 WHERE flow_no = 'f-1'")
        try connection.execute("UPDATE wallet.lots SET remaining = remaining - 1 WHERE user_id = 'cat'")
        try connection.execute("UPDATE wallet.wallets SET held = held + 2 WHERE user_id = 'bob'")
        let broken = try both()
        // A lot's whole history is the full check's alone; the lot that
        // lost a coin no longer holds its wallet's balance, which both see.
        let history = "lot_matches_its_entries lot:\(try lot(connection, "cat"))"
        #expect(broken.incremental == broken.full.subtracting([history]))
        #expect(broken.full.isSuperset(of: ["debit_key_has_entry tests/k-2", "credit_has_one_entry f-1",
                                            "credit_entry_has_credit f-1", "lots_hold_balance cat/coin",
                                            history, "held_matches_holds bob/coin"]))
    }

    /// The browser tests' realistic seed (Tests/Browser/seed.sql: credits,
    /// debits, grants, refunds, events and lots), at a tenth of its players:
    /// clean by the full check (and by Scripts/admin/check.sql, run after
    /// it), and the incremental check over all of it agrees.
    @Test func incrementalAndFullAgreeOnTheSeededLedger() throws {
        let options = try TestDatabase.make()
        let connection = try Connection(options: options)
        let seed = try String(contentsOf: PSQL.packageRoot.appendingPathComponent("Tests/Browser/seed.sql"), encoding: .utf8)
        let scaled = seed.replacingOccurrences(of: "generate_series(1, 10000) AS u", with: "generate_series(1, 1000) AS u")
        #expect(scaled != seed)
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("wallet-seed-\(getpid()).sql")
        try Data(scaled.utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let run = try PSQL(database: options).run("check.sql", arguments: ["-f", file.path])
        #expect(run.status == 0, "\(run)")
        #expect(try connection.query("SELECT count(*) FROM wallet.entries")[0].decode(Int.self, at: 0) == 20_000)

        let bound = try connection.query("SELECT wallet.events_visible_through()")[0].decode(Int64.self, at: 0)
        #expect(try LedgerStore.checkInvariants(on: connection) == [])
        let changes = try connection.query("SELECT invariant, subject, detail FROM wallet.check_changes(0, \(bound))")
        #expect(changes.count == 0)
        // And both find the same when a row is wrong.
        try connection.execute("SET session_replication_role = replica")
        try connection.execute("""
            UPDATE wallet.entries SET amount = amount - 1 WHERE id = (SELECT min(id) FROM wallet.entries WHERE kind = 'debit')
            """)
        let full = try LedgerStore.checkInvariants(on: connection).map { "\($0.invariant) \($0.subject)" }
        let incremental = try connection.query("SELECT invariant, subject FROM wallet.check_changes(0, \(bound))")
            .map { "\($0[0] ?? "") \($0[1] ?? "")" }
        #expect(!full.isEmpty)
        #expect(Set(full) == Set(incremental))
    }

    func lot(_ connection: Connection, _ user: String) throws -> Int64 {
        try connection.query(PostgresQuery(unsafeSQL: "SELECT min(id) FROM wallet.lots WHERE user_id = '\(user)'"))[0]
            .decode(Int64.self, at: 0)
    }
}
