import Foundation

/// Every element of a paged list, fetched a page at a time as the loop
/// asks for more: `for try await entry in client.entries(userID: "p1")`.
///
/// Each page is one call with the client's retries. The walk ends after the
/// last page (no next cursor; for the event feed, the first empty page). A
/// service that hands back the cursor it was given, which would loop for
/// ever, ends it with `UnexpectedResponseError`.
public struct WalletPages<Element: Sendable, Cursor: Sendable & Equatable>: AsyncSequence, Sendable {
    public typealias Fetch = @Sendable (_ cursor: Cursor?) async throws -> (elements: [Element], next: Cursor?)

    let start: Cursor?
    let fetch: Fetch

    init(start: Cursor?, fetch: @escaping Fetch) {
        self.start = start
        self.fetch = fetch
    }

    public func makeAsyncIterator() -> Iterator {
        Iterator(cursor: start, fetch: fetch)
    }

    public struct Iterator: AsyncIteratorProtocol {
        var cursor: Cursor?
        let fetch: Fetch
        var buffered: [Element] = []
        var index = 0
        var finished = false

        public mutating func next() async throws -> Element? {
            // Bounded: each pass fetches one page, and the walk ends at a page
            // without a next cursor or at a cursor that does not move.
            while index == buffered.count {
                guard !finished else { return nil }
                let page = try await fetch(cursor)
                buffered = page.elements
                index = 0
                if let next = page.next {
                    if next == cursor {
                        finished = true
                        throw UnexpectedResponseError(status: 200, body: Data(),
                                                      reason: "the service gave back the cursor it was given",
                                                      attempts: 1, idempotencyKey: nil)
                    }
                    cursor = next
                } else {
                    finished = true
                }
            }
            defer { index += 1 }
            return buffered[index]
        }
    }
}

extension WalletClient {
    /// Every ledger entry of a player, newest first, across pages of `pageSize`.
    public func entries(userID: String, currency: String? = nil, pageSize: Int? = nil) -> WalletPages<Entry, String> {
        WalletPages(start: nil) { [self] cursor in
            let page = try await listEntries(userID: userID, currency: currency, limit: pageSize, cursor: cursor)
            return (page.entries, page.nextCursor)
        }
    }

    /// Every hold this key placed for a player, newest first.
    public func holds(userID: String, status: HoldFilter? = nil, pageSize: Int? = nil) -> WalletPages<Hold, String> {
        WalletPages(start: nil) { [self] cursor in
            let page = try await listHolds(userID: userID, status: status, limit: pageSize, cursor: cursor)
            return (page.holds, page.nextCursor)
        }
    }

    /// Every credit of a player, newest first.
    public func credits(userID: String, pageSize: Int? = nil) -> WalletPages<CreditRecord, String> {
        WalletPages(start: nil) { [self] cursor in
            let page = try await listCredits(userID: userID, limit: pageSize, cursor: cursor)
            return (page.credits, page.nextCursor)
        }
    }

    /// The event feed from `after` (0: the oldest event kept), in id order,
    /// until it is caught up: the walk follows each page's `next_after` and
    /// ends at the first empty page. To follow the feed for ever, keep the
    /// last event's id and start a new walk from it later.
    public func events(after: Int64 = 0, pageSize: Int? = nil, userID: String? = nil,
                       type: EventType? = nil) -> WalletPages<Event, Int64> {
        WalletPages(start: after) { [self] cursor in
            let page = try await listEvents(after: cursor ?? 0, limit: pageSize, userID: userID, type: type)
            return (page.events, page.events.isEmpty ? nil : page.nextAfter)
        }
    }
}
