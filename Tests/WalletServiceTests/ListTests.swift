import Foundation
import JSON
import Postgres
import ServiceTestSupport
import Testing
import TestSupport
import WalletCore
@testable import WalletStore

/// The lists a game server needs, through the real server: a player's holds
/// (its own, every client's for an admin key) and credits, newest first,
/// paged with the history's cursor rules.
@Suite(.timeLimit(.minutes(2)))
struct ListTests {
    static func place(_ service: TestService, _ user: String, _ amount: Int, key: String, apiKey: String) throws -> Int64 {
        let placed = try service.request("POST", "/v1/holds", key: apiKey,
                                         json: #"{"user_id":"\#(user)","amount":\#(amount)}"#,
                                         headers: [("Idempotency-Key", key)])
        #expect(placed.status == 201, "\(placed.text)")
        guard case .number(let id)? = try placed.json()["hold"]?["id"], let value = Int64(id) else {
            Issue.record("no hold id in \(placed.text)")
            return 0
        }
        return value
    }

    /// The ids of a list's items, and its next cursor.
    static func ids(_ response: HTTPTestResponse, _ member: String) throws -> ([Int64], String?) {
        #expect(response.status == 200, "\(response.text)")
        let body = try response.json()
        guard case .array(let items)? = body[member] else { return ([], nil) }
        let ids = items.compactMap { item -> Int64? in
            if case .number(let id)? = item["id"] ?? item["entry_id"] { return Int64(id) }
            return nil
        }
        if case .string(let cursor)? = body["next_cursor"] { return (ids, cursor) }
        return (ids, nil)
    }

    @Test func aPlayersHoldsAreListedByStatusForTheirClient() throws {
        let service = try TestService()
        defer { service.stop() }
        #expect(try service.credit(userID: "ivy", flowNo: "ivy-1").status == 201)
        let other = try APIKeys.create(name: "other-game", scopes: [.debit, .read],
                                       on: try Connection(options: service.database))
        let first = try Self.place(service, "ivy", 50, key: "h1", apiKey: service.gameServerKey)
        let second = try Self.place(service, "ivy", 60, key: "h2", apiKey: service.gameServerKey)
        let third = try Self.place(service, "ivy", 70, key: "h3", apiKey: service.gameServerKey)
        let theirs = try Self.place(service, "ivy", 80, key: "h4", apiKey: other)
        #expect(try service.request("POST", "/v1/holds/\(first)/capture", key: service.gameServerKey, json: "{}",
                                    headers: [("Idempotency-Key", "c1")]).status == 201)
        #expect(try service.request("POST", "/v1/holds/\(second)/release", key: service.gameServerKey, json: "{}",
                                    headers: [("Idempotency-Key", "r2")]).status == 200)

        func list(_ query: String, key: String? = nil) throws -> ([Int64], String?) {
            try Self.ids(service.request("GET", "/v1/wallets/ivy/holds\(query)", key: key ?? service.gameServerKey),
                         "holds")
        }
        #expect(try list("").0 == [third, second, first])
        #expect(try list("?status=active").0 == [third])
        #expect(try list("?status=captured").0 == [first])
        #expect(try list("?status=released").0 == [second])
        #expect(try list("?status=expired").0 == [])
        #expect(try list("", key: other).0 == [theirs])
        #expect(try list("", key: service.adminKey).0 == [theirs, third, second, first])
        // Pages of two: the cursor carries on, and the last page has none.
        let page = try list("?limit=2")
        #expect(page.0 == [third, second])
        let cursor = try #require(page.1)
        #expect(try list("?limit=2&cursor=\(cursor)") == ([first], nil))
        let statuses = try service.request("GET", "/v1/wallets/ivy/holds", key: service.gameServerKey).json()
        guard case .array(let holds)? = statuses["holds"] else { return }
        #expect(holds.map { $0["status"] } == ["held", "released", "captured"])

        for bad in ["?status=held", "?status=ACTIVE", "?limit=0", "?limit=501", "?cursor=bm9wZQ", "?cursor=\(cursor)x"] {
            let refused = try service.request("GET", "/v1/wallets/ivy/holds\(bad)", key: service.gameServerKey)
            #expect(refused.status == 422, "\(bad): \(refused.text)")
            #expect(try refused.json()["code"] == "validation_failed", "\(bad)")
        }
        // A cursor of another list is not one of this list's.
        let entries = try Self.ids(service.request("GET", "/v1/wallets/ivy/entries?limit=1", key: service.gameServerKey),
                                   "entries")
        let foreign = try #require(entries.1)
        #expect(try service.request("GET", "/v1/wallets/ivy/holds?cursor=\(foreign)",
                                    key: service.gameServerKey).status == 422)
        #expect(try service.request("GET", "/v1/wallets/ivy/holds", key: service.appBackendKey).status == 200)
    }

    @Test func aPlayersCreditsAreListedNewestFirstWithHowTheyWereVerified() throws {
        let service = try TestService()
        defer { service.stop() }
        for flow in ["jo-1", "jo-2", "jo-3"] {
            #expect(try service.credit(userID: "jo", flowNo: flow).status == 201)
        }
        #expect(try service.credit(userID: "kai", flowNo: "kai-1").status == 201)
        try Connection(options: service.database).query("SELECT * FROM wallet.refund_credit('jo-2', 'chargeback', 'ops')")

        let all = try service.request("GET", "/v1/wallets/jo/credits", key: service.gameServerKey)
        #expect(all.status == 200, "\(all.text)")
        guard case .array(let credits)? = try all.json()["credits"] else {
            Issue.record("\(all.text)")
            return
        }
        #expect(credits.map { $0["flow_no"] } == ["jo-3", "jo-2", "jo-1"])
        #expect(credits.map { $0["status"] } == ["credited", "refunded", "credited"])
        #expect(credits.map { $0["refunded_amount"] } == [.null, 600, .null])
        #expect(credits.allSatisfy { $0["source"] == "caller" && $0["environment"] != nil })
        #expect(try all.json()["next_cursor"] == .null)

        let page = try Self.ids(service.request("GET", "/v1/wallets/jo/credits?limit=2", key: service.gameServerKey),
                                "credits")
        let cursor = try #require(page.1)
        let rest = try service.request("GET", "/v1/wallets/jo/credits?limit=2&cursor=\(cursor)", key: service.gameServerKey)
        guard case .array(let last)? = try rest.json()["credits"] else { return }
        #expect(last.map { $0["flow_no"] } == ["jo-1"])
        #expect(try rest.json()["next_cursor"] == .null)

        // One credit shows the same fields.
        let one = try service.request("GET", "/v1/credits/jo-2", key: service.gameServerKey)
        #expect(try one.json()["credit"] == credits[1])
        #expect(try service.request("GET", "/v1/wallets/nobody/credits", key: service.gameServerKey).json()["credits"]
            == .array([]))
        #expect(try service.request("GET", "/v1/wallets/jo/credits?cursor=\(cursor)x", key: service.gameServerKey).status
            == 422)
    }
}
