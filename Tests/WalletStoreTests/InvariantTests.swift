import Foundation
import Postgres
import Testing
import TestSupport
@testable import WalletStore

/// The rules the database keeps by itself, and the ones wallet.check_invariants() proves.
@Suite(.timeLimit(.minutes(2)))
struct InvariantTests {
    func expectRefused(_ connection: Connection, _ sql: String, _ sqlState: String) {
        let error = #expect(throws: PostgresError.self) { try connection.execute(PostgresQuery(unsafeSQL: sql)) }
        #expect(error?.sqlState == SQLState(sqlState), "\(sql)")
    }

    @Test func theLedgerAndWalletsRefuseChangesThatWouldRewriteHistory() throws {
        let connection = try Connection(options: try TestDatabase.make())
        try connection.query("SELECT * FROM wallet.grant_coins('ann', 100, 'coin', 'setup', 'tests')")
        expectRefused(connection, "UPDATE wallet.entries SET amount = 1000", "WL001")
        expectRefused(connection, "DELETE FROM wallet.entries", "WL001")
        // (TRUNCATE is refused too, by its trigger.)
        #expect(throws: PostgresError.self) { try connection.execute("TRUNCATE wallet.entries") }
        #expect(try connection.query("SELECT count(*) FROM wallet.entries")[0].decode(Int.self, at: 0) == 1)
        expectRefused(connection, "DELETE FROM wallet.wallets", "WL001")
        expectRefused(connection, "DELETE FROM wallet.admin_audit", "WL001")
        // A debit entry below zero, or one of the wrong sign, cannot be written.
        expectRefused(connection, """
            INSERT INTO wallet.entries (user_id, currency, amount, balance_after, kind, reference, client)
            VALUES ('ann', 'coin', -200, -100, 'debit', 'x', 'tests')
            """, "23514")
        expectRefused(connection, """
            INSERT INTO wallet.entries (user_id, currency, amount, balance_after, kind, reference, client)
            VALUES ('ann', 'coin', 5, 105, 'debit', 'x', 'tests')
            """, "23514")
        #expect(try LedgerStore.checkInvariants(on: connection) == [])
    }

    /// wallet.post_entries, the one writer of entries and balances: postings
    /// to several wallets, interleaved, each chain in posting order and
    /// end at its wallet's balance; a posting to no wallet changes nothing.
    @Test func postingsToSeveralWalletsChainInPostingOrder() throws {
        let connection = try Connection(options: try TestDatabase.make())
        try connection.query("SELECT * FROM wallet.grant_coins('ann', 100, 'coin', 'setup', 'tests')")
        try connection.query("SELECT * FROM wallet.grant_coins('bob', 10, 'coin', 'setup', 'tests')")
        func posting(_ user: String, _ amount: Int, _ reference: String) -> String {
            "wallet.new_posting(p_kind => 'grant', p_user_id => '\(user)', p_currency => 'coin', "
                + "p_amount => \(amount), p_reference => '\(reference)', p_client => 'tests')"
        }
        let postings = [posting("ann", 5, "a1"), posting("bob", 7, "b1"), posting("ann", 3, "a2"), posting("bob", 1, "b2")]
        let written = try connection.query(PostgresQuery(unsafeSQL: """
            SELECT e.reference, e.balance_after::text
            FROM unnest(wallet.post_entries(ARRAY[\(postings.joined(separator: ", "))])) e
            """)).map { [$0[0], $0[1]] }
        #expect(written == [["a1", "105"], ["b1", "17"], ["a2", "108"], ["b2", "18"]])
        // Ids follow posting order.
        #expect(try connection.query("""
            SELECT reference FROM wallet.entries WHERE reference IN ('a1', 'b1', 'a2', 'b2') ORDER BY id
            """).map { $0[0] } == ["a1", "b1", "a2", "b2"])
        expectRefused(connection, "SELECT wallet.post_entries(ARRAY[\(posting("ann", 1, "a3")), \(posting("nobody", 1, "n1"))])",
                      "WL003")
        #expect(try connection.query("SELECT balance::text FROM wallet.wallets ORDER BY user_id").map { $0[0] } == ["108", "18"])
        #expect(try LedgerStore.checkInvariants(on: connection) == [])
    }

    @Test func theCheckFindsAnEntryWithoutAWalletAndABrokenChain() throws {
        let connection = try Connection(options: try TestDatabase.make())
        try connection.query("SELECT * FROM wallet.grant_coins('ann', 100, 'coin', 'setup', 'tests')")
        // Entries may be inserted by hand; the check sees what is wrong.
        try connection.execute("""
            INSERT INTO wallet.entries (user_id, currency, amount, balance_after, kind, reference, client)
            VALUES ('ghost', 'coin', 5, 5, 'grant', 'by-hand', 'tests'),
                   ('ann', 'coin', 5, 999, 'grant', 'by-hand', 'tests')
            """)
        let found = Set(try LedgerStore.checkInvariants(on: connection).map { "\($0.invariant) \($0.subject)" })
        #expect(found.contains("entry_has_wallet ghost/coin"))
        #expect(found.contains("balance_after_chain ann/coin"))
        #expect(found.contains("balance_matches_ledger ann/coin"))
    }

    /// No foreign key ties a stored debit outcome or a credit to its entry;
    /// the check does, for the entry, the amount and the balance answered.
    @Test func theCheckFindsStoredOutcomesAndCreditsThatDisagreeWithTheirEntries() throws {
        let connection = try Connection(options: try TestDatabase.make())
        try connection.query("""
            SELECT * FROM wallet.credit_many(ARRAY[
                ROW('tests', 'f-1', 'ann', 'guodong600', 1, NULL, 'caller', NULL, NULL)::wallet.credit_operation])
            """)
        try connection.query("""
            SELECT * FROM wallet.debit_many(ARRAY[
                ROW('tests', 'k-1', '\\x01', 'ann', 'coin', 100, NULL, NULL, 'r-1'),
                ROW('tests', 'k-2', '\\x02', 'ann', 'coin', 50, NULL, NULL, 'r-2'),
                ROW('tests', 'k-3', '\\x03', 'ann', 'coin', 25, NULL, NULL, 'r-3')]::wallet.debit_request[])
            """)
        #expect(try LedgerStore.checkInvariants(on: connection) == [])

        try connection.execute("UPDATE wallet.idempotency_keys SET entry_id = entry_id + 1000 WHERE key = 'k-1'")
        try connection.execute("UPDATE wallet.idempotency_keys SET amount = 51 WHERE key = 'k-2'")
        try connection.execute("UPDATE wallet.idempotency_keys SET balance = balance + 1 WHERE key = 'k-3'")
        try connection.execute("UPDATE wallet.credits SET entry_id = entry_id + 1000 WHERE flow_no = 'f-1'")
        let found = Set(try LedgerStore.checkInvariants(on: connection).map { "\($0.invariant) \($0.subject)" })
        #expect(found == ["debit_key_has_entry tests/k-1", "debit_key_has_entry tests/k-2", "debit_key_has_entry tests/k-3",
                          "credit_has_one_entry f-1", "credit_entry_has_credit f-1"])
    }
}
