import Foundation
import JSON
import Postgres
import ServiceTestSupport
import Testing
import TestSupport
import WalletCore
import WalletService

/// A bought bundle with a bonus, end to end through the real server: the
/// bonus spent first, the refund taking back its own lot, and what the
/// refund could not take becoming debt (WALLET_REFUND_DEBT=allow) or a
/// recorded shortfall (floor).
@Suite(.timeLimit(.minutes(3)))
struct EconomyTests {
    /// guodong5000 adds 500 bonus coins expiring in 30 days.
    static func bundleWithBonus(_ service: TestService) throws {
        let row = try Connection(options: service.database).query("""
            SELECT bonus_amount::text, bonus_currency, bonus_expires_in_days::text
            FROM wallet.upsert_product('guodong5000', 5000, 'coin', p_bonus_amount => 500, p_bonus_expires_in_days => 30)
            """)[0]
        #expect(row[0] == "500" && row[1] == "coin" && row[2] == "30")
    }

    /// Buys the bundle and spends 600: the 500 bonus coins go first, then
    /// 100 paid ones.
    static func buyAndSpend(_ service: TestService, _ user: String) throws {
        let credit = try service.credit(userID: user, flowNo: "\(user)-5000", productID: "guodong5000")
        #expect(credit.status == 201, "\(credit.text)")
        #expect(try credit.json()["balance"]?["balance"] == 5_500)
        #expect(try credit.json()["credit"]?["amount"] == 5_000)
        #expect(try LotBalanceTests.shown(service, user) == "5500 0 5500 5000 500 0 500")
        #expect(try service.count("""
            SELECT count(*) FROM wallet.events WHERE type = 'bonus.created' AND flow_no = '\(user)-5000' AND amount = 500
            """) == 1)

        #expect(try service.debit(userID: user, amount: 600, idempotencyKey: "\(user)-sword").status == 201)
        #expect(try LotBalanceTests.shown(service, user) == "4900 0 4900 4900 0 0 none")
        let taken = try Connection(options: service.database).query("""
            SELECT l.source, -t.amount FROM wallet.entry_lots t
            JOIN wallet.lots l ON l.id = t.lot_id JOIN wallet.entries e ON e.id = t.entry_id
            WHERE e.reference = \(user + "-sword") ORDER BY l.source
            """).map { "\($0[0] ?? "") \($0[1] ?? "")" }
        #expect(taken == ["bonus 500", "purchase 100"])
    }

    @Test func underAllowTheRefundLeavesDebtThatTheNextGrantRepays() throws {
        let service = try TestService()
        defer { service.stop() }
        try Self.bundleWithBonus(service)
        try Self.buyAndSpend(service, "eve")

        // Its own lot's 4,900 back, then 100 of debt.
        let refund = try Connection(options: service.database).query(
            "SELECT amount::text, balance::text, shortfall::text FROM wallet.refund_credit('eve-5000', 'chargeback', 'ops')")[0]
        #expect(refund[0] == "5000" && refund[1] == "-100" && refund[2] == "0")
        #expect(try LotBalanceTests.shown(service, "eve") == "-100 0 -100 0 0 100 none")
        #expect(try service.debit(userID: "eve", amount: 1, idempotencyKey: "eve-potion").status == 409)

        let grant = try service.grant(userID: "eve", amount: 300, idempotencyKey: "eve-apology")
        #expect(grant.status == 201, "\(grant.text)")
        #expect(try LotBalanceTests.shown(service, "eve") == "200 0 200 0 200 0 none")
        #expect(try service.count("SELECT count(*) FROM wallet.refund_shortfalls") == 0)
        #expect(try service.violations() == [])
    }

    @Test func underFloorTheRefundStopsAtZeroAndRecordsTheShortfall() throws {
        let service = try TestService { $0.refundDebt = .floor }
        defer { service.stop() }
        let connection = try Connection(options: service.database)
        #expect(try connection.query("SELECT refund_debt FROM wallet.lot_settings")[0][0] == "floor")
        try Self.bundleWithBonus(service)
        try Self.buyAndSpend(service, "fay")

        let refund = try connection.query(
            "SELECT amount::text, balance::text, shortfall::text FROM wallet.refund_credit('fay-5000', 'chargeback', 'ops')")[0]
        #expect(refund[0] == "5000" && refund[1] == "0" && refund[2] == "100")
        #expect(try LotBalanceTests.shown(service, "fay") == "0 0 0 0 0 0 none")
        let shortfall = try connection.query(
            "SELECT flow_no, user_id, currency, amount::text FROM wallet.refund_shortfalls")
        #expect(shortfall.count == 1)
        #expect(shortfall.first.map { [$0[0], $0[1], $0[2], $0[3]] } == ["fay-5000", "fay", "coin", "100"])
        // The credit is refunded in full: the store took back 5,000.
        #expect(try connection.query("SELECT status, refunded_amount::text FROM wallet.credits")
            .map { "\($0[0] ?? "") \($0[1] ?? "")" } == ["refunded 5000"])

        // Nothing is owed, so the grant is all there.
        #expect(try service.grant(userID: "fay", amount: 300, idempotencyKey: "fay-apology").status == 201)
        #expect(try LotBalanceTests.shown(service, "fay") == "300 0 300 0 300 0 none")
        #expect(try service.violations() == [])
    }

    /// A bonus in another currency goes to the player's wallet of that
    /// currency, made on first use; the credit's answer shows its own.
    @Test func aBonusInAnotherCurrencyLandsInThatWallet() throws {
        let service = try TestService()
        defer { service.stop() }
        let connection = try Connection(options: service.database)
        try connection.query("SELECT * FROM wallet.upsert_currency('gem', 'Gems')")
        try connection.query("""
            SELECT * FROM wallet.upsert_product('guodong1200', 1200, 'coin', p_bonus_amount => 50, p_bonus_currency => 'gem')
            """)
        let credit = try service.credit(userID: "ian", flowNo: "ian-1", productID: "guodong1200", quantity: 2)
        #expect(credit.status == 201, "\(credit.text)")
        #expect(try credit.json()["balance"]?["balance"] == 2_400)
        #expect(try service.balance(of: "ian") == 2_400)
        #expect(try service.balance(of: "ian", currency: "gem") == 100)
        #expect(try connection.query("""
            SELECT source || ' ' || currency || ' ' || remaining || ' ' || (expires_at IS NULL)::text
            FROM wallet.lots WHERE user_id = 'ian' ORDER BY id
            """).map { $0[0] ?? "" } == ["purchase coin 2400 true", "bonus gem 100 true"])
        // A replay adds nothing.
        #expect(try service.credit(userID: "ian", flowNo: "ian-1", productID: "guodong1200", quantity: 2).status == 200)
        #expect(try service.balance(of: "ian", currency: "gem") == 100)
        #expect(try service.violations() == [])
    }

    /// Under floor, a refund of a wallet that holds nothing takes nothing,
    /// and Apple's reversal of it gives nothing back; both stay in the
    /// credit's history, and the books balance.
    @Test func underFloorARefundOfAnEmptyWalletAndItsReversalMoveNothing() throws {
        let service = try TestService { $0.refundDebt = .floor }
        defer { service.stop() }
        let connection = try Connection(options: service.database)
        #expect(try service.credit(userID: "gus", flowNo: "gus-600").status == 201)
        #expect(try service.debit(userID: "gus", amount: 600, idempotencyKey: "gus-all").status == 201)
        let refund = try connection.query("""
            SELECT amount::text, balance::text, shortfall::text
            FROM wallet.refund_credit('gus-600', 'App Store refund', 'apple', NULL, 'apple', 'appstore')
            """)[0]
        #expect(refund[0] == "600" && refund[1] == "0" && refund[2] == "600")
        let reversal = try connection.query("SELECT outcome, amount::text FROM wallet.reverse_refund('gus-600')")[0]
        #expect(reversal[0] == "reversed" && reversal[1] == "0")
        #expect(try connection.query("SELECT kind, amount::text FROM wallet.entries WHERE reference = 'gus-600' ORDER BY id")
            .map { "\($0[0] ?? "") \($0[1] ?? "")" } == ["credit 600", "refund 0", "refund_reversal 0"])
        #expect(try service.balance(of: "gus") == 0)
        #expect(try service.violations() == [])
    }

    /// A reversal gives back exactly what its refund took, lot by lot:
    /// here 4,900 to the purchase lot and, the debt having been repaid by
    /// a grant since, 100 as a new lot of the purchase.
    @Test func aReversalRestoresWhatItsRefundTookLotByLot() throws {
        let service = try TestService()
        defer { service.stop() }
        let connection = try Connection(options: service.database)
        try Self.bundleWithBonus(service)
        try Self.buyAndSpend(service, "hal")
        try connection.query("""
            SELECT * FROM wallet.refund_credit('hal-5000', 'App Store refund', 'apple', NULL, 'apple', 'appstore')
            """)
        #expect(try service.grant(userID: "hal", amount: 300, idempotencyKey: "hal-apology").status == 201)
        let reversal = try connection.query("SELECT outcome, amount::text FROM wallet.reverse_refund('hal-5000')")[0]
        #expect(reversal[0] == "reversed" && reversal[1] == "5000")
        #expect(try LotBalanceTests.shown(service, "hal") == "5200 0 5200 5000 200 0 none")
        #expect(try service.violations() == [])
    }
}
