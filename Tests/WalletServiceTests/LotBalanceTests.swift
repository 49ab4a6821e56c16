import Foundation
import JSON
import Postgres
import ServiceTestSupport
import Testing
import TestSupport
import WalletService

/// What `GET /v1/wallets/{user_id}` shows of a wallet's lots, through the
/// real server: paid and free coins, debt, the next expiry, and coins past
/// their expiry gone from `available` before any sweep.
@Suite(.timeLimit(.minutes(2)))
struct LotBalanceTests {
    /// The one `coin` balance of a wallet read, as "balance held available
    /// paid free debt next_expiry.amount".
    static func shown(_ service: TestService, _ user: String) throws -> String {
        let read = try service.request("GET", "/v1/wallets/\(user)", key: service.gameServerKey)
        #expect(read.status == 200, "\(read.text)")
        guard case .array(let balances)? = try read.json()["balances"], balances.count == 1 else {
            Issue.record("\(read.text)")
            return ""
        }
        let coin = balances[0]
        let fields = ["balance", "held", "available", "paid", "free", "debt"].map { name -> String in
            if case .number(let text)? = coin[name] { return text }
            return "?"
        }
        var next = "?"
        if coin["next_expiry"] == .null { next = "none" }
        if case .number(let text)? = coin["next_expiry"]?["amount"] { next = text }
        return (fields + [next]).joined(separator: " ")
    }

    @Test func aWalletShowsPaidFreeDebtAndItsNextExpiry() throws {
        let service = try TestService()
        defer { service.stop() }
        let connection = try Connection(options: service.database)
        #expect(try service.credit(userID: "kim", flowNo: "k-1").status == 201)
        try connection.query("""
            SELECT * FROM wallet.grant_coins('kim', 500, 'coin', 'weekly prize', 'ops', p_expires_in_days => 30)
            """)
        #expect(try Self.shown(service, "kim") == "1100 0 1100 600 500 0 500")
        let read = try service.request("GET", "/v1/wallets/kim", key: service.gameServerKey)
        guard case .array(let balances)? = try read.json()["balances"], let coin = balances.first,
              case .string(let at)? = coin["next_expiry"]?["at"],
              let when = Date(rfc3339Text: at) else {
            Issue.record("no next_expiry.at in \(read.text)")
            return
        }
        let days = when.timeIntervalSinceNow / 86_400
        #expect(days > 29.9 && days <= 30, "\(at)")

        // Spending takes the coins that expire first, then paid ones.
        #expect(try service.debit(userID: "kim", amount: 700, idempotencyKey: "sword").status == 201)
        #expect(try Self.shown(service, "kim") == "400 0 400 400 0 0 none")

        // Refunding the purchase takes its 400 left and owes 200.
        try connection.query("SELECT * FROM wallet.refund_credit('k-1', 'chargeback', 'ops')")
        #expect(try Self.shown(service, "kim") == "-200 0 -200 0 0 200 none")
        #expect(try service.debit(userID: "kim", amount: 1, idempotencyKey: "potion").status == 409)

        // The next grant repays the debt first.
        try connection.query("SELECT * FROM wallet.grant_coins('kim', 300, 'coin', 'apology', 'ops')")
        #expect(try Self.shown(service, "kim") == "100 0 100 0 100 0 none")
        #expect(try service.violations() == [])
    }

    /// WALLET_SPEND_PAID_FIRST reaches the database at start-up, so the
    /// service's debits (and the admin scripts) spend paid coins first.
    @Test func paidFirstSpendsThePurchaseBeforeTheGrant() throws {
        let service = try TestService { $0.spendPaidFirst = true }
        defer { service.stop() }
        let connection = try Connection(options: service.database)
        #expect(try connection.query("SELECT spend_paid_first::text FROM wallet.lot_settings")[0][0] == "true")
        #expect(try service.credit(userID: "max", flowNo: "m-1").status == 201)
        try connection.query("SELECT * FROM wallet.grant_coins('max', 100, 'coin', 'prize', 'ops')")
        #expect(try service.debit(userID: "max", amount: 650, idempotencyKey: "shield").status == 201)
        #expect(try Self.shown(service, "max") == "50 0 50 0 50 0 none")
        #expect(try service.violations() == [])
    }

    /// `?currency=` reads one currency, which the catalog must have.
    @Test func aBalanceReadNamesOneCurrencyOfTheCatalog() throws {
        let service = try TestService()
        defer { service.stop() }
        #expect(try service.credit(userID: "ola", flowNo: "o-1").status == 201)
        let unknown = try service.request("GET", "/v1/wallets/ola?currency=gem", key: service.gameServerKey)
        #expect(unknown.status == 422)
        #expect(try unknown.json()["code"] == "unknown_currency")
        let malformed = try service.request("GET", "/v1/wallets/ola?currency=Gem!", key: service.gameServerKey)
        #expect(malformed.status == 422)
        #expect(try malformed.json()["code"] == "validation_failed")
        try Connection(options: service.database).query("SELECT wallet.upsert_currency('gem', 'Gems')")
        let gems = try service.request("GET", "/v1/wallets/ola?currency=gem", key: service.gameServerKey)
        #expect(gems.status == 200, "\(gems.text)")
        #expect(try gems.json()["balances"] == .array([.object([
            ("balance", 0), ("currency", "gem"), ("held", 0), ("available", 0), ("paid", 0), ("free", 0), ("debt", 0),
            ("next_expiry", .null)])]))
        let coins = try service.request("GET", "/v1/wallets/ola?currency=coin", key: service.gameServerKey)
        guard case .array(let balances)? = try coins.json()["balances"] else {
            Issue.record("\(coins.text)")
            return
        }
        #expect(balances.map { $0["currency"] } == [.string("coin")])
        #expect(balances.first?["paid"] == 600)
    }

    @Test func coinsPastTheirExpiryAreNotAvailableBeforeAnySweep() throws {
        let service = try TestService()
        defer { service.stop() }
        let connection = try Connection(options: service.database)
        try connection.query("SELECT * FROM wallet.grant_coins('lee', 100, 'coin', 'a', 'ops')")
        try connection.query("SELECT * FROM wallet.grant_coins('lee', 40, 'coin', 'b', 'ops', p_expires_in_days => 1)")
        #expect(try Self.shown(service, "lee") == "140 0 140 0 140 0 40")
        // A day later, as far as the lot and its wallet know.
        try connection.execute("UPDATE wallet.lots SET expires_at = now() - interval '1 second' WHERE expires_at IS NOT NULL")
        try connection.execute("UPDATE wallet.wallets SET next_expiry = now() - interval '1 second' WHERE user_id = 'lee'")
        #expect(try Self.shown(service, "lee") == "140 0 100 0 140 0 none")
        // A debit of the 100 left goes through, and one more coin does not.
        #expect(try service.debit(userID: "lee", amount: 100, idempotencyKey: "all").status == 201)
        #expect(try service.debit(userID: "lee", amount: 1, idempotencyKey: "more").status == 409)
        #expect(try Self.shown(service, "lee") == "0 0 0 0 0 0 none")
        #expect(try connection.query("SELECT -sum(amount) FROM wallet.entries WHERE kind = 'expire'")[0][0] == "40")
        #expect(try service.violations() == [])
    }
}
