import Dispatch
import Foundation
import JSON
import Postgres
import ServiceTestSupport
import Synchronization
import Testing
import TestSupport

/// A product that sells more than one currency (1,000 coins and 50 gems a
/// unit), through the real server: each line credited once in its own
/// wallet as paid coins, shown with the credit, and taken back by the
/// purchase's refunds (all of it, or the same share as a Google partial
/// refund) and given back by Apple's reversal.
@Suite(.timeLimit(.minutes(3)))
struct ProductLineTests {
    /// `starter`: 1,000 coins and 50 paid gems a unit.
    static func starterBundle(_ service: TestService) throws {
        let connection = try Connection(options: service.database)
        defer { connection.close() }
        try connection.query("SELECT * FROM wallet.upsert_currency('gem', 'Gems', p_paid => TRUE)")
        let lines = try connection.query("""
            SELECT lines::text FROM wallet.upsert_product('starter', 1000, 'coin', p_lines => '{"gem": 50}')
            """)[0][0]
        #expect(lines == #"{"gem": 50}"#)
    }

    /// The wallet's balance, paid and debt in one currency, as the API shows them.
    static func shown(_ service: TestService, _ user: String, _ currency: String) throws -> String {
        let read = try service.request("GET", "/v1/wallets/\(user)?currency=\(currency)", key: service.gameServerKey)
        guard read.status == 200, case .array(let balances)? = try read.json()["balances"], let first = balances.first else {
            return "\(read.status) \(read.text)"
        }
        return ["balance", "paid", "debt"].map { name in
            if case .number(let text)? = first[name] { return text }
            return "?"
        }.joined(separator: " ")
    }

    /// The credit's lines as `GET /v1/credits/{flow_no}` shows them, each
    /// "currency amount refunded_amount".
    static func lines(_ service: TestService, _ flowNo: String) throws -> [String] {
        let read = try service.request("GET", "/v1/credits/\(flowNo)", key: service.gameServerKey)
        #expect(read.status == 200, "\(read.text)")
        guard case .array(let lines)? = try read.json()["credit"]?["lines"] else { return ["\(read.text)"] }
        return lines.map { line in
            ["currency", "amount", "refunded_amount"].map { name in
                switch line[name] {
                case .string(let text)?, .number(let text)?: text
                default: "?"
                }
            }.joined(separator: " ")
        }
    }

    @Test func eachLineIsCreditedPaidAndARefundAndItsReversalMoveThemAll() throws {
        let service = try TestService()
        defer { service.stop() }
        try Self.starterBundle(service)

        let credit = try service.credit(userID: "ada", flowNo: "ada-1", productID: "starter", quantity: 2)
        #expect(credit.status == 201, "\(credit.text)")
        #expect(try credit.json()["credit"]?["amount"] == 2_000)
        #expect(try credit.json()["balance"]?["balance"] == 2_000)
        #expect(try Self.shown(service, "ada", "coin") == "2000 2000 0")
        #expect(try Self.shown(service, "ada", "gem") == "100 100 0")
        #expect(try Self.lines(service, "ada-1") == ["gem 100 0"])
        #expect(try service.count("""
            SELECT count(*) FROM wallet.events WHERE type = 'credit.created' AND flow_no = 'ada-1'
            """) == 2)

        // A replay credits nothing more.
        let again = try service.credit(userID: "ada", flowNo: "ada-1", productID: "starter", quantity: 2)
        #expect(again.status == 200)
        #expect(try Self.shown(service, "ada", "gem") == "100 100 0")

        // 30 gems spent, then Apple refunds the purchase: every coin and gem
        // it bought goes back, and the 30 gems spent become debt.
        #expect(try service.debit(userID: "ada", amount: 30, idempotencyKey: "ada-shield", currency: "gem").status == 201)
        let connection = try Connection(options: service.database)
        defer { connection.close() }
        let refund = try connection.query("""
            SELECT outcome, amount::text, currency FROM wallet.refund_credit('ada-1', NULL, NULL, p_source => 'apple',
                                                                             p_client => 'appstore')
            """)[0]
        #expect(refund[0] == "refunded" && refund[1] == "2000" && refund[2] == "coin")
        #expect(try Self.shown(service, "ada", "coin") == "0 0 0")
        #expect(try Self.shown(service, "ada", "gem") == "-30 0 30")
        #expect(try Self.lines(service, "ada-1") == ["gem 100 100"])
        // The support console's credit page shows the line and what was taken back.
        let browser = try ConsoleTests.browser(service, key: service.adminKey)
        let page = try ConsoleTests.get(service, "/admin/credits/ada-1", browser)
        #expect(page.status == 200)
        #expect(page.text.contains(#"<dd id="credit-lines">100 gem (refunded 100)</dd>"#), "\(page.text)")
        #expect(try service.count("""
            SELECT count(*) FROM wallet.events WHERE type = 'credit.refunded' AND flow_no = 'ada-1'
            """) == 2)
        #expect(try service.violations() == [])

        // Apple takes the refund back: each currency gets what its refund took.
        let reversal = try connection.query("SELECT outcome, amount::text FROM wallet.reverse_refund('ada-1')")[0]
        #expect(reversal[0] == "reversed" && reversal[1] == "2000")
        #expect(try Self.shown(service, "ada", "coin") == "2000 2000 0")
        #expect(try Self.shown(service, "ada", "gem") == "70 70 0")
        #expect(try Self.lines(service, "ada-1") == ["gem 100 0"])
        #expect(try service.violations() == [])
    }

    @Test func aGooglePartialRefundTakesTheSameShareOfEachLine() throws {
        let service = try TestService()
        defer { service.stop() }
        try Self.starterBundle(service)
        #expect(try service.credit(userID: "bo", flowNo: "bo-1", productID: "starter").status == 201)
        let connection = try Connection(options: service.database)
        defer { connection.close() }

        // A third of the coins refunded: a third of the gems, rounded down.
        try connection.query("SELECT * FROM wallet.refund_credit('bo-1', NULL, NULL, 333, 'google', 'googleplay')")
        #expect(try Self.shown(service, "bo", "coin") == "667 667 0")
        #expect(try Self.shown(service, "bo", "gem") == "34 34 0")
        #expect(try Self.lines(service, "bo-1") == ["gem 50 16"])
        #expect(try service.violations() == [])

        // The rest: everything, whatever the rounding took before.
        try connection.query("SELECT * FROM wallet.refund_credit('bo-1', NULL, NULL, 667, 'google', 'googleplay')")
        #expect(try Self.shown(service, "bo", "coin") == "0 0 0")
        #expect(try Self.shown(service, "bo", "gem") == "0 0 0")
        #expect(try Self.lines(service, "bo-1") == ["gem 50 50"])
        #expect(try service.violations() == [])

        // A tampered line is named by the checks.
        try connection.execute("UPDATE wallet.credit_lines SET refunded_amount = 49 WHERE flow_no = 'bo-1'")
        #expect(try service.violations().contains { $0.hasPrefix("credit_line_matches_ledger bo-1") })
    }

    /// 32 threads credit one flowNO of the bundle and 16 more each their
    /// own, to one player: one credit and one gem line per flowNO.
    @Test func concurrentCreditsOfOneFlowNoCreditEachLineOnce() throws {
        let service = try TestService()
        defer { service.stop() }
        try Self.starterBundle(service)
        let failures = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 48) { index in
            do {
                let flowNo = index < 32 ? "cy-shared" : "cy-\(index)"
                let answer = try service.credit(userID: "cy", flowNo: flowNo, productID: "starter")
                if answer.status != 201 && answer.status != 200 {
                    failures.withLock { $0.append("\(answer.status) \(answer.text)") }
                }
            } catch {
                failures.withLock { $0.append("\(error)") }
            }
        }
        #expect(failures.withLock { $0 } == [])
        #expect(try service.count("SELECT count(*) FROM wallet.credit_lines WHERE flow_no LIKE 'cy-%'") == 17)
        #expect(try service.count("""
            SELECT count(*) FROM wallet.entries WHERE user_id = 'cy' AND kind = 'credit' AND currency = 'gem'
            """) == 17)
        #expect(try Self.shown(service, "cy", "coin") == "17000 17000 0")
        #expect(try Self.shown(service, "cy", "gem") == "850 850 0")
        #expect(try service.violations() == [])
    }

    @Test func theCatalogRefusesALineInTheProductsOwnOrAnUnknownCurrency() throws {
        let service = try TestService()
        defer { service.stop() }
        let connection = try Connection(options: service.database)
        defer { connection.close() }
        func refused(_ sql: String, _ code: String) {
            do {
                try connection.query("\(unsafeSQL: sql)")
                Issue.record("accepted: \(sql)")
            } catch {
                #expect(error.sqlState?.code == code, "\(error)")
            }
        }
        refused(#"SELECT * FROM wallet.upsert_product('p1', 100, 'coin', p_lines => '{"coin": 5}')"#, "WL003")
        refused(#"SELECT * FROM wallet.upsert_product('p1', 100, 'coin', p_lines => '{"silver": 5}')"#, "WL005")
        refused(#"SELECT * FROM wallet.upsert_product('p1', 100, 'coin', p_lines => '{"coin2": 0}')"#, "WL003")
        refused(#"SELECT * FROM wallet.upsert_product('p1', 100, 'coin', p_lines => '[5]')"#, "WL003")
        #expect(try service.count("SELECT count(*) FROM wallet.products WHERE product_id = 'p1'") == 0)
    }
}
