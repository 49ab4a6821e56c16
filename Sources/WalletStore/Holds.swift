import Foundation
import Postgres
public import WalletCore

/// Holds in the ledger database: placed, captured and released through the
/// SQL functions in Migrations/functions/07_holds.sql, by the group-commit
/// writers (see `GroupCommit`), one call each inside the writer's batch. Their
/// answers are built in SQL and stored under the idempotency key, so a
/// replay is the stored body.
extension LedgerStore {
    public enum HoldOperation: Sendable {
        case place(user: UserID, currency: Currency, amount: Amount, reason: String?, metadata: String?, expiresInSeconds: Int)
        case capture(holdID: Int64, amount: Amount?)
        case release(holdID: Int64)
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

    public enum HoldOutcome: String, Sendable {
        case held, captured, released
        case insufficientFunds = "insufficient_funds"
        case holdNotActive = "hold_not_active"
        case amountExceedsHold = "amount_exceeds_hold"
        case notFound = "not_found"
        case idempotencyKeyReused = "idempotency_key_reused"
        case unknownCurrency = "unknown_currency"
    }

    public struct HoldResult: Sendable {
        public var outcome: HoldOutcome
        public var replayed: Bool
        /// The answer's body as stored (JSON text), for outcomes that keep one.
        public var response: String?
        /// The request id that first got this answer.
        public var requestID: String?
    }

    /// A batch of hold operations in one call, one answer each, in order.
    static func holds(_ requests: [HoldRequest], on connection: Connection) throws -> [HoldResult] {
        let records = requests.map { request -> PostgresRecord in
            var fields: [(any PostgresEncodable)?] = [nil, request.client, request.key.rawValue, ByteA(request.requestHash),
                                                      request.requestID, request.anyClient]
            switch request.operation {
            case .place(let user, let currency, let amount, let reason, let metadata, let expiresIn):
                fields[0] = "place"
                fields += [user.rawValue, currency.rawValue, amount.value, reason, metadata, Int32(expiresIn), nil]
            case .capture(let holdID, let amount):
                fields[0] = "capture"
                fields += [nil, nil, amount?.value, nil, nil, nil, holdID]
            case .release(let holdID):
                fields[0] = "release"
                fields += [nil, nil, nil, nil, nil, nil, holdID]
            }
            return PostgresRecord(fields)
        }
        let rows = try connection.prepared("""
            SELECT outcome, replayed, response::text, request_id FROM wallet.hold_many(\(records)::wallet.hold_request[])
            """)
        guard rows.count == requests.count else { throw StoreError.unexpectedRowCount(rows.count, requests.count) }
        return try rows.map { row in
            HoldResult(outcome: try outcome(HoldOutcome.self, row), replayed: try row.decodeIfPresent(Bool.self, at: 1) ?? false,
                              response: try row.decodeIfPresent(String.self, at: 2),
                              requestID: try row.decodeIfPresent(String.self, at: 3))
        }
    }

    /// A hold as the API shows it (JSON text), or nil when there is none
    /// for this client.
    static func hold(id: Int64, client: String, anyClient: Bool, on connection: Connection) throws -> String? {
        try connection.prepared("""
            SELECT wallet.hold_json(h)::text FROM wallet.holds h
            WHERE h.id = \(id)::bigint AND (\(anyClient)::boolean OR h.client = \(client))
            """).single.map { try $0.decode(String.self, at: 0) }
    }
}

extension Ledger {
    /// The user whose wallet hold `id` is in, to route its capture or
    /// release to that wallet's writer; nil when there is no such hold.
    public func holdOwner(id: Int64) throws -> String? {
        try reads.run {
            try $0.prepared("SELECT user_id FROM wallet.holds WHERE id = \(id)::bigint").single
                .map { try $0.decode(String.self, at: 0) }
        }
    }

    /// The hold `id` as it is now, when `client` may see it.
    public func hold(id: Int64, client: String, anyClient: Bool) throws -> String? {
        try reads.run { try LedgerStore.hold(id: id, client: client, anyClient: anyClient, on: $0) }
    }

    /// Expires due holds of up to `wallets` wallets; returns how many.
    public func expireHolds(wallets: Int) throws -> Int {
        try writeBounded(.statement, pool: pool, metrics: metrics, deadline: .now + .seconds(10)) {
            try $0.prepared("SELECT wallet.expire_holds(\(wallets)::integer)")[0].decode(Int.self, at: 0)
        }
    }
}
