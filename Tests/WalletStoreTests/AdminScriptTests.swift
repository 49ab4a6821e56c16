import Foundation
import Locking
import Postgres
import Testing
import TestSupport

/// The scripts in `Scripts/admin`, run the way an operator runs them: the
/// real `psql`, from the package root, with the `-v` variables their headers
/// show, against a fresh database. The tests then read the tables to see
/// what the scripts did.
@Suite(.timeLimit(.minutes(3)))
struct AdminScriptTests {
    // MARK: refund.sql

    @Test func refundAfterSpendingLeavesANegativeBalanceAndRefusesDebits() throws {
        let books = try Books()
        #expect(try books.credit(flowNo: "2000000123", userID: "u1", productID: "guodong600") == "credited")
        #expect(try books.debit(key: "spend-1", userID: "u1", amount: 400) == "debited")

        let run = try books.psql.run("refund.sql", ["flow_no": "2000000123", "reason": "chargeback", "operator": "alice"])
        #expect(run.status == 0, "\(run)")
        #expect(run.output.hasPrefix("refunded flowNO 2000000123: 600 coin from user u1, balance -400 (entry "), "\(run)")
        #expect(run.lineCount == 1, "\(run)")

        #expect(try books.balance("u1") == -400)
        let credit = try #require(try books.connection.query("""
            SELECT status, refunded_by, refunded_amount, amount FROM wallet.credits WHERE flow_no = \("2000000123")
            """).single)
        #expect(credit["status"] == "refunded")
        #expect(credit["refunded_by"] == "admin")
        #expect(try credit.decode(Int64.self, column: "refunded_amount") == 600)
        #expect(try credit.decode(Int64.self, column: "amount") == 600)

        let entry = try #require(try books.connection.query("""
            SELECT id, amount, balance_after, metadata ->> 'operator' AS operator, metadata ->> 'reason' AS reason
            FROM wallet.entries WHERE kind = 'refund' AND reference = \("2000000123")
            """).single)
        #expect(try entry.decode(Int64.self, column: "amount") == -600)
        #expect(try entry.decode(Int64.self, column: "balance_after") == -400)
        #expect(entry["operator"] == "alice")
        #expect(entry["reason"] == "chargeback")

        let audit = try books.audit()
        #expect(audit.count == 1)
        #expect(audit.first?.action == "refund")
        #expect(audit.first?.operatorName == "alice")
        #expect(audit.first?.databaseUser == (try books.sessionUser()))
        #expect(audit.first?.reason == "chargeback")
        #expect(audit.first?.outcome == "refunded")
        #expect(audit.first?.entryIDs == "{\(try entry.decode(Int64.self, column: "id"))}")
        #expect(audit.first?.argument("flow_no") == "2000000123")

        // Negative after a refund: debits wait until the balance is positive again.
        #expect(try books.debit(key: "spend-2", userID: "u1", amount: 1) == "insufficient_funds")
        #expect(try books.balance("u1") == -400)
        // And the books still balance: a refund may take a balance below zero.
        let check = try books.psql.run("check.sql")
        #expect(check.status == 0, "\(check)")
    }

    /// Under WALLET_REFUND_DEBT=floor (as the service wrote it to the
    /// database) the script stops at zero and says what fell short.
    @Test func refundUnderFloorStopsAtZeroAndPrintsTheShortfall() throws {
        let books = try Books()
        try books.connection.query("SELECT wallet.set_refund_debt('floor')")
        #expect(try books.credit(flowNo: "2000000124", userID: "u2", productID: "guodong600") == "credited")
        #expect(try books.debit(key: "spend-f", userID: "u2", amount: 400) == "debited")
        let run = try books.psql.run("refund.sql", ["flow_no": "2000000124", "reason": "chargeback", "operator": "alice"])
        #expect(run.status == 0, "\(run)")
        #expect(run.output.hasPrefix("refunded flowNO 2000000124: 600 coin from user u2, balance 0 (entry "), "\(run)")
        #expect(run.output.hasSuffix("), shortfall 400\n"), "\(run)")
        #expect(try books.balance("u2") == 0)
        let check = try books.psql.run("check.sql")
        #expect(check.status == 0, "\(check)")
    }

    @Test func aSecondRefundSucceedsAndChangesNothing() throws {
        let books = try Books()
        #expect(try books.credit(flowNo: "2000000200", userID: "u2", productID: "guodong1200") == "credited")
        let variables: KeyValuePairs = ["flow_no": "2000000200", "reason": "chargeback", "operator": "alice"]
        let first = try books.psql.run("refund.sql", variables)
        #expect(first.status == 0, "\(first)")
        let entriesBefore = try books.entryCount()
        let balanceBefore = try books.balance("u2")
        #expect(balanceBefore == 0)

        let second = try books.psql.run("refund.sql", variables)
        #expect(second.status == 0, "\(second)")
        #expect(second.output.hasPrefix("already refunded flowNO 2000000200: nothing changed"), "\(second)")
        #expect(second.lineCount == 1, "\(second)")
        #expect(try books.entryCount() == entriesBefore)
        #expect(try books.balance("u2") == balanceBefore)
        let credit = try #require(try books.connection.query("""
            SELECT status, refunded_amount FROM wallet.credits WHERE flow_no = \("2000000200")
            """).single)
        #expect(credit["status"] == "refunded")
        #expect(try credit.decode(Int64.self, column: "refunded_amount") == 1200)

        // The attempt is on record, with no entry of its own.
        let audit = try books.audit()
        #expect(audit.map(\.outcome) == ["refunded", "already_refunded"])
        #expect(audit.last?.entryIDs == "{}")
    }

    @Test func anUnknownFlowNoFailsNamingIt() throws {
        let books = try Books()
        let run = try books.psql.run("refund.sql", ["flow_no": "2000009999", "reason": "chargeback", "operator": "alice"])
        #expect(run.status == 3, "\(run)")
        #expect(run.errors.contains("2000009999"), "\(run)")
        #expect(run.output.isEmpty, "\(run)")
        #expect(try books.entryCount() == 0)
        #expect(try books.audit().isEmpty)
    }

    @Test func aMissingVariableFailsNamingIt() throws {
        let books = try Books()
        #expect(try books.credit(flowNo: "2000000300", userID: "u3", productID: "guodong600") == "credited")
        let run = try books.psql.run("refund.sql", ["flow_no": "2000000300", "reason": "chargeback"])
        #expect(run.status == 3, "\(run)")
        #expect(run.errors.contains("-v operator is required"), "\(run)")
        #expect(try books.balance("u3") == 600)
        #expect(try books.audit().isEmpty)
    }

    // MARK: claim.sql

    @Test func claimCreditsAnUnclaimedPurchaseOnceAndRefusesAnotherPlayersToken() throws {
        let books = try Books()
        try books.connection.query("SELECT wallet.set_account_token_namespace('0d9c8b7a-6f5e-4d3c-9b2a-190817263544')")
        // Two charges that named no player the wallet knew: one with no
        // token, one with zed's (never issued to him yet).
        try books.connection.query("""
            SELECT wallet.keep_unclaimed_purchase('apple', '2000000777', 'guodong600', 1, 'Production', NULL, NULL),
                   wallet.keep_unclaimed_purchase('apple', '2000000778', 'guodong600', 2, 'Production',
                                                  upper(wallet.apple_account_token('zed')), NULL)
            """)
        let run = try books.psql.run("claim.sql", ["flow_no": "2000000777", "user_id": "u1", "reason": "ticket 4411",
                                                   "operator": "alice"])
        #expect(run.status == 0, "\(run)")
        #expect(run.output.hasPrefix("credited flowNO 2000000777 to user u1: 600 coin, balance 600 (entry "), "\(run)")
        #expect(try books.balance("u1") == 600)
        let again = try books.psql.run("claim.sql", ["flow_no": "2000000777", "user_id": "u1", "reason": "ticket 4411",
                                                     "operator": "alice"])
        #expect(again.status == 0 && again.output.hasPrefix("already credited flowNO 2000000777 to user u1: 600 coin"),
                "\(again)")
        #expect(try books.balance("u1") == 600)
        let audit = try books.audit()
        #expect(audit.map(\.action) == ["claim", "claim"] && Set(audit.map(\.outcome)) == ["credited", "already_credited"])
        #expect(audit.allSatisfy { $0.operatorName == "alice" && $0.reason == "ticket 4411" })

        // zed's purchase is not u1's to claim; it is zed's.
        let refused = try books.psql.run("claim.sql", ["flow_no": "2000000778", "user_id": "u1", "reason": "ticket 4412",
                                                       "operator": "alice"])
        #expect(refused.status == 3 && refused.errors.contains("another player's account token"), "\(refused)")
        #expect(try books.balance("u1") == 600 && books.audit().count == 2)
        let zed = try books.psql.run("claim.sql", ["flow_no": "2000000778", "user_id": "zed", "reason": "ticket 4412",
                                                   "operator": "alice"])
        #expect(zed.status == 0 && zed.output.hasPrefix("credited flowNO 2000000778 to user zed: 1200 coin"), "\(zed)")
        #expect(try books.connection.query("SELECT count(*) FROM wallet.unclaimed_purchases")[0].decode(Int64.self, at: 0) == 0)
        // A flowNO never seen is refused, naming it.
        let unknown = try books.psql.run("claim.sql", ["flow_no": "2000000999", "user_id": "u1", "reason": "x",
                                                       "operator": "alice"])
        #expect(unknown.status == 3 && unknown.errors.contains("2000000999"), "\(unknown)")
        #expect(try books.psql.run("check.sql").status == 0)
    }

    // MARK: grant.sql and revoke.sql

    @Test func grantAppliesOnceAndRevokeStopsAtZeroUnlessAllowed() throws {
        let books = try Books()
        let grant: KeyValuePairs = [
            "user_id": "u7", "amount": "100", "currency": "coin", "reason": "outage compensation", "operator": "alice",
        ]
        let granted = try books.psql.run("grant.sql", grant)
        #expect(granted.status == 0, "\(granted)")
        #expect(granted.output.hasPrefix("granted 100 coin to user u7, balance 100 (entry "), "\(granted)")
        #expect(granted.lineCount == 1, "\(granted)")
        #expect(try books.balance("u7") == 100)

        // The same line again: applied once.
        let again = try books.psql.run("grant.sql", grant)
        #expect(again.status == 0, "\(again)")
        #expect(again.output.hasPrefix("already applied: grant grant:"), "\(again)")
        #expect(try books.balance("u7") == 100)
        #expect(try books.entryCount() == 1)

        let zero = try books.psql.run("grant.sql", [
            "user_id": "u7", "amount": "0", "currency": "coin", "reason": "nothing", "operator": "alice",
        ])
        #expect(zero.status == 3, "\(zero)")
        #expect(try books.entryCount() == 1)

        // Below zero is refused without allow_negative, and nothing is written.
        let revoke: KeyValuePairs = [
            "user_id": "u7", "amount": "150", "currency": "coin", "reason": "fraud", "operator": "bob",
        ]
        let auditBefore = try books.audit().count
        let refused = try books.psql.run("revoke.sql", revoke)
        #expect(refused.status == 3, "\(refused)")
        #expect(refused.errors.contains("would leave a balance of -50"), "\(refused)")
        #expect(try books.balance("u7") == 100)
        #expect(try books.entryCount() == 1)
        #expect(try books.audit().count == auditBefore)

        let allowed = try books.psql.run("revoke.sql", [
            "user_id": "u7", "amount": "150", "currency": "coin", "reason": "fraud", "operator": "bob",
            "allow_negative": "true",
        ])
        #expect(allowed.status == 0, "\(allowed)")
        #expect(allowed.output.hasPrefix("revoked 150 coin from user u7, balance -50 (entry "), "\(allowed)")
        #expect(try books.balance("u7") == -50)
        let entry = try #require(try books.connection.query("""
            SELECT amount, metadata ->> 'operator' AS operator, metadata ->> 'reason' AS reason,
                   metadata ->> 'allow_negative' AS allow_negative
            FROM wallet.entries WHERE user_id = \("u7") AND kind = 'revoke'
            """).single)
        #expect(try entry.decode(Int64.self, column: "amount") == -150)
        #expect(entry["operator"] == "bob")
        #expect(entry["reason"] == "fraud")
        #expect(entry["allow_negative"] == "true")

        let check = try books.psql.run("check.sql")
        #expect(check.status == 0, "\(check)")
        #expect(check.output == "ok: every invariant holds\n", "\(check)")

        let audit = try books.audit()
        #expect(audit.map(\.action) == ["grant", "grant", "revoke"])
        #expect(audit.map(\.outcome) == ["granted", "already_applied", "revoked"])
        #expect(audit.last?.operatorName == "bob")
        #expect(audit.last?.argument("allow_negative") == "true")
    }

    @Test func valuesAreQuotedNeverSpliced() throws {
        let books = try Books()
        let hostile = "it's'); DROP TABLE wallet.entries; --"
        let run = try books.psql.run("grant.sql", [
            "user_id": "u8", "amount": "5", "currency": "coin", "reason": hostile, "operator": "o'brien",
        ])
        #expect(run.status == 0, "\(run)")
        let entry = try #require(try books.connection.query("""
            SELECT metadata ->> 'reason' AS reason, metadata ->> 'operator' AS operator
            FROM wallet.entries WHERE user_id = \("u8")
            """).single)
        #expect(entry["reason"] == hostile)
        #expect(entry["operator"] == "o'brien")
        #expect(try books.audit().first?.reason == hostile)

        let notANumber = try books.psql.run("grant.sql", [
            "user_id": "u8", "amount": "1; DELETE FROM wallet.wallets", "currency": "coin", "reason": "x",
            "operator": "alice",
        ])
        #expect(notANumber.status == 3, "\(notANumber)")
        #expect(try books.balance("u8") == 5)
    }

    @Test func aReferenceNamesOneGrant() throws {
        let books = try Books()
        let first = try books.psql.run("grant.sql", [
            "user_id": "u9", "amount": "5", "currency": "coin", "reason": "ticket", "operator": "alice",
            "reference": "T-1",
        ])
        #expect(first.status == 0, "\(first)")
        #expect(first.output.contains("reference T-1)"), "\(first)")

        // A retry by someone else, for the same amount, is the same grant.
        let retry = try books.psql.run("grant.sql", [
            "user_id": "u9", "amount": "5", "currency": "coin", "reason": "ticket, again", "operator": "bob",
            "reference": "T-1",
        ])
        #expect(retry.status == 0, "\(retry)")
        #expect(retry.output.hasPrefix("already applied: grant T-1 to user u9"), "\(retry)")

        // The same reference for another amount is a mistake, not a retry.
        let reused = try books.psql.run("grant.sql", [
            "user_id": "u9", "amount": "500", "currency": "coin", "reason": "ticket", "operator": "alice",
            "reference": "T-1",
        ])
        #expect(reused.status == 3, "\(reused)")
        #expect(reused.errors.contains("reference T-1 was already used"), "\(reused)")
        #expect(try books.balance("u9") == 5)
        #expect(try books.entryCount() == 1)
    }

    // MARK: product.sql

    @Test func aProductChangeLeavesPastCreditsAlone() throws {
        let books = try Books()
        #expect(try books.credit(flowNo: "2000000400", userID: "u4", productID: "guodong600") == "credited")

        let run = try books.psql.run("product.sql", [
            "product_id": "guodong600", "amount": "700", "currency": "coin", "operator": "alice",
            "reason": "price change",
        ])
        #expect(run.status == 0, "\(run)")
        #expect(run.output == "updated product guodong600: 700 coin, active, Google Play guodong600\n", "\(run)")

        #expect(try books.creditedAmount("2000000400") == 600)
        #expect(try books.connection.query("""
            SELECT e.amount FROM wallet.entries e JOIN wallet.credits c ON c.entry_id = e.id
            WHERE c.flow_no = \("2000000400")
            """)[0].decode(Int64.self, at: 0) == 600)

        #expect(try books.credit(flowNo: "2000000401", userID: "u4", productID: "guodong600") == "credited")
        #expect(try books.creditedAmount("2000000401") == 700)
        #expect(try books.balance("u4") == 1300)

        let audit = try #require(try books.audit().single)
        #expect(audit.action == "product")
        #expect(audit.operatorName == "alice")
        #expect(audit.reason == "price change")
        #expect(audit.outcome == "updated")
        #expect(audit.argument("amount") == "700")
    }

    @Test func aPriceChangeKeepsAProductOffSale() throws {
        let books = try Books()
        let off = try books.psql.run("product.sql", [
            "product_id": "guodong1200", "amount": "1200", "currency": "coin", "active": "false",
        ])
        #expect(off.output == "updated product guodong1200: 1200 coin, inactive, Google Play guodong1200\n", "\(off)")

        let repriced = try books.psql.run("product.sql", ["product_id": "guodong1200", "amount": "1300", "currency": "coin"])
        #expect(repriced.status == 0, "\(repriced)")
        #expect(repriced.output == "updated product guodong1200: 1300 coin, inactive, Google Play guodong1200\n", "\(repriced)")
        #expect(try books.credit(flowNo: "2000000500", userID: "u5", productID: "guodong1200") == "unknown_product")

        let on = try books.psql.run("product.sql", [
            "product_id": "guodong1200", "amount": "1300", "currency": "coin", "active": "true",
        ])
        #expect(on.output == "updated product guodong1200: 1300 coin, active, Google Play guodong1200\n", "\(on)")
        #expect(try books.credit(flowNo: "2000000500", userID: "u5", productID: "guodong1200") == "credited")

        let created = try books.psql.run("product.sql", ["product_id": "guodong9000", "amount": "9000", "currency": "coin"])
        #expect(created.output == "created product guodong9000: 9000 coin, active, Google Play guodong9000\n", "\(created)")
    }

    @Test func aProductNamesItsGooglePlayIdAndKeepsIt() throws {
        let books = try Books()
        let named = try books.psql.run("product.sql", [
            "product_id": "guodong600", "amount": "600", "currency": "coin", "google_product_id": "coins_600",
        ])
        #expect(named.output == "updated product guodong600: 600 coin, active, Google Play coins_600\n", "\(named)")
        // A later change without it keeps it; an empty one sets it back.
        let repriced = try books.psql.run("product.sql", ["product_id": "guodong600", "amount": "650", "currency": "coin"])
        #expect(repriced.output == "updated product guodong600: 650 coin, active, Google Play coins_600\n", "\(repriced)")
        let reset = try books.psql.run("product.sql", [
            "product_id": "guodong600", "amount": "650", "currency": "coin", "google_product_id": "",
        ])
        #expect(reset.output == "updated product guodong600: 650 coin, active, Google Play guodong600\n", "\(reset)")
        for bad in ["Coins_600", "_coins", "coins-600", String(repeating: "c", count: 129)] {
            let refused = try books.psql.run("product.sql", [
                "product_id": "guodong600", "amount": "650", "currency": "coin", "google_product_id": bad,
            ])
            #expect(refused.status != 0, "\(bad): \(refused)")
        }
        #expect(try books.audit().last?.argument("google_product_id") == "guodong600")
    }

    /// A product's bonus is set, kept by later changes that name none,
    /// checked, and removed with 0; a currency is made paid by its flag.
    @Test func aProductCarriesABonusAndACurrencyItsPaidFlag() throws {
        let books = try Books()
        let gem = try books.psql.run("currency.sql", ["code": "gem", "name": "Gems", "paid": "true"])
        #expect(gem.output == "created currency gem: Gems, paid\n", "\(gem)")
        let kept = try books.psql.run("currency.sql", ["code": "gem", "name": "Gems"])
        #expect(kept.output == "unchanged currency gem: Gems, paid\n", "\(kept)")
        let set = try books.psql.run("product.sql", [
            "product_id": "guodong5000", "amount": "5000", "currency": "coin", "bonus_amount": "500",
            "bonus_expires_in_days": "30",
        ])
        #expect(set.output == "updated product guodong5000: 5000 coin, active, Google Play guodong5000, bonus 500 coin for 30 days\n",
                "\(set)")
        let repriced = try books.psql.run("product.sql", ["product_id": "guodong5000", "amount": "5500", "currency": "coin"])
        #expect(repriced.output.hasSuffix(", bonus 500 coin for 30 days\n"), "\(repriced)")
        let gems = try books.psql.run("product.sql", [
            "product_id": "guodong5000", "amount": "5500", "currency": "coin", "bonus_amount": "50", "bonus_currency": "gem",
        ])
        #expect(gems.output.hasSuffix(", bonus 50 gem never expiring\n"), "\(gems)")
        let refusals = [
            try books.psql.run("product.sql", ["product_id": "guodong5000", "amount": "5500", "currency": "coin",
                                               "bonus_amount": "-1"]),
            try books.psql.run("product.sql", ["product_id": "guodong5000", "amount": "5500", "currency": "coin",
                                               "bonus_currency": "gem"]),
            try books.psql.run("product.sql", ["product_id": "guodong5000", "amount": "5500", "currency": "coin",
                                               "bonus_amount": "5", "bonus_currency": "silver"]),
            try books.psql.run("product.sql", ["product_id": "guodong5000", "amount": "5500", "currency": "coin",
                                               "bonus_amount": "5", "bonus_expires_in_days": "0"]),
        ]
        for refused in refusals {
            #expect(refused.status != 0, "\(refused)")
        }
        let removed = try books.psql.run("product.sql", [
            "product_id": "guodong5000", "amount": "5000", "currency": "coin", "bonus_amount": "0",
        ])
        #expect(removed.output == "updated product guodong5000: 5000 coin, active, Google Play guodong5000\n", "\(removed)")
        // The credit after it brings no bonus.
        #expect(try books.credit(flowNo: "bn-1", userID: "bn", productID: "guodong5000") == "credited")
        #expect(try books.balance("bn") == 5_000)
    }

    /// A Google Play purchase buys one amount: a Google Play id names one
    /// active product at most (WL009), whether it is named or is the
    /// product's own id.
    @Test func aGooglePlayIdNamesOneActiveProduct() throws {
        let books = try Books()
        let taken = try books.psql.run("product.sql", [
            "product_id": "guodong5000", "amount": "5000", "currency": "coin", "google_product_id": "guodong600",
        ])
        #expect(taken.status == 3, "\(taken)")
        #expect(taken.errors.contains("Google Play product guodong600 already buys the active product guodong600"), "\(taken)")
        #expect(try books.audit().isEmpty, "a refused change changes nothing")
        #expect(try books.connection.query("""
            SELECT google_product_id FROM wallet.products WHERE product_id = 'guodong5000'
            """)[0]["google_product_id"] == nil)

        let named = try books.psql.run("product.sql", [
            "product_id": "guodong600", "amount": "600", "currency": "coin", "google_product_id": "coins_600",
        ])
        #expect(named.status == 0, "\(named)")
        let second = try books.psql.run("product.sql", [
            "product_id": "guodong1200", "amount": "1200", "currency": "coin", "google_product_id": "coins_600",
        ])
        #expect(second.status == 3, "\(second)")
        // Off sale, the id is free for another; back on sale, it is taken.
        let off = try books.psql.run("product.sql", [
            "product_id": "guodong600", "amount": "600", "currency": "coin", "active": "false",
        ])
        #expect(off.status == 0, "\(off)")
        let moved = try books.psql.run("product.sql", [
            "product_id": "guodong1200", "amount": "1200", "currency": "coin", "google_product_id": "coins_600",
        ])
        #expect(moved.output == "updated product guodong1200: 1200 coin, active, Google Play coins_600\n", "\(moved)")
        let back = try books.psql.run("product.sql", [
            "product_id": "guodong600", "amount": "600", "currency": "coin", "active": "true",
        ])
        #expect(back.status == 3, "\(back)")
        #expect(back.errors.contains("already buys the active product guodong1200"), "\(back)")
    }

    /// Sixteen sessions give sixteen new products one Google Play id at
    /// once: one succeeds, the others are refused with WL009.
    @Test func productsTakingOneGooglePlayIdAtOnceCannotAllSucceed() throws {
        let options = try TestDatabase.make()
        let outcomes = Locked<[String]>([])
        #expect(runOnThreads(16) { index in
            let outcome: String
            do {
                let connection = try Connection(options: options)
                defer { connection.close() }
                _ = try connection.query("""
                    SELECT * FROM wallet.upsert_product(\("race\(index)"), 100, 'coin', TRUE, 'tests', NULL, 'shared_sku')
                    """)
                outcome = "ok"
            } catch let error as PostgresError {
                outcome = error.sqlState?.code ?? "\(error)"
            } catch {
                outcome = "\(error)"
            }
            outcomes.withLock { $0.append(outcome) }
        })
        #expect(outcomes.withLock { $0.sorted() } == Array(repeating: "WL009", count: 15) + ["ok"])
        let connection = try Connection(options: options)
        defer { connection.close() }
        #expect(try connection.query("""
            SELECT count(*) FROM wallet.products WHERE active AND google_product_id = 'shared_sku'
            """)[0].decode(Int.self, at: 0) == 1)
    }

    @Test func aProductChangeWithoutAnOperatorIsAuditedUnderTheSessionUser() throws {
        let books = try Books()
        let run = try books.psql.run("product.sql", ["product_id": "guodong2400", "amount": "2400", "currency": "coin"])
        #expect(run.status == 0, "\(run)")
        let sessionUser = try books.sessionUser()
        if ProcessInfo.processInfo.environment["WALLET_TEST_DATABASE_URL"] == nil {
            // The harness's own cluster connects as its superuser.
            #expect(sessionUser == "postgres")
        }
        let audit = try #require(try books.audit().single)
        #expect(audit.action == "product")
        #expect(audit.operatorName == sessionUser)
        #expect(audit.databaseUser == sessionUser)
        #expect(audit.reason == nil)
        #expect(audit.outcome == "created")
    }

    // MARK: events.sql

    @Test func eventsListsAPlayersChangesNewestFirstAndOnlyReads() throws {
        let books = try Books()
        #expect(try books.credit(flowNo: "2000000700", userID: "ev", productID: "guodong600") == "credited")
        #expect(try books.debit(key: "d-1", userID: "ev", amount: 700) == "insufficient_funds")
        #expect(try books.debit(key: "d-2", userID: "ev", amount: 100) == "debited")
        try books.refund("2000000700")
        #expect(try books.credit(flowNo: "2000000701", userID: "other", productID: "guodong600") == "credited")
        let before = try books.contents()
        let listed = try books.psql.run("events.sql", ["user_id": "ev"], arguments: ["--csv"])
        #expect(listed.status == 0, "\(listed)")
        let lines = listed.output.split(separator: "\n").map(String.init)
        #expect(lines.first == "id,type,currency,amount,balance_after,held,available,entry_id,hold_id,flow_no,created_at")
        // A refused debit changes nothing, so it is no event.
        #expect(lines.dropFirst().map { $0.split(separator: ",", omittingEmptySubsequences: false)[1] }
                == ["balance.negative", "credit.refunded", "debit.created", "credit.created"], "\(listed)")
        #expect(lines[2].contains(",credit.refunded,coin,-600,-100,0,-100,"), "\(listed)")
        let one = try books.psql.run("events.sql", ["user_id": "ev", "type": "debit.created", "limit": "5"],
                                     arguments: ["--csv"])
        #expect(one.output.split(separator: "\n").count == 2, "\(one)")
        let missing = try books.psql.run("events.sql")
        #expect(missing.status == 3 && missing.errors.contains("user_id"), "\(missing)")
        #expect(try books.contents() == before)
    }

    // MARK: check.sql

    @Test func checkPassesOnCleanBooksAndFailsOnACorruptedBalance() throws {
        let books = try Books()
        #expect(try books.credit(flowNo: "2000000600", userID: "u6", productID: "guodong600") == "credited")
        let clean = try books.psql.run("check.sql")
        #expect(clean.status == 0, "\(clean)")
        #expect(clean.output == "ok: every invariant holds\n", "\(clean)")

        // Only a superuser's hand gets here: the functions never write a
        // balance without its entry.
        try books.connection.query("UPDATE wallet.wallets SET balance = balance + 1 WHERE user_id = \("u6")")
        let corrupted = try books.psql.run("check.sql")
        #expect(corrupted.status == 3, "\(corrupted)")
        // The books, the wallet's last event and its lots disagree with it.
        let event = try books.connection.query("SELECT max(id) FROM wallet.events WHERE user_id = 'u6'")[0]
            .decode(Int64.self, at: 0)
        #expect(corrupted.output == """
            violation balance_matches_ledger u6/coin: balance 601, ledger sum 600
            violation events_end_at_wallet u6/coin: balance 601 and held 0, last event \(event) says 600 and 0
            violation lots_hold_balance u6/coin: balance 601, lots hold 600
            FAILED: 3 invariant violation(s)

            """, "\(corrupted)")
        #expect(corrupted.errors.contains("wallet invariants violated: 3 violation(s)"), "\(corrupted)")
    }

    // MARK: report.sql

    @Test func reportSumsCreditsRefundsAndDebitsPerProductAndDay() throws {
        let books = try Books()
        // One transaction, so every entry has the same time and falls on the
        // same day, even at midnight.
        try books.connection.execute("BEGIN")
        #expect(try books.credit(flowNo: "2000000700", userID: "u10", productID: "guodong600") == "credited")
        #expect(try books.credit(flowNo: "2000000701", userID: "u10", productID: "guodong600") == "credited")
        #expect(try books.credit(flowNo: "2000000702", userID: "u11", productID: "guodong1200") == "credited")
        #expect(try books.debit(key: "spend-1", userID: "u10", amount: 100) == "debited")
        try books.connection.query("SELECT wallet.refund_credit(\("2000000701"), 'chargeback', 'alice')")
        let today = try books.connection.query("SELECT (now() AT TIME ZONE 'UTC')::date::text")[0]
            .decode(String.self, at: 0)
        try books.connection.execute("COMMIT")

        let run = try books.psql.run("report.sql", arguments: ["--csv"])
        #expect(run.status == 0, "\(run)")
        #expect(run.output.split(separator: "\n").map(String.init) == [
            "day,product_id,currency,credits,credited,refunds,refunded,debits,debited,net",
            "\(today),(debits),coin,0,0,0,0,1,100,-100",
            "\(today),guodong1200,coin,1,1200,0,0,0,0,1200",
            "\(today),guodong600,coin,2,1200,1,600,0,0,600",
        ], "\(run)")

        let sameDay = try books.psql.run("report.sql", ["since": today], arguments: ["--csv"])
        #expect(sameDay.output == run.output, "\(sameDay)")
        let later = try books.psql.run("report.sql", ["since": "2999-01-01"], arguments: ["--csv"])
        #expect(later.status == 0, "\(later)")
        #expect(later.lineCount == 1, "\(later)")
    }

    // MARK: breakage.sql

    @Test func breakageSumsTheCoinsThatExpiredPerMonth() throws {
        let books = try Books()
        for (user, amount) in [("b1", Int64(300)), ("b2", Int64(200))] {
            try books.connection.query("""
                SELECT wallet.grant_coins(\(user), \(amount), 'coin', 'weekly prize', 'alice', p_expires_in_days => 7)
                """)
        }
        try books.connection.query("SELECT wallet.grant_coins('b1', 50, 'coin', 'kept', 'alice')")
        // b1 spends 100 (from the coins that expire first); a week later, as
        // far as the lots and their wallets know, the rest expires.
        #expect(try books.debit(key: "spend-b1", userID: "b1", amount: 100) == "debited")
        try books.connection.execute("UPDATE wallet.lots SET expires_at = now() - interval '1 second' WHERE expires_at IS NOT NULL")
        try books.connection.execute("""
            UPDATE wallet.wallets SET next_expiry = now() - interval '1 second' WHERE user_id IN ('b1', 'b2')
            """)
        while try books.connection.query("SELECT wallet.expire_lots()")[0].decode(Int64.self, at: 0) > 0 {}
        let month = try books.connection.query("SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM')")[0]
            .decode(String.self, at: 0)

        let run = try books.psql.run("breakage.sql", arguments: ["--csv"])
        #expect(run.status == 0, "\(run)")
        // b1's 300 less the 100 spent, and b2's 200.
        #expect(run.output.split(separator: "\n").map(String.init) == [
            "month,currency,expired,entries,players",
            "\(month),coin,400,2,2",
        ], "\(run)")
        #expect(try books.balance("b1") == 50)
        let later = try books.psql.run("breakage.sql", ["since": "2999-01-01"], arguments: ["--csv"])
        #expect(later.status == 0, "\(later)")
        #expect(later.lineCount == 1, "\(later)")
        let check = try books.psql.run("check.sql")
        #expect(check.status == 0, "\(check)")
    }

    // MARK: paid-balance.sql

    /// Unused paid coins at past instants, replayed from the ledger, equal
    /// what the lots held at each of those instants (read then), though the
    /// books moved on after each.
    @Test func paidBalanceReplaysTheLedgerToPastInstants() throws {
        let books = try Books()
        /// The instant now, once the last change committed, and the paid
        /// coins the lots hold at it.
        func snapshot() throws -> (instant: String, line: String) {
            Thread.sleep(forTimeInterval: 0.05)
            let row = try books.connection.query("""
                SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'),
                       'coin,' || coalesce(sum(l.remaining), 0) || ',' || count(DISTINCT l.user_id) FILTER (WHERE l.remaining > 0)
                FROM wallet.lots l WHERE l.paid AND l.currency = 'coin'
                """)[0]
            Thread.sleep(forTimeInterval: 0.05)
            return (try row.decode(String.self, at: 0), try row.decode(String.self, at: 1))
        }
        let before = try snapshot()
        #expect(try books.credit(flowNo: "pb-1", userID: "p1", productID: "guodong600") == "credited")
        #expect(try books.credit(flowNo: "pb-2", userID: "p2", productID: "guodong1200") == "credited")
        let first = try snapshot()
        #expect(try books.debit(key: "pb-d1", userID: "p1", amount: 100) == "debited")
        try books.connection.query("SELECT wallet.grant_coins('p2', 500, 'coin', 'prize', 'alice')")
        // The grant's 500 free coins go first, then 200 paid.
        #expect(try books.debit(key: "pb-d2", userID: "p2", amount: 700) == "debited")
        let second = try snapshot()
        // The refund takes p2's 1,000 paid coins left (and owes 200).
        try books.connection.query("SELECT * FROM wallet.refund_credit('pb-2', 'chargeback', 'alice')")
        #expect(try books.credit(flowNo: "pb-3", userID: "p3", productID: "guodong5000") == "credited")
        let third = try snapshot()
        #expect(try books.debit(key: "pb-d3", userID: "p3", amount: 1_000) == "debited")

        #expect(before.line == "coin,0,0")
        #expect(first.line == "coin,1800,2")
        #expect(second.line == "coin,1500,2")
        #expect(third.line == "coin,5500,2")
        for point in [before, first, second, third] {
            let run = try books.psql.run("paid-balance.sql", ["as_of": point.instant], arguments: ["--csv"])
            #expect(run.status == 0, "\(run)")
            #expect(run.output.split(separator: "\n").map(String.init) == ["currency,paid,wallets", point.line],
                    "as of \(point.instant): \(run)")
        }
        // A bare date is the end of that day, in `tz`: today's, in UTC, is now.
        let today = try books.connection.query("SELECT (now() AT TIME ZONE 'UTC')::date::text")[0].decode(String.self, at: 0)
        let now = try books.psql.run("paid-balance.sql", ["as_of": today, "tz": "UTC"], arguments: ["--csv"])
        #expect(now.output.split(separator: "\n").map(String.init) == ["currency,paid,wallets", "coin,4500,2"], "\(now)")
        let missing = try books.psql.run("paid-balance.sql")
        #expect(missing.status != 0)
        #expect(missing.errors.contains("-v as_of is required"), "\(missing)")
    }

    // MARK: holds.sql

    @Test func holdsListsActiveHoldsAndReleasesOneAudited() throws {
        let books = try Books()
        try books.connection.query("SELECT wallet.grant_coins('hu', 500, 'coin', 'setup', 'alice')")
        for (key, amount) in [("a", 100), ("b", 150)] {
            // A hold as the service places one: kind, client, key, request hash and id, any client, then
            // the wallet, amount, reason, metadata and expiry (no hold id).
            try books.connection.query("""
                SELECT outcome FROM wallet.hold_many(ARRAY[ROW('place', 'game-server', \(key), '\\x01', 'rq', FALSE, 'hu',
                                                               'coin', \(amount)::bigint, 'match entry', NULL, 300,
                                                               NULL)::wallet.hold_request])
                """)
        }
        let listed = try books.psql.run("holds.sql", [:], arguments: ["--csv"])
        #expect(listed.status == 0, "\(listed)")
        let lines = listed.output.split(separator: "\n").map(String.init)
        #expect(lines.first == "hold_id,client,user_id,currency,amount,reason,created_at,expires_at")
        #expect(lines.count == 3, "\(listed)")
        #expect(lines.dropFirst().allSatisfy { $0.contains(",game-server,hu,coin,") })

        let released = try books.psql.run("holds.sql", ["hold_id": "1", "reason": "match cancelled", "operator": "alice"])
        #expect(released.status == 0, "\(released)")
        #expect(released.output.hasPrefix("released hold 1: 100 coin of user hu are available again"), "\(released)")
        #expect(released.lineCount == 1)
        let again = try books.psql.run("holds.sql", ["hold_id": "1", "reason": "match cancelled", "operator": "alice"])
        #expect(again.output.hasPrefix("hold 1 was already released: nothing changed"), "\(again)")
        let audit = try books.audit()
        #expect(audit.map(\.action) == ["grant", "release_hold", "release_hold"])
        #expect(audit.last?.reason == "match cancelled")
        #expect(audit.last?.argument("hold_id") == "1")
        #expect(try books.connection.query("SELECT held FROM wallet.wallets WHERE user_id = 'hu'")[0]
            .decode(Int64.self, at: 0) == 150)
        let afterList = try books.psql.run("holds.sql", ["user_id": "hu"], arguments: ["--csv"])
        #expect(afterList.output.split(separator: "\n").count == 2, "\(afterList)")

        let missing = try books.psql.run("holds.sql", ["hold_id": "99", "reason": "x", "operator": "alice"])
        #expect(missing.status == 3)
        let noReason = try books.psql.run("holds.sql", ["hold_id": "2", "operator": "alice"])
        #expect(noReason.status == 3)
        #expect(noReason.errors.contains("reason"), "\(noReason)")
        #expect(try books.psql.run("check.sql").status == 0)
    }

    // MARK: Google Play credits

    @Test func theScriptsWorkForAGoogleCreditRefundedInPart() throws {
        let books = try Books()
        // A purchase of 3 units credited from Google Play, then 2 of them voided.
        #expect(try books.connection.query("""
            SELECT outcome FROM wallet.credit_many(ARRAY[
                ROW('app', 'GPA.77-1', 'g1', 'guodong600', 3, NULL, 'googleplay', 'Production',
                    'tok-77')::wallet.credit_operation])
            """)[0]["outcome"] == "credited")
        #expect(try books.connection.query("""
            SELECT outcome FROM wallet.apply_googleplay_voids('GPA.77-1', 'tok-77',
                '[{"voided_at_ms": 1764700000000, "refund_type": 2, "voided_quantity": 2, "source": "sweep"}]')
            """)[0]["outcome"] == "refunded")
        #expect(try books.balance("g1") == 600)
        let partial = try books.psql.run("check.sql")
        #expect(partial.status == 0, "\(partial)")

        // An operator refunds the rest with the usual script.
        let run = try books.psql.run("refund.sql", ["flow_no": "GPA.77-1", "reason": "fraud", "operator": "alice"])
        #expect(run.status == 0, "\(run)")
        #expect(run.output.hasPrefix("refunded flowNO GPA.77-1: 600 coin from user g1, balance 0 (entry "), "\(run)")
        let credit = try #require(try books.connection.query("""
            SELECT status, refunded_by, refunded_amount::text AS refunded FROM wallet.credits WHERE flow_no = 'GPA.77-1'
            """).single)
        #expect(credit["status"] == "refunded")
        #expect(credit["refunded_by"] == "admin")
        #expect(credit["refunded"] == "1800")
        // Google's later void of everything changes nothing more.
        #expect(try books.connection.query("""
            SELECT outcome FROM wallet.apply_googleplay_voids('GPA.77-1', 'tok-77',
                '[{"voided_at_ms": 1764800000000, "refund_type": 1, "source": "push"}]')
            """)[0]["outcome"] == "already_refunded")
        let check = try books.psql.run("check.sql")
        #expect(check.status == 0, "\(check)")
        // refunds.sql counts both refunds, whichever store the purchase came from.
        let report = try books.psql.run("refunds.sql", ["days": "30"], arguments: ["--csv"])
        #expect(report.output.split(separator: "\n").map(String.init).contains("g1,coin,2,1800,1,0,0"), "\(report)")
    }

    // MARK: refunds.sql

    @Test func refundsListsNegativeBalancesFirstThenTheMostRefunded() throws {
        let books = try Books()
        // Larger refunds, but left negative by less: first, as ordering by
        // refunded coins comes before ordering by balance.
        #expect(try books.credit(flowNo: "2000000900", userID: "neg-y", productID: "guodong5000") == "credited")
        #expect(try books.debit(key: "spend-y", userID: "neg-y", amount: 100) == "debited")
        try books.refund("2000000900")
        #expect(try books.credit(flowNo: "2000000910", userID: "neg-x", productID: "guodong600") == "credited")
        #expect(try books.debit(key: "spend-x", userID: "neg-x", amount: 500) == "debited")
        try books.refund("2000000910")
        // The most coins refunded, but not negative: after both.
        #expect(try books.credit(flowNo: "2000000920", userID: "big", productID: "guodong5000") == "credited")
        #expect(try books.credit(flowNo: "2000000921", userID: "big", productID: "guodong1200") == "credited")
        try books.refund("2000000920")
        try books.refund("2000000921")
        // 1200 coins each: two refunds before one, then by user.
        #expect(try books.credit(flowNo: "2000000930", userID: "two", productID: "guodong600") == "credited")
        #expect(try books.credit(flowNo: "2000000931", userID: "two", productID: "guodong600") == "credited")
        #expect(try books.credit(flowNo: "2000000932", userID: "two", productID: "guodong1200") == "credited")
        try books.refund("2000000930")
        try books.refund("2000000931")
        #expect(try books.credit(flowNo: "2000000940", userID: "one", productID: "guodong1200") == "credited")
        #expect(try books.credit(flowNo: "2000000941", userID: "one", productID: "guodong600") == "credited")
        try books.refund("2000000940")
        #expect(try books.credit(flowNo: "2000000950", userID: "also", productID: "guodong1200") == "credited")
        try books.refund("2000000950")
        // Another currency of the same user is a line of its own.
        try books.connection.query("SELECT wallet.upsert_currency('gem', 'Gems')")
        try books.connection.query("SELECT wallet.upsert_product('gem100', 100, 'gem')")
        #expect(try books.credit(flowNo: "2000000942", userID: "one", productID: "gem100") == "credited")
        try books.refund("2000000942")
        // No refund, so not listed: a plain buyer, and a balance made
        // negative by a revoke.
        #expect(try books.credit(flowNo: "2000000960", userID: "quiet", productID: "guodong600") == "credited")
        try books.connection.query("SELECT wallet.grant_coins('revoked', 100, 'coin', 'test', 'alice')")
        try books.connection.query("SELECT wallet.revoke_coins('revoked', 150, 'coin', 'test', 'alice', TRUE)")

        // Only answers sent count, and only for the user's own purchases.
        try books.consumptionRequest("c-1", flowNo: "2000000900", status: "sent")
        try books.consumptionRequest("c-2", flowNo: "2000000900", status: "pending")
        try books.consumptionRequest("c-3", flowNo: "2000000900", status: "failed")
        try books.consumptionRequest("c-4", flowNo: "2000000920", status: "sent")
        try books.consumptionRequest("c-5", flowNo: "2000000921", status: "sent")
        try books.consumptionRequest("c-6", flowNo: "2000000960", status: "sent")
        try books.consumptionRequest("c-7", flowNo: "2000000941", status: "pending")

        #expect(try books.balance("neg-y") == -100)
        #expect(try books.balance("neg-x") == -500)
        #expect(try books.balance("revoked") == -50)

        let run = try books.psql.run("refunds.sql", ["days": "30"], arguments: ["--csv"])
        #expect(run.status == 0, "\(run)")
        #expect(run.errors.isEmpty, "\(run)")
        #expect(run.output.split(separator: "\n").map(String.init) == [
            "user_id,currency,refunds,refunded,purchases,balance,consumption_answered",
            "neg-y,coin,1,5000,1,-100,1",
            "neg-x,coin,1,600,1,-500,0",
            "big,coin,2,6200,2,0,2",
            "two,coin,2,1200,3,1200,0",
            "also,coin,1,1200,1,0,0",
            "one,coin,1,1200,2,600,0",
            "one,gem,1,100,1,0,0",
        ], "\(run)")

        // Without --csv, the table psql prints, as the header shows.
        let table = try books.psql.run("refunds.sql", ["days": "30"])
        #expect(table.status == 0, "\(table)")
        let lines = table.output.split(separator: "\n").map(String.init)
        #expect(lines.first == " user_id | currency | refunds | refunded | purchases | balance | consumption_answered ",
                "\(table)")
        #expect(lines.dropFirst(2).first == " neg-y   | coin     |       1 |     5000 |         1 |    -100 |                    1",
                "\(table)")
        #expect(lines.last == "(7 rows)", "\(table)")
    }

    @Test func refundsCountOnlyTheWindow() throws {
        let books = try Books()
        #expect(try books.credit(flowNo: "2000001000", userID: "recent", productID: "guodong600") == "credited")
        try books.refund("2000001000")
        try books.consumptionRequest("c-1", flowNo: "2000001000", status: "sent")
        // Bought 45 days ago, refunded 40 days ago, asked about 42 days ago.
        try books.oldRefund(flowNo: "2000001010", userID: "old", boughtDaysAgo: 45, refundedDaysAgo: 40)
        try books.consumptionRequest("c-2", flowNo: "2000001010", status: "sent", sentDaysAgo: 42)
        // The back-dated rows are books as the functions would have written them.
        let check = try books.psql.run("check.sql")
        #expect(check.status == 0, "\(check)")

        let header = "user_id,currency,refunds,refunded,purchases,balance,consumption_answered"
        let recent = "recent,coin,1,600,1,0,1"
        func report(_ days: String?) throws -> [String] {
            let variables: KeyValuePairs<String, String> = if let days { ["days": days] } else { [:] }
            let run = try books.psql.run("refunds.sql", variables, arguments: ["--csv"])
            #expect(run.status == 0, "\(run)")
            return run.output.split(separator: "\n").map(String.init)
        }
        // Left out, the window is 30 days.
        #expect(try report(nil) == [header, recent])
        #expect(try report("30") == [header, recent])
        #expect(try report("1") == [header, recent])
        #expect(try report("39") == [header, recent])
        // The refund is in, the purchase and the answer before it are not.
        #expect(try report("41") == [header, "old,coin,1,600,0,0,0", recent])
        #expect(try report("43") == [header, "old,coin,1,600,0,0,1", recent])
        #expect(try report("50") == [header, "old,coin,1,600,1,0,1", recent])
        // Further back than PostgreSQL's calendar: all time.
        #expect(try report("99999999") == [header, "old,coin,1,600,1,0,1", recent])
    }

    @Test func refundsRefusesADaysThatIsNotAPositiveInteger() throws {
        let books = try Books()
        #expect(try books.credit(flowNo: "2000001100", userID: "u12", productID: "guodong600") == "credited")
        try books.refund("2000001100")
        let cases: [(days: String, error: String)] = [
            ("0", "days must be a positive integer, got 0"),
            ("-3", "days must be a positive integer, got -3"),
            ("abc", "invalid input syntax for type integer: \"abc\""),
            ("1.5", "invalid input syntax for type integer: \"1.5\""),
            ("", "invalid input syntax for type integer: \"\""),
            ("2147483648", "value \"2147483648\" is out of range for type integer"),
            ("1; DELETE FROM wallet.entries", "invalid input syntax for type integer"),
        ]
        for (days, error) in cases {
            let run = try books.psql.run("refunds.sql", ["days": days])
            #expect(run.status == 3, "days=\(days): \(run)")
            #expect(run.errors.contains("ERROR:  \(error)"), "days=\(days): \(run)")
            #expect(run.output.isEmpty, "days=\(days): \(run)")
        }
        #expect(try books.entryCount() == 2)
        let good = try books.psql.run("refunds.sql", ["days": "7"], arguments: ["--csv"])
        #expect(good.status == 0, "\(good)")
        #expect(good.output.hasSuffix("\nu12,coin,1,600,1,0,0\n"), "\(good)")
    }

    @Test func refundsOnlyReads() throws {
        let books = try Books()
        #expect(try books.credit(flowNo: "2000001200", userID: "u13", productID: "guodong1200") == "credited")
        #expect(try books.debit(key: "spend-1", userID: "u13", amount: 1000) == "debited")
        try books.refund("2000001200")
        try books.consumptionRequest("c-1", flowNo: "2000001200", status: "sent")
        try books.consumptionRequest("c-2", flowNo: "2000001200", status: "pending")
        let before = try books.contents()

        // New sessions of this database may not write: a script that
        // wrote would fail here, as a grant does.
        let database = try books.connection.query("SELECT current_database()::text")[0].decode(String.self, at: 0)
        try books.connection.execute("""
            ALTER DATABASE "\(unsafeSQL: database)" SET default_transaction_read_only = on
            """)
        let grant = try books.psql.run("grant.sql", [
            "user_id": "u13", "amount": "1", "currency": "coin", "reason": "x", "operator": "alice",
        ])
        #expect(grant.status == 3, "\(grant)")
        #expect(grant.errors.contains("read-only transaction"), "\(grant)")

        for days in ["30", "99999999"] {
            let run = try books.psql.run("refunds.sql", ["days": days], arguments: ["--csv"])
            #expect(run.status == 0, "\(run)")
            #expect(run.output.hasSuffix("\nu13,coin,1,1200,1,-1000,1\n"), "\(run)")
        }
        #expect(try books.contents() == before)
    }

    // MARK: The scripts themselves

    /// On a database whose default is `synchronous_commit = off` (the test
    /// clusters' own), every write the scripts make still runs with it on:
    /// a trigger on every ledger table records the setting each writing
    /// statement ran with.
    @Test func theScriptsCommitWithSynchronousCommitOn() throws {
        let books = try Books()
        #expect(try books.connection.query("SELECT reset_val FROM pg_settings WHERE name = 'synchronous_commit'")[0]
            .decode(String.self, at: 0) == "off")
        #expect(try books.credit(flowNo: "3000000001", userID: "d1", productID: "guodong600") == "credited")
        try books.connection.executeScript(unsafeSQL: WriteObserver.sql)
        let runs = [
            try books.psql.run("grant.sql", ["user_id": "d1", "amount": "50", "currency": "coin", "reason": "gift",
                                             "operator": "alice"]),
            try books.psql.run("revoke.sql", ["user_id": "d1", "amount": "20", "currency": "coin", "reason": "oops",
                                              "operator": "alice"]),
            try books.psql.run("refund.sql", ["flow_no": "3000000001", "reason": "chargeback", "operator": "alice"]),
            try books.psql.run("product.sql", ["product_id": "durable100", "amount": "100", "currency": "coin",
                                               "operator": "alice", "reason": "new bundle"]),
        ]
        for run in runs { #expect(run.status == 0, "\(run)") }
        let observed = try books.connection.query("SELECT table_name, synchronous_commit FROM public.observed_writes")
            .map { [try $0.decode(String.self, at: 0), try $0.decode(String.self, at: 1)] }
        #expect(Set(observed.map { $0[0] }).isSuperset(of: ["entries", "wallets", "credits", "admin_audit", "products"]),
                "\(observed)")
        #expect(observed.allSatisfy { $0[1] == "on" }, "\(observed)")
    }

    @Test func everyScriptIsDocumentedAndCallsOnlyFunctions() throws {
        let directory = PSQL.packageRoot.appendingPathComponent("Scripts/admin")
        let readme = try String(contentsOf: directory.appendingPathComponent("README.md"), encoding: .utf8)
        #expect(readme.hasPrefix("## Admin scripts\n"))
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
            .filter { $0.hasSuffix(".sql") }.sorted()
        #expect(names == ["breakage.sql", "check.sql", "claim.sql", "currency.sql", "events.sql", "grant.sql", "holds.sql",
                          "paid-balance.sql", "product.sql", "refund.sql", "refunds.sql", "report.sql", "revoke.sql"])
        let variables: [String: [String]] = [
            "breakage.sql": ["since"],
            "check.sql": [],
            "claim.sql": ["flow_no", "user_id", "reason", "operator"],
            "currency.sql": ["code", "name", "operator", "reason"],
            "events.sql": ["user_id"],
            "holds.sql": [],
            "paid-balance.sql": ["as_of", "tz"],
            "grant.sql": ["user_id", "amount", "currency", "reason", "operator"],
            "product.sql": ["product_id", "amount", "currency", "operator", "reason"],
            "refund.sql": ["flow_no", "reason", "operator"],
            "refunds.sql": ["days"],
            "report.sql": ["since"],
            "revoke.sql": ["user_id", "amount", "currency", "reason", "operator"],
        ]
        let tables = ["wallets", "entries", "credits", "products", "admin_audit", "idempotency_keys",
                      "revoked_flow_nos", "appstore_refund_states", "api_keys", "appstore_notifications",
                      "outbox", "holds"]
        for name in names {
            let text = try String(contentsOf: directory.appendingPathComponent(name), encoding: .utf8)
            let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            let header = lines.prefix { $0.hasPrefix("--") }
            let run = try #require(header.first { $0.contains("psql -X \"$WALLET_DATABASE_URL\" -v ON_ERROR_STOP=1") },
                                   "\(name) shows no psql line")
            #expect(run.hasSuffix("-f Scripts/admin/\(name)"), "\(name): \(run)")
            // The README shows the same line, under the script's own heading.
            let line = run.drop { $0 == "-" || $0 == " " }
            #expect(readme.contains("\n\(line)\n"), "README.md lacks the line for \(name)")
            #expect(readme.contains("\n### `\(name)`"), "README.md has no section for \(name)")
            for variable in variables[name] ?? [] {
                #expect(run.contains(" -v \(variable)="), "\(name) header lacks -v \(variable)")
            }
            // Every script starts from the shared preamble, which stops at
            // the first error and commits as the service does.
            #expect(["\\ir lib/preamble.sql", "\\ir lib/one_line.sql"]
                .contains(lines.first { !$0.hasPrefix("--") && !$0.isEmpty }), "\(name)")
            let code = lines.filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("--") }.joined(separator: "\n")
            for table in tables {
                #expect(!code.contains("wallet.\(table)"), "\(name) touches wallet.\(table)")
            }
        }
    }
}

// MARK: - Fixtures

/// A fresh database and the ways the tests read and write it.
private struct Books {
    let connection: Connection
    let psql: PSQL

    init() throws {
        let options = try TestDatabase.make()
        connection = try Connection(options: options)
        psql = try PSQL(database: options)
    }

    /// Credits one bundle the way the service does; returns the outcome.
    func credit(flowNo: String, userID: String, productID: String) throws -> String {
        try connection.query("""
            SELECT outcome FROM wallet.credit_many(ARRAY[
                ROW('test', \(flowNo), \(userID), \(productID), 1, NULL, 'caller', NULL, NULL)::wallet.credit_operation])
            """)[0].decode(String.self, at: 0)
    }

    /// Spends coins the way the service does; returns the outcome.
    func debit(key: String, userID: String, amount: Int64) throws -> String {
        try connection.query("""
            SELECT outcome FROM wallet.debit_many(ARRAY[
                ROW('test', \(key), \(ByteA(Array(key.utf8))), \(userID), 'coin', \(amount), NULL, NULL, 'request')
                ::wallet.debit_request])
            """)[0].decode(String.self, at: 0)
    }

    /// Refunds a credit in full as an operator would.
    func refund(_ flowNo: String) throws {
        try connection.query("SELECT wallet.refund_credit(\(flowNo), 'chargeback', 'alice')")
    }

    /// A purchase and its refund from days ago. Entries are append-only, so
    /// an old refund cannot be aged afterwards: it is written here as the
    /// functions would have written it then, in a fresh wallet.
    func oldRefund(flowNo: String, userID: String, boughtDaysAgo: Int, refundedDaysAgo: Int) throws {
        try connection.execute("BEGIN")
        try connection.query("INSERT INTO wallet.wallets (user_id, currency) VALUES (\(userID), 'coin')")
        let entryID = try connection.query("""
            INSERT INTO wallet.entries (user_id, currency, amount, balance_after, kind, reference, client, created_at)
            VALUES (\(userID), 'coin', 600, 600, 'credit', \(flowNo), 'test',
                    now() - make_interval(days => \(boughtDaysAgo)))
            RETURNING id
            """)[0].decode(Int64.self, at: 0)
        try connection.query("""
            INSERT INTO wallet.credits (flow_no, user_id, product_id, quantity, currency, amount, status, source,
                                        client, entry_id, refunded_by, refunded_amount, created_at, updated_at)
            VALUES (\(flowNo), \(userID), 'guodong600', 1, 'coin', 600, 'refunded', 'caller', 'test', \(entryID),
                    'admin', 600, now() - make_interval(days => \(boughtDaysAgo)),
                    now() - make_interval(days => \(refundedDaysAgo)))
            """)
        let refundID = try connection.query("""
            INSERT INTO wallet.entries (user_id, currency, amount, balance_after, kind, reference, client, created_at)
            VALUES (\(userID), 'coin', -600, 0, 'refund', \(flowNo), 'admin',
                    now() - make_interval(days => \(refundedDaysAgo)))
            RETURNING id
            """)[0].decode(Int64.self, at: 0)
        // And the events those entries are told by.
        try connection.query("""
            INSERT INTO wallet.events (id, type, user_id, currency, amount, balance_after, held, available, entry_id,
                                       flow_no, created_at)
            VALUES (nextval('wallet.events_id_seq'), 'credit.created', \(userID), 'coin', 600, 600, 0, 600, \(entryID),
                    \(flowNo), now() - make_interval(days => \(boughtDaysAgo))),
                   (nextval('wallet.events_id_seq'), 'credit.refunded', \(userID), 'coin', -600, 0, 0, 0, \(refundID),
                    \(flowNo), now() - make_interval(days => \(refundedDaysAgo)))
            """)
        // And the purchase's lot, made by the credit and emptied by the refund.
        let lotID = try connection.query("""
            INSERT INTO wallet.lots (user_id, currency, source, paid, amount, remaining, entry_id, flow_no, created_at)
            VALUES (\(userID), 'coin', 'purchase', TRUE, 600, 0, \(entryID), \(flowNo),
                    now() - make_interval(days => \(boughtDaysAgo)))
            RETURNING id
            """)[0].decode(Int64.self, at: 0)
        try connection.query("""
            INSERT INTO wallet.entry_lots (entry_id, lot_id, amount)
            VALUES (\(entryID), \(lotID), 600), (\(refundID), \(lotID), -600)
            """)
        try connection.execute("COMMIT")
    }

    /// A CONSUMPTION_REQUEST notification about a flowNO and the service's
    /// answer to it in `status`; a sent one was sent `sentDaysAgo` days ago.
    func consumptionRequest(_ uuid: String, flowNo: String, status: String, sentDaysAgo: Int = 0) throws {
        try connection.query("""
            INSERT INTO wallet.appstore_notifications
                (notification_uuid, notification_type, flow_no, environment, signed_date, outcome, payload)
            VALUES (\(uuid), 'CONSUMPTION_REQUEST', \(flowNo), 'Sandbox', now(), 'recorded', '{}')
            """)
        try connection.query("""
            INSERT INTO wallet.outbox (kind, key, flow_no, environment, status, window_ends_at, sent_at)
            VALUES ('appstore_consumption', \(uuid), \(flowNo), 'Sandbox', \(status), now() + INTERVAL '12 hours',
                    CASE WHEN \(status)::text = 'sent' THEN now() - make_interval(days => \(sentDaysAgo)) END)
            """)
    }

    /// Every row of the tables the books are kept in, as text.
    func contents() throws -> [String] {
        let tables = ["wallets", "entries", "credits", "products", "admin_audit", "idempotency_keys",
                      "appstore_notifications", "outbox"]
        return try tables.map { table in
            try connection.query("""
                SELECT \(table)::text || ': ' || coalesce(string_agg(t::text, E'\\n' ORDER BY t::text), '')
                FROM wallet.\(unsafeSQL: table) t
                """)[0].decode(String.self, at: 0)
        }
    }

    func balance(_ userID: String) throws -> Int64 {
        try connection.query("""
            SELECT balance FROM wallet.wallets WHERE user_id = \(userID) AND currency = 'coin'
            """)[0].decode(Int64.self, at: 0)
    }

    func creditedAmount(_ flowNo: String) throws -> Int64 {
        try connection.query("SELECT amount FROM wallet.credits WHERE flow_no = \(flowNo)")[0].decode(Int64.self, at: 0)
    }

    func entryCount() throws -> Int {
        try connection.query("SELECT count(*) FROM wallet.entries")[0].decode(Int.self, at: 0)
    }

    func sessionUser() throws -> String {
        try connection.query("SELECT session_user::text")[0].decode(String.self, at: 0)
    }

    struct AuditRow {
        var action: String
        var operatorName: String
        var databaseUser: String
        var reason: String?
        var outcome: String
        var entryIDs: String
        var arguments: [String: String?]

        func argument(_ name: String) -> String? { arguments[name] ?? nil }
    }

    /// The audit trail, oldest first; argument values as text.
    func audit() throws -> [AuditRow] {
        let rows = try connection.query("""
            SELECT id, action, operator, db_user, reason, outcome, entry_ids::text FROM wallet.admin_audit ORDER BY id
            """)
        return try rows.map { row in
            let id = try row.decode(Int64.self, column: "id")
            var arguments: [String: String?] = [:]
            for argument in try connection.query("""
                SELECT key, value FROM wallet.admin_audit a, jsonb_each_text(a.arguments) WHERE a.id = \(id)
                """) {
                arguments[try argument.decode(String.self, at: 0)] = try argument.decodeIfPresent(String.self, at: 1)
            }
            return AuditRow(action: try row.decode(String.self, column: "action"),
                            operatorName: try row.decode(String.self, column: "operator"),
                            databaseUser: try row.decode(String.self, column: "db_user"),
                            reason: try row.decodeIfPresent(String.self, column: "reason"),
                            outcome: try row.decode(String.self, column: "outcome"),
                            entryIDs: try row.decode(String.self, column: "entry_ids"),
                            arguments: arguments)
        }
    }
}

extension Array {
    /// The only element; more than one is a test failure, none gives nil.
    fileprivate var single: Element? {
        #expect(count <= 1, "expected at most one element, got \(count)")
        return first
    }
}

/// Runs an admin script with the real `psql`, as its header says to.
struct PSQL {
    enum Failure: Error, CustomStringConvertible {
        case notInstalled
        case timedOut(script: String, seconds: Int)

        var description: String {
            switch self {
            case .notInstalled: "psql was found neither on PATH nor under /usr/lib/postgresql/*/bin"
            case .timedOut(let script, let seconds): "psql -f \(script) did not finish within \(seconds) s"
            }
        }
    }

    struct Run: CustomStringConvertible {
        var status: Int32
        var output: String
        var errors: String

        var lineCount: Int { output.split(separator: "\n").count }
        var description: String { "exit \(status)\nstdout:\n\(output)\nstderr:\n\(errors)" }
    }

    /// The package root, where the documented lines are run from.
    static let packageRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static let deadlineSeconds = 60

    let executable: String
    let conninfo: String

    init(database options: Connection.Options) throws {
        executable = try Self.find()
        conninfo = Self.conninfo(for: options)
    }

    /// Runs `psql -X <conninfo> -v ON_ERROR_STOP=1 [arguments] -v name=value … -f Scripts/admin/<script>`.
    func run(_ script: String, _ variables: KeyValuePairs<String, String> = [:],
             arguments: [String] = []) throws -> Run {
        var argv = ["-X", conninfo, "-v", "ON_ERROR_STOP=1"] + arguments
        for (name, value) in variables { argv += ["-v", "\(name)=\(value)"] }
        argv += ["-f", "Scripts/admin/\(script)"]

        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = argv
        process.currentDirectoryURL = Self.packageRoot
        process.standardInput = FileHandle.nullDevice
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors

        // Both pipes are drained while psql runs, so a long answer cannot
        // fill one and stall it.
        let collected = Collected()
        let readers = DispatchGroup()
        for (index, pipe) in [output, errors].enumerated() {
            let handle = pipe.fileHandleForReading
            DispatchQueue.global().async(group: readers) {
                let data = handle.readDataToEndOfFile()
                collected.store(data, at: index)
            }
        }
        let exited = DispatchSemaphore(value: 0)
        process.terminationHandler = { _ in exited.signal() }
        try process.run()

        if exited.wait(timeout: .now() + Double(Self.deadlineSeconds)) == .timedOut {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            _ = readers.wait(timeout: .now() + 5)
            throw Failure.timedOut(script: script, seconds: Self.deadlineSeconds)
        }
        process.waitUntilExit()
        guard readers.wait(timeout: .now() + 10) == .success else {
            throw Failure.timedOut(script: script, seconds: Self.deadlineSeconds)
        }
        return Run(status: process.terminationStatus, output: collected.text(at: 0), errors: collected.text(at: 1))
    }

    private static func find() throws -> String {
        let manager = FileManager.default
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        var candidates = path.split(separator: ":").map { "\($0)/psql" }
        candidates.append("/usr/bin/psql")
        let versions = ((try? manager.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? [])
            .compactMap(Int.init).sorted(by: >)
        candidates += versions.map { "/usr/lib/postgresql/\($0)/bin/psql" }
        guard let found = candidates.first(where: manager.isExecutableFile(atPath:)) else { throw Failure.notInstalled }
        return found
    }

    /// The test database as one string psql takes in place of a database
    /// name: the harness's conninfo with the database appended (a later
    /// keyword wins), or the URL with its path replaced.
    private static func conninfo(for options: Connection.Options) -> String {
        guard let database = options.database else { return options.conninfo }
        if options.conninfo.contains("://"), var url = URLComponents(string: options.conninfo) {
            url.path = "/" + database
            if let string = url.string { return string }
        }
        return options.conninfo + " dbname=" + database
    }
}

/// What the pipe readers collected, handed from their threads to the test's.
private final class Collected: Sendable {
    private let data = Locked<[Data]>([Data(), Data()])

    func store(_ bytes: Data, at index: Int) {
        data.withLock { $0[index] = bytes }
    }

    func text(at index: Int) -> String {
        String(decoding: data.withLock { $0[index] }, as: UTF8.self)
    }
}
