import Foundation
import JSON
import Postgres
import ServiceTestSupport
import Testing
import TestSupport
import WalletCore
@testable import WalletStore

/// GET /v1/events through the real server: its scope, its checks, and the
/// events as the feed shows them.
@Suite(.timeLimit(.minutes(2)))
struct EventFeedTests {
    static func events(_ response: HTTPTestResponse) throws -> [JSONValue] {
        guard case .array(let events)? = try response.json()["events"] else { return [] }
        return events
    }

    @Test func theFeedShowsEachChangeWithTheWalletAfterIt() throws {
        let service = try TestService()
        defer { service.stop() }
        let setup = try Connection(options: service.database)
        defer { setup.close() }
        let feedKey = try APIKeys.create(name: "game-events", scopes: [.events], on: setup)
        #expect(try service.credit(userID: "ann", flowNo: "2000000001").status == 201)
        #expect(try service.debit(userID: "ann", amount: 100, idempotencyKey: "d-1").status == 201)

        let page = try service.request("GET", "/v1/events?after=0&limit=10", key: feedKey)
        #expect(page.status == 200)
        let events = try Self.events(page)
        #expect(events.map { $0["type"] } == [.string("credit.created"), .string("debit.created")])
        let credit = events[0]
        #expect(credit["user_id"] == .string("ann") && credit["currency"] == .string("coin"))
        #expect(credit["amount"] == 600 && credit["balance_after"] == 600 && credit["held"] == 0
                && credit["available"] == 600)
        #expect(credit["flow_no"] == .string("2000000001") && credit["hold_id"] == .null)
        #expect(credit["data"]?["product_id"] == .string("guodong600"))
        #expect(events[1]["amount"] == -100 && events[1]["balance_after"] == 500 && events[1]["flow_no"] == .null)
        // Not full: next_after is at least the last event's id.
        guard case .number(let last)? = events[1]["id"], case .number(let next)? = try page.json()["next_after"],
              let lastID = Int64(last), let nextAfter = Int64(next) else { Issue.record("no id"); return }
        #expect(nextAfter >= lastID)

        // Caught up: an empty page, the same cursor.
        let after = try service.request("GET", "/v1/events?after=\(nextAfter)", key: feedKey)
        #expect(try Self.events(after).isEmpty && after.json()["next_after"] == .number(next))
        // One player, one type.
        #expect(try Self.events(service.request("GET", "/v1/events?user_id=bob", key: feedKey)).isEmpty)
        #expect(try Self.events(service.request("GET", "/v1/events?type=debit.created", key: feedKey)).count == 1)
        // The admin scope reads it too.
        #expect(try service.request("GET", "/v1/events", key: service.adminKey).status == 200)

        // Past retention (every event older than tomorrow goes), a cursor
        // behind the deleted events is gone; 0 starts after them. (The
        // console's rollups take them first: the purge never passes them.)
        try setup.query("SELECT wallet.roll_up_console(100)")
        try setup.query("SELECT wallet.purge_events(now() + interval '1 day', 100)")
        let expired = try service.request("GET", "/v1/events?after=1", key: feedKey)
        #expect(try expired.status == 410 && expired.json()["code"] == .string("cursor_expired"))
        #expect(expired.header("Content-Type") == "application/problem+json")
        #expect(try Self.events(service.request("GET", "/v1/events?after=0", key: feedKey)).isEmpty)
    }

    @Test func theFeedTakesItsOwnScopeAndRefusesWhatItCannotRead() throws {
        let service = try TestService()
        defer { service.stop() }
        let setup = try Connection(options: service.database)
        defer { setup.close() }
        let feedKey = try APIKeys.create(name: "game-events", scopes: [.events], on: setup)
        let forbidden = try service.request("GET", "/v1/events", key: service.gameServerKey)
        #expect(try forbidden.status == 403 && forbidden.json()["code"] == .string("forbidden"))
        #expect(try service.request("GET", "/v1/events").status == 401)
        // An events key moves no coins.
        #expect(try service.debit(userID: "ann", amount: 1, idempotencyKey: "d-1", key: feedKey).status == 403)
        for (query, field) in [("after=-1", "after"), ("after=x", "after"), ("limit=0", "limit"), ("limit=1001", "limit"),
                               ("type=credit.made", "type"), ("user_id=a%20b", "user_id")] {
            let refused = try service.request("GET", "/v1/events?\(query)", key: feedKey)
            #expect(refused.status == 422, "\(query)")
            #expect(refused.header("Content-Type") == "application/problem+json", "\(query)")
            #expect(try refused.json()["code"] == .string("validation_failed"), "\(query)")
            guard case .array(let errors)? = try refused.json()["errors"] else { Issue.record("no errors"); continue }
            #expect(errors.map { $0["field"] } == [.string(field)], "\(query)")
        }
    }
}
