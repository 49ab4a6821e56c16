public import Foundation
public import JSON
import Postgres
public import WalletCore

/// An event as `wallet.events` keeps it: one change to one wallet, written
/// by `wallet.post_entries` in the change's own transaction.
public struct WalletEvent: Sendable, Equatable {
    public var id: Int64
    public var type: EventType
    public var userID: String
    public var currency: String
    /// What the change added to the balance (negative when it took).
    public var amount: Int64
    public var balanceAfter: Int64
    public var held: Int64
    public var available: Int64
    public var entryID: Int64?
    public var holdID: Int64?
    public var flowNo: String?
    public var createdAt: Date
    public var data: JSONValue
}

/// A page of the feed: the events after a cursor, and the cursor to ask
/// from next.
public struct EventPage: Sendable {
    public var events: [WalletEvent]
    /// The last event's id; on a page that is not full, the visibility
    /// bound the page was read under (every event up to it that matches
    /// the filter is on this page or an earlier one), so a filtered reader
    /// does not read the same stretch again.
    public var nextAfter: Int64
}

/// What a feed read asks for.
public struct EventQuery: Sendable {
    public var after: Int64
    public var limit: Int
    public var userID: UserID?
    public var type: EventType?

    public init(after: Int64, limit: Int, userID: UserID? = nil, type: EventType? = nil) {
        self.after = after
        self.limit = limit
        self.userID = userID
        self.type = type
    }
}

enum EventStore {
    /// Reads a page under the visibility rule (`wallet.events_visible_through`,
    /// Migrations/functions/11_post_entries.sql): the bound is read in one
    /// statement and the events up to it in a later one, whose snapshot
    /// sees every event at or below the bound. A cursor below the retention
    /// horizon is refused with `cursorExpired`.
    static func page(_ query: EventQuery, on connection: Connection) throws -> EventPage {
        let bounds = try connection.prepared("""
            SELECT wallet.events_visible_through(), h.purged_through FROM wallet.events_horizon h
            """)
        guard let bound = bounds.first else { throw LedgerStore.StoreError.unexpectedRowCount(0, 1) }
        let visible = try bound.decode(Int64.self, at: 0)
        let purgedThrough = try bound.decode(Int64.self, at: 1)
        // Cursor 0 is the start of what is kept; any other below the horizon
        // asks for events that are gone.
        if query.after > 0 && query.after < purgedThrough {
            throw WalletError.cursorExpired(detail: "events up to \(purgedThrough) were deleted after the retention period; "
                                            + "read from after=\(purgedThrough) or later")
        }
        // The first `limit` events after the cursor, by the primary key (or
        // the player's index), then those the bound lets through: fewer
        // than `limit` means none after them is visible yet. The cursor is
        // a sub-select so that no plan ever depends on guessing how many
        // events lie past it: a two-sided id range, or one past the
        // statistics' last ANALYZE (new events always are), is guessed at
        // a few rows, and the planner then reads every event after the
        // cursor and sorts them, for each page (seen at 170 ms a page).
        let events = try connection.prepared("""
            SELECT id, type, user_id, currency, amount, balance_after, held, available, entry_id, hold_id, flow_no,
                   created_at, data::text
            FROM (SELECT * FROM wallet.events
                  WHERE id > (SELECT \(query.after)::bigint)
                    AND (\(query.userID?.rawValue)::text IS NULL OR user_id = \(query.userID?.rawValue)::text)
                    AND (\(query.type?.rawValue)::text IS NULL OR type = \(query.type?.rawValue)::text)
                  ORDER BY id
                  LIMIT \(query.limit)) page
            WHERE id <= \(visible)
            ORDER BY id
            """).map { try event($0, at: 0) }
        let full = events.count == query.limit
        return EventPage(events: events, nextAfter: full ? events[events.count - 1].id : max(query.after, visible))
    }

    /// An event from 13 columns from `first` on: id, type, user_id,
    /// currency, amount, balance_after, held, available, entry_id, hold_id,
    /// flow_no, created_at and data (as text).
    static func event(_ row: Row, at first: Int) throws -> WalletEvent {
        WalletEvent(
            id: try row.decode(Int64.self, at: first), type: try row.decode(EventType.self, at: first + 1),
            userID: try row.decode(String.self, at: first + 2), currency: try row.decode(String.self, at: first + 3),
            amount: try row.decode(Int64.self, at: first + 4), balanceAfter: try row.decode(Int64.self, at: first + 5),
            held: try row.decode(Int64.self, at: first + 6), available: try row.decode(Int64.self, at: first + 7),
            entryID: try row.decodeIfPresent(Int64.self, at: first + 8),
            holdID: try row.decodeIfPresent(Int64.self, at: first + 9),
            flowNo: try row.decodeIfPresent(String.self, at: first + 10),
            createdAt: try row.decode(Date.self, at: first + 11),
            data: try JSONParser.parse(Array(try row.decode(String.self, at: first + 12).utf8)))
    }

    /// Deletes up to `limit` of the oldest events created more than `days` ago.
    static func purge(olderThanDays days: Int, limit: Int, on connection: Connection) throws -> Int {
        try connection.prepared("""
            SELECT wallet.purge_events(now() - make_interval(days => \(days)), \(limit))
            """)[0].decode(Int.self, at: 0)
    }
}

extension Ledger {
    /// A page of the event feed.
    public func events(_ query: EventQuery) throws -> EventPage {
        try reads.run { try EventStore.page(query, on: $0) }
    }

    /// Deletes up to `limit` events older than `days`; returns how many.
    public func purgeEvents(olderThanDays days: Int, limit: Int) throws -> Int {
        try writeBounded(.statement, pool: pool, metrics: metrics, deadline: .now + .seconds(10)) {
            try EventStore.purge(olderThanDays: days, limit: limit, on: $0)
        }
    }
}
