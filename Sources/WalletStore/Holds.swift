public import Foundation
import Locking
public import Postgres
public import WalletCore

/// Holds in the ledger database: placed, captured and released through the
/// SQL functions in Migrations/functions/07_holds.sql, by the group-commit
/// writers (see `GroupCommit`), one call per batch. They answer in typed
/// columns, as debits do: the hold as the answer shows it and the wallet's
/// balance, from which the service writes the body. An answer is stored
/// under its idempotency key as those values, so a replay is written from
/// them the same way.
extension LedgerStore {
    public enum HoldOperation: Sendable {
        case place(user: UserID, currency: Currency, amount: Amount, reason: String?, metadata: String?, expiresInSeconds: Int)
        case capture(holdID: Int64, amount: Amount?)
        case release(holdID: Int64)

        /// What `wallet.hold_many` is asked to do.
        public var action: HoldAction {
            switch self {
            case .place: .place
            case .capture: .capture
            case .release: .release
            }
        }
    }

    public struct HoldRequest: Sendable {
        public var client: String
        /// Admin keys act on any client's holds.
        public var anyClient: Bool
        public var key: IdempotencyKey
        public var requestHash: [UInt8]
        public var requestID: String
        public var operation: HoldOperation

        public init(client: String, anyClient: Bool, key: IdempotencyKey, requestHash: [UInt8], requestID: String,
                    operation: HoldOperation) {
            self.client = client
            self.anyClient = anyClient
            self.key = key
            self.requestHash = requestHash
            self.requestID = requestID
            self.operation = operation
        }
    }

    public enum HoldOutcome: String, Sendable, CaseIterable, PostgresDecodable {
        case held, captured, released
        case insufficientFunds = "insufficient_funds"
        case holdNotActive = "hold_not_active"
        case amountExceedsHold = "amount_exceeds_hold"
        case notFound = "not_found"
        case idempotencyKeyReused = "idempotency_key_reused"
        case unknownCurrency = "unknown_currency"
    }

    /// A hold, as an answer shows it.
    public struct Hold: Sendable, Equatable {
        public var id: Int64
        public var userID: String
        public var currency: String
        public var amount: Int64
        public var status: HoldStatus
        public var reason: String?
        /// The caller's metadata object as the ledger keeps it (`jsonb`
        /// text), or nil.
        public var metadataJSON: String?
        public var createdAt: Date
        public var expiresAt: Date
        /// Once captured: how much, when, and the capture's debit entry.
        public var capturedAmount: Int64?
        public var capturedAt: Date?
        public var entryID: Int64?
        public var releasedAt: Date?
        public var expiredAt: Date?
    }

    public struct HoldResult: Sendable {
        public var outcome: HoldOutcome
        /// True when the answer was stored by an earlier request with the same key.
        public var replayed: Bool
        /// The request id that first got this answer.
        public var requestID: String?
        /// The hold the answer is about, as it showed it.
        public var hold: Hold?
        /// The wallet's balance and what its active holds kept, as the
        /// answer gave them.
        public var balance: Int64?
        public var held: Int64?
        /// A hold, capture or release answered by a release before typed
        /// hold answers, whose body was stored whole (JSON text): replayed
        /// as it was first sent.
        public var storedResponse: String?
    }

    /// A batch of hold operations in one call, one answer each, in order.
    static func holds(_ requests: [HoldRequest], on connection: Connection) throws -> [HoldResult] {
        // One `wallet.hold_request` each, its fields in the type's order.
        let records = requests.map { request -> PostgresRecord in
            var fields: [(any PostgresEncodable)?] = [request.operation.action, request.client, request.key.rawValue,
                                                      ByteA(request.requestHash), request.requestID, request.anyClient]
            switch request.operation {
            case .place(let user, let currency, let amount, let reason, let metadata, let expiresIn):
                fields += [user.rawValue, currency.rawValue, amount.value, reason, metadata, Int32(expiresIn), nil]
            case .capture(let holdID, let amount):
                fields += [nil, nil, amount?.value, nil, nil, nil, holdID]
            case .release(let holdID):
                fields += [nil, nil, nil, nil, nil, nil, holdID]
            }
            return PostgresRecord(fields)
        }
        let rows = try connection.prepared("""
            SELECT r.outcome, r.replayed, r.request_id, r.balance, r.held, r.stored_response::text,
                   \(unsafeSQL: holdColumns("(r.hold)"))
            FROM wallet.hold_many(\(records)::wallet.hold_request[]) r
            """)
        guard rows.count == requests.count else { throw StoreError.unexpectedRowCount(rows.count, requests.count) }
        return try rows.map { row in
            HoldResult(outcome: try row.decode(HoldOutcome.self, at: 0), replayed: try row.decode(Bool.self, at: 1),
                       requestID: try row.decodeIfPresent(String.self, at: 2), hold: try hold(row, at: 6),
                       balance: try row.decodeIfPresent(Int64.self, at: 3), held: try row.decodeIfPresent(Int64.self, at: 4),
                       storedResponse: try row.decodeIfPresent(String.self, at: 5))
        }
    }

    /// The hold as it is now, or nil when there is none for this client. A
    /// hold past its time reads as expired, whether or not the sweeper came by.
    static func hold(id: Int64, client: String, anyClient: Bool, on connection: Connection) throws -> Hold? {
        try connection.prepared("""
            SELECT \(unsafeSQL: holdColumns("s"))
            FROM wallet.holds h CROSS JOIN LATERAL wallet.hold_as_seen(h) s
            WHERE h.id = \(id)::bigint AND (\(anyClient)::boolean OR h.client = \(client))
            """).single.flatMap { try hold($0, at: 0) }
    }

    /// A player's holds as they are now, newest first: `client`'s own (every
    /// client's with `anyClient`), of one status when `status` is given
    /// (a hold past its time reads as expired), below `beforeID`; `limit`
    /// of them and one more, which tells the caller a next page exists.
    static func holds(of userID: UserID, client: String, anyClient: Bool, status: HoldStatus?, beforeID: Int64?,
                      limit: Int, on connection: Connection) throws -> [Hold] {
        try connection.prepared("""
            SELECT \(unsafeSQL: holdColumns("s"))
            FROM wallet.holds h CROSS JOIN LATERAL wallet.hold_as_seen(h) s
            WHERE h.user_id = \(userID.rawValue) AND h.id < coalesce(\(beforeID)::bigint, 9223372036854775807)
              AND (\(anyClient)::boolean OR h.client = \(client))
              AND (\(status?.rawValue)::text IS NULL OR s.status = \(status?.rawValue)::text)
            ORDER BY h.id DESC
            LIMIT \(limit + 1)::integer
            """).compactMap { try hold($0, at: 0) }
    }

    /// The columns `hold(_:at:)` reads, of the `wallet.holds` value `value`.
    private static func holdColumns(_ value: String) -> String {
        ["id", "user_id", "currency", "amount", "status", "reason", "metadata::text", "created_at", "expires_at",
         "captured_amount", "captured_at", "entry_id", "released_at", "expired_at"]
            .map { "\(value).\($0)" }.joined(separator: ", ")
    }

    /// The hold in `holdColumns`, from column `first` on; nil when its id is NULL.
    private static func hold(_ row: Row, at first: Int) throws -> Hold? {
        guard let id = try row.decodeIfPresent(Int64.self, at: first) else { return nil }
        func time(_ offset: Int) throws -> Date? {
            try row.decodeIfPresent(Date.self, at: first + offset)
        }
        return Hold(id: id, userID: try row.decode(String.self, at: first + 1),
                    currency: try row.decode(String.self, at: first + 2), amount: try row.decode(Int64.self, at: first + 3),
                    status: try row.decode(HoldStatus.self, at: first + 4),
                    reason: try row.decodeIfPresent(String.self, at: first + 5),
                    metadataJSON: try row.decodeIfPresent(String.self, at: first + 6),
                    createdAt: try row.decode(Date.self, at: first + 7), expiresAt: try row.decode(Date.self, at: first + 8),
                    capturedAmount: try row.decodeIfPresent(Int64.self, at: first + 9), capturedAt: try time(10),
                    entryID: try row.decodeIfPresent(Int64.self, at: first + 11), releasedAt: try time(12),
                    expiredAt: try time(13))
    }
}

extension Ledger {
    /// The user whose wallet hold `id` is in, to route its capture or
    /// release to that wallet's writer; nil when there is no such hold.
    /// A hold's wallet never changes, so an owner once known (from the
    /// answer that placed or showed the hold, or read here) is remembered,
    /// and most captures and releases route without a read.
    public func holdOwner(id: Int64) throws -> String? {
        if let owner = holdOwners.value(forKey: id) { return owner }
        let owner = try reads.run {
            try $0.prepared("SELECT user_id FROM wallet.holds WHERE id = \(id)::bigint").single
                .map { try $0.decode(String.self, at: 0) }
        }
        if let owner { holdOwners.insert(owner, forKey: id) }
        return owner
    }

    /// Remembers the owner of a hold an answer showed.
    public func rememberOwner(of hold: LedgerStore.Hold) {
        holdOwners.insert(hold.userID, forKey: hold.id)
    }

    /// The hold `id` as it is now, when `client` may see it.
    public func hold(id: Int64, client: String, anyClient: Bool) throws -> LedgerStore.Hold? {
        try reads.run { try LedgerStore.hold(id: id, client: client, anyClient: anyClient, on: $0) }
    }

    /// A player's holds `client` may see, newest first (`LedgerStore.holds`).
    public func holds(of userID: UserID, client: String, anyClient: Bool, status: HoldStatus?, beforeID: Int64?,
                      limit: Int) throws -> [LedgerStore.Hold] {
        try reads.run {
            try LedgerStore.holds(of: userID, client: client, anyClient: anyClient, status: status, beforeID: beforeID,
                                  limit: limit, on: $0)
        }
    }

    /// Expires due holds of up to `wallets` wallets; returns how many.
    public func expireHolds(wallets: Int) throws -> Int {
        try writeBounded(.statement, pool: pool, metrics: metrics, deadline: .now + .seconds(10)) {
            try $0.prepared("SELECT wallet.expire_holds(\(wallets)::integer)")[0].decode(Int.self, at: 0)
        }
    }
}
