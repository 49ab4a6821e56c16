import Crypto
import Foundation
import HTTPServer
import JSON
import Postgres
import ServiceTestSupport
import Testing
import TestSupport
@testable import WalletCore
@testable import ServiceAPI
@testable import ServiceSupport
@testable import WalletService
@testable import WalletStore

/// A database of the previous release (8947e18: migrations up to 0013 and
/// its function files, kept in `PreviousRelease/functions/`), written by that
/// release's own functions, upgrades in place to this build's schema: what
/// it stored keeps its values, and what it answered is answered again byte
/// for byte.
extension SchemaUpgradeTests {
    @Test func aDatabaseOfReleaseEightNineFourSevenUpgradesInPlaceAndReplaysItsAnswers() throws {
        let options = try TestDatabase.makeEmpty()
        let connection = try Connection(options: options)
        defer { connection.close() }
        try Migrator(files: Schema.migrationFiles.filter { $0.name < "0014" },
                     functionFiles: try PreviousRelease.functionFiles(), logger: logger).migrate(connection: connection)
        let previous = PreviousRelease(connection: connection)
        let answers = try previous.writeEverything()
        let before = try previous.snapshot()

        let applied = try Schema.migrator(logger: logger).migrate(connection: connection)
        #expect(applied.filter { !$0.hasPrefix("functions/") }
            == ["0014_googleplay_hardening.sql", "0015_console_scope_and_refusal_samples.sql",
                "0016_console_cookie_key.sql", "0017_one_posting.sql", "0018_set_based_holds.sql",
                "0019_events.sql", "0020_webhooks.sql", "0021_webhook_batches.sql", "0022_account_tokens.sql",
                "0023_notification_credits.sql", "0024_purchase_claims.sql", "0025_unclaimed_google_purchases.sql",
                "0026_lots.sql", "0027_expiring_lots.sql", "0028_currencies.sql",
                "0029_spending_order.sql", "0030_bonuses_rewards_and_debt.sql", "0031_hold_lists.sql",
                "0032_product_lines.sql", "0033_console_rollups.sql", "0034_check_checkpoints.sql",
                "0035_table_storage.sql"])
        // Every balance, held amount, entry, credit, hold and stored answer is as it was.
        let after = try previous.snapshot()
        for (table, rows) in before {
            #expect(after[table] == rows, "\(table)")
        }
        #expect(try connection.query("SELECT * FROM wallet.check_invariants()").isEmpty)
        // Each balance above zero is now opening lots: paid as far as the
        // wallet's store credits, net of refunds, account for it; free for
        // the rest.
        let opening = try connection.query("""
            SELECT w.user_id || ' ' || w.balance || ' paid ' || coalesce(sum(l.amount) FILTER (WHERE l.paid), 0)
                   || ' free ' || coalesce(sum(l.amount) FILTER (WHERE NOT l.paid), 0)
                   || ' bought ' || (SELECT coalesce(sum(e.amount), 0) FROM wallet.entries e
                                     WHERE e.user_id = w.user_id AND e.kind IN ('credit', 'refund', 'refund_reversal'))
            FROM wallet.wallets w LEFT JOIN wallet.lots l ON l.user_id = w.user_id AND l.entry_id IS NULL
            GROUP BY w.user_id, w.balance ORDER BY w.user_id
            """).map { $0[0] ?? "-" }
        #expect(opening.map { $0.split(separator: " ")[0] } == ["dana", "eve"])
        for line in opening {
            let words = line.split(separator: " ")
            let (balance, paid, free, bought) = (Int(words[1])!, Int(words[3])!, Int(words[5])!, Int(words[7])!)
            #expect(paid == min(max(balance, 0), max(bought, 0)), "\(line)")
            #expect(free == max(balance, 0) - paid, "\(line)")
        }
        #expect(opening.contains { !$0.contains(" paid 0 ") && !$0.contains(" free 0 ") }, "\(opening)")

        // The previous release's instances keep crediting, debiting and
        // applying notifications during the upgrade, with their own calls.
        #expect(try previous.credit("o-9", user: "olga", token: nil) == "credited")
        #expect(try previous.credit("GPA.9", user: "olga", token: "tok-9") == "credited")
        #expect(try connection.query("""
            SELECT outcome FROM wallet.credit_many(ARRAY[
                ROW('app-backend', 'o-10', 'olga', 'guodong600', 1, NULL, 'caller', NULL)::wallet.credit_request])
            """)[0][0] == "credited")
        #expect(try previous.notify("n-9", "REFUND", "o-9", second: 9) == "refunded")
        #expect(try previous.debit("old-instance", "olga", 100, requestID: "rq-old") == "debited")

        // This build answers every stored key as it was first answered.
        let service = try TestService(database: options)
        defer { service.stop() }
        for answer in answers {
            let replay = try service.request("POST", answer.path, key: service.gameServerKey, json: answer.json,
                                             headers: [("Idempotency-Key", answer.key)])
            #expect(replay.status == answer.status, "\(answer.key): \(replay.text)")
            #expect(replay.header("Idempotent-Replayed") == "true", "\(answer.key)")
            #expect(replay.text == answer.body, "\(answer.key)")
        }
        #expect(answers.count == 13)
        #expect(Set(answers.map(\.kind)) == ["debited", "insufficient_funds", "held", "captured", "released",
                                             "hold_not_active", "amount_exceeds_hold"])

        // And carries on: the hold still held is captured through this
        // release's posting, and the one that expired reads as expired.
        let capture = try service.request("POST", "/v1/holds/\(answers.heldID)/capture", key: service.gameServerKey,
                                          json: nil, headers: [("Idempotency-Key", "after-upgrade")])
        #expect(capture.status == 201, "\(capture.text)")
        #expect(try capture.json()["debit"]?["amount"] == 300)
        let expired = try service.request("GET", "/v1/holds/\(answers.expiredID)", key: service.gameServerKey)
        #expect(try expired.json()["hold"]?["status"] == "expired")
        #expect(try service.violations() == [])
    }
}

/// The previous release, at the SQL its service called, for an upgrade test.
struct PreviousRelease {
    let connection: Connection

    /// Its function files, as `PreviousRelease/functions/` keeps them.
    static func functionFiles() throws -> [(name: String, sql: String)] {
        let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("PreviousRelease/functions")
        return try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasSuffix(".sql") }
            .sorted().map { ($0, try String(contentsOf: directory.appendingPathComponent($0), encoding: .utf8)) }
    }

    /// An answer the previous release gave under an idempotency key: the
    /// request, and the status and bytes it answered.
    struct Answer {
        var kind: String
        var key: String
        var path: String
        var json: String?
        var status: Int
        var body: String
    }

    /// Credits, refunds of every kind (Apple's and its reversal, Google's in
    /// part, an admin's), a grant and a revoke, debits, and holds held,
    /// captured, released, expired and refused, each by that release's
    /// functions; returns the answers it gave under idempotency keys.
    func writeEverything() throws -> Answers {
        for (flowNo, product) in [("p-1", "guodong600"), ("p-2", "guodong1200"), ("p-3", "guodong600"),
                                  ("p-4", "guodong600")] {
            #expect(try credit(flowNo, user: "dana", product: product) == "credited")
        }
        #expect(try credit("e-1", user: "eve") == "credited")
        #expect(try credit("GPA.1", user: "dana", quantity: 3, token: "tok-1") == "credited")
        #expect(try notify("n-1", "REFUND", "p-3", second: 1) == "refunded")
        #expect(try notify("n-2", "REFUND_REVERSED", "p-3", second: 2) == "reversed")
        #expect(try notify("n-3", "REFUND", "p-2", second: 3) == "refunded")
        #expect(try connection.query("""
            SELECT outcome FROM wallet.apply_googleplay_voids('GPA.1', 'tok-1',
                '[{"voided_at_ms": 1764700000000, "refund_type": 2, "voided_quantity": 2, "source": "sweep"}]')
            """)[0][0] == "refunded")
        #expect(try connection.query("SELECT outcome FROM wallet.refund_credit('p-4', 'chargeback', 'alice')")[0][0]
            == "refunded")
        try connection.query("SELECT * FROM wallet.grant_coins('dana', 500, 'coin', 'outage', 'alice', 'ticket-1')")
        try connection.query("SELECT * FROM wallet.revoke_coins('dana', 100, 'coin', 'abuse', 'alice', FALSE, 'ticket-2')")

        var answers = Answers()
        answers.add(try debitAnswer("d-1", #"{"user_id":"dana","amount":100,"reason":"sword","metadata":{"level":3}}"#))
        answers.add(try debitAnswer("d-2", #"{"user_id":"dana","amount":999999}"#))
        answers.heldID = try answers.place(holdAnswer("h-1", #"{"user_id":"dana","amount":300,"reason":"match 1"}"#))
        let captured = try answers.place(holdAnswer("h-2", #"{"user_id":"dana","amount":200,"metadata":{"match":2.50}}"#))
        answers.add(try actionAnswer("c-2", .capture, captured, #"{"amount":150}"#))
        let released = try answers.place(holdAnswer("h-3", #"{"user_id":"dana","amount":100}"#))
        answers.add(try actionAnswer("r-3", .release, released, nil))
        _ = try answers.place(holdAnswer("h-5", #"{"user_id":"dana","amount":1000000000}"#))
        answers.add(try actionAnswer("c-3", .capture, released, nil))
        answers.add(try actionAnswer("c-1", .capture, answers.heldID, #"{"amount":301}"#))
        // A capture larger than the balance: eve's credit refunded under her hold.
        let eves = try answers.place(holdAnswer("h-6", #"{"user_id":"eve","amount":600}"#))
        #expect(try connection.query("SELECT outcome FROM wallet.refund_credit('e-1', 'chargeback', 'alice')")[0][0]
            == "refunded")
        answers.add(try actionAnswer("c-6", .capture, eves, nil))
        // One left to expire, and the sweeper of that release expiring it.
        answers.expiredID = try answers.place(holdAnswer("h-4", #"{"user_id":"dana","amount":50,"expires_in_seconds":1}"#))
        #expect(waitFor(seconds: 10) {
            (try? connection.query("SELECT count(*) FROM wallet.holds WHERE expires_at <= now()")[0]
                .decode(Int.self, at: 0)) == 1
        })
        #expect(try connection.query("SELECT wallet.expire_holds(10)")[0][0] == "1")
        return answers
    }

    struct Answers: Sequence {
        var all: [Answer] = []
        var heldID: Int64 = 0
        var expiredID: Int64 = 0
        mutating func add(_ answer: Answer) { all.append(answer) }
        /// Keeps a placement's answer; returns its hold's id.
        mutating func place(_ placed: (answer: Answer, holdID: Int64)) -> Int64 {
            all.append(placed.answer)
            return placed.holdID
        }
        var count: Int { all.count }
        func makeIterator() -> IndexingIterator<[Answer]> { all.makeIterator() }
    }

    /// What upgrading must keep, table by table: each row as text.
    func snapshot() throws -> [String: [String?]] {
        var tables: [String: [String?]] = [:]
        for (table, order) in [("wallets", "user_id, currency"), ("entries", "id"), ("credits", "flow_no"),
                               ("holds", "id"), ("idempotency_keys", "client, key"), ("googleplay_voids", "purchase_token"),
                               ("appstore_refund_states", "flow_no"), ("outbox", "kind, key")] {
            // A wallet's columns as the previous release had them (next_expiry came after).
            let value = table == "wallets" ? "ROW(t.user_id, t.currency, t.balance, t.created_at, t.updated_at, t.held)" : "t"
            tables[table] = try connection.query(PostgresQuery(
                unsafeSQL: "SELECT \(value)::text FROM wallet.\(table) t ORDER BY \(order)")).map { $0[0] }
        }
        #expect(tables["holds"]?.count == 5)
        #expect(tables["idempotency_keys"]?.count == 13)
        return tables
    }

    func credit(_ flowNo: String, user: String, product: String = "guodong600", quantity: Int = 1,
                token: String?) throws -> String? {
        try connection.query("""
            SELECT outcome FROM wallet.credit_many(ARRAY[ROW('app-backend', \(flowNo), \(user), \(product), \(quantity),
                NULL, \(token == nil ? "caller" : "googleplay"), \(token == nil ? nil : "Production"))::wallet.credit_request],
                ARRAY[\(token)::text])
            """)[0][0]
    }

    func credit(_ flowNo: String, user: String, product: String = "guodong600", quantity: Int = 1) throws -> String? {
        try credit(flowNo, user: user, product: product, quantity: quantity, token: nil)
    }

    func notify(_ uuid: String, _ type: String, _ flowNo: String, second: Int) throws -> String? {
        try connection.query("""
            SELECT outcome FROM wallet.apply_appstore_notification(\(uuid), \(type), NULL, 'Production',
                '2026-01-01 00:00:00+00'::timestamptz + make_interval(secs => \(second)), \(flowNo), 'Consumable',
                NULL, NULL, '{}'::jsonb)
            """)[0][0]
    }

    /// A debit as that release's service sent it; returns the outcome.
    func debit(_ key: String, _ user: String, _ amount: Int64, requestID: String) throws -> String? {
        try debit(key, json: #"{"user_id":"\#(user)","amount":\#(amount)}"#, requestID: requestID)
    }

    func debit(_ key: String, json: String, requestID: String) throws -> String? {
        let body = try DebitBody(json: try JSONParser.parse(Array(json.utf8)))
        return try connection.query("""
            SELECT outcome FROM wallet.debit_many(ARRAY[ROW('game-server', \(key), \(ByteA(SHA256.hash(body.canonicalText))),
                \(body.userID.rawValue), \(body.currency.rawValue), \(body.amount.value), \(body.reason),
                \(body.metadataText)::jsonb, \(requestID))::wallet.debit_request])
            """)[0][0]
    }

    /// A debit, and the bytes that release answered it with (its
    /// `ResponseBody.debited`, or its problem for insufficient funds).
    func debitAnswer(_ key: String, _ json: String) throws -> Answer {
        let outcome = try #require(try debit(key, json: json, requestID: "rq-\(key)"))
        let request = try DebitBody(json: try JSONParser.parse(Array(json.utf8)))
        let stored = try connection.query("""
            SELECT entry_id, wallet.rfc3339(created_at), balance, held FROM wallet.idempotency_keys
            WHERE client = 'game-server' AND key = \(key)
            """)[0]
        let balance = try stored.decode(Int64.self, at: 2)
        let held = try stored.decode(Int64.self, at: 3)
        guard outcome == "debited" else {
            return Answer(kind: outcome, key: key, path: "/v1/debits", json: json, status: 409,
                          body: Self.problem(.insufficientFunds(balance: balance, available: balance - held), "rq-\(key)"))
        }
        // ResponseBody.debited's members, in its order, as that release wrote them.
        let entry = try stored.decode(Int64.self, at: 0)
        let user = request.userID.rawValue
        let currency = request.currency.rawValue
        let reason = request.reason.map { #""\#($0)""# } ?? "null"
        let body = #"{"debit":{"id":\#(entry),"user_id":"\#(user)","currency":"\#(currency)","#
            + #""amount":\#(request.amount.value),"reason":\#(reason),"entry_id":\#(entry),"#
            + #""created_at":"\#(try stored.decode(String.self, at: 1))"},"balance":{"user_id":"\#(user)","#
            + #""currency":"\#(currency)","balance":\#(balance),"held":\#(held),"available":\#(balance - held)}}"#
        return Answer(kind: outcome, key: key, path: "/v1/debits", json: json, status: 201, body: body)
    }

    /// A hold placed as that release's service placed it, and its answer.
    func holdAnswer(_ key: String, _ json: String) throws -> (answer: Answer, holdID: Int64) {
        let body = try HoldBody(json: try JSONParser.parse(Array(json.utf8)))
        let row = try connection.query("""
            SELECT outcome, response::text, (response -> 'hold' ->> 'id')::bigint FROM wallet.hold_many(ARRAY[
                ROW('place', 'game-server', \(key), \(ByteA(SHA256.hash(body.canonicalText))), \("rq-" + key), FALSE,
                    \(body.spend.userID.rawValue), \(body.spend.currency.rawValue), \(body.spend.amount.value),
                    \(body.spend.reason), \(body.spend.metadataText)::jsonb, \(body.expiresInSeconds), NULL)::wallet.hold_request])
            """)[0]
        let answer = try Self.answer(row, key: key, path: "/v1/holds", json: json)
        return (answer, try row.decodeIfPresent(Int64.self, at: 2) ?? 0)
    }

    /// A capture or release as that release's service sent it, and its answer.
    func actionAnswer(_ key: String, _ action: HoldAction, _ holdID: Int64, _ json: String?) throws -> Answer {
        let body = try HoldActionBody(json: try JSONParser.parse(Array((json ?? "{}").utf8)), action: action)
        let row = try connection.query("""
            SELECT outcome, response::text FROM wallet.hold_many(ARRAY[
                ROW(\(action), 'game-server', \(key), \(ByteA(SHA256.hash(body.canonicalText(action: action, holdID: holdID)))),
                    \("rq-" + key), FALSE, NULL, NULL, \(body.amount?.value), NULL, NULL, NULL, \(holdID))::wallet.hold_request])
            """)[0]
        return try Self.answer(row, key: key, path: "/v1/holds/\(holdID)/\(action.rawValue)", json: json)
    }

    /// What that release's `holdResponse` sent for a hold operation's row:
    /// the stored JSON without its spaces, or a problem read from it.
    static func answer(_ row: Row, key: String, path: String, json: String?) throws -> Answer {
        let outcome = try row.decode(String.self, at: 0)
        let text = try row.decode(String.self, at: 1)
        let stored = try JSONParser.parse(Array(text.utf8))
        func integer(_ value: JSONValue?) -> Int64 {
            if case .number(let digits)? = value { return Int64(digits) ?? 0 }
            return 0
        }
        func problem(_ error: WalletError, _ status: Int) -> Answer {
            Answer(kind: outcome, key: key, path: path, json: json, status: status, body: Self.problem(error, "rq-\(key)"))
        }
        switch outcome {
        case "held", "captured":
            return Answer(kind: outcome, key: key, path: path, json: json, status: 201,
                          body: String(decoding: JSONText.compact(text), as: UTF8.self))
        case "released":
            return Answer(kind: outcome, key: key, path: path, json: json, status: 200,
                          body: String(decoding: JSONText.compact(text), as: UTF8.self))
        case "insufficient_funds":
            return problem(.insufficientFunds(balance: integer(stored["balance"]), available: integer(stored["available"])), 409)
        case "hold_not_active":
            guard case .string(let name)? = stored["hold"]?["status"], let status = HoldStatus(rawValue: name) else {
                throw UpgradeTestError.unexpected(text)
            }
            return problem(.holdNotActive(status: status), 409)
        case "amount_exceeds_hold":
            return problem(.amountExceedsHold(held: integer(stored["hold"]?["amount"])), 422)
        default:
            throw UpgradeTestError.unexpected(outcome)
        }
    }

    /// A problem's bytes, as the service writes it for a request it names.
    static func problem(_ error: WalletError, _ requestID: String) -> String {
        var problem = error.problem
        problem.instance = requestID
        return String(decoding: Response.problem(problem).body, as: UTF8.self)
    }

    enum UpgradeTestError: Error {
        case unexpected(String)
    }
}
