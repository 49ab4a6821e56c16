public import Foundation
import Postgres
public import WalletCore

/// The game server's grants (`POST /v1/grants`): free coins under an
/// idempotency key, with a debit's key rules (Migrations/functions/19_grants.sql).
public struct GrantOperation: Sendable {
    public var client: String
    public var key: IdempotencyKey
    public var requestHash: [UInt8]
    public var userID: UserID
    public var currency: Currency
    public var amount: Amount
    public var reason: String
    /// Days until the coins expire; nil: they never do.
    public var expiresInDays: Int?
    /// Canonical JSON text of the caller's metadata object.
    public var metadata: String?
    public var requestID: String

    public init(client: String, key: IdempotencyKey, requestHash: [UInt8], userID: UserID, currency: Currency,
                amount: Amount, reason: String, expiresInDays: Int?, metadata: String?, requestID: String) {
        self.client = client
        self.key = key
        self.requestHash = requestHash
        self.userID = userID
        self.currency = currency
        self.amount = amount
        self.reason = reason
        self.expiresInDays = expiresInDays
        self.metadata = metadata
        self.requestID = requestID
    }
}

/// What a grant came to.
public enum GrantOutcome: String, Sendable {
    case granted
    case idempotencyKeyReused = "idempotency_key_reused"
    case unknownCurrency = "unknown_currency"
    case paidCurrencyNotGrantable = "paid_currency_not_grantable"
}

/// A grant's answer: for `granted`, its entry and the wallet right after
/// it, as first answered when `replayed`.
public struct GrantResult: Sendable {
    public struct Granted: Sendable {
        public var entryID: Int64
        public var amount: Int64
        public var balance: Int64
        public var held: Int64
        public var createdAt: Date
        public var expiresAt: Date?
        public var requestID: String?
    }

    public var outcome: GrantOutcome
    public var replayed: Bool
    public var granted: Granted?
}

extension LedgerStore {
    /// Applies a grant once under its key, on `connection` (a group-commit
    /// writer's, inside its batch's transaction when the batch has more).
    static func grant(_ operation: GrantOperation, on connection: Connection) throws -> GrantResult {
        let row = try connection.prepared("""
            SELECT outcome, replayed, entry_id, amount, balance, held, created_at, expires_at, request_id
            FROM wallet.grant_reward(\(operation.client), \(operation.key.rawValue), \(ByteA(operation.requestHash))::bytea,
                                     \(operation.requestID), \(operation.userID.rawValue),
                                     \(operation.currency.rawValue), \(operation.amount.value), \(operation.reason),
                                     \(operation.expiresInDays)::integer, \(operation.metadata)::jsonb)
            """)[0]
        guard let outcome = GrantOutcome(rawValue: try row.decode(String.self, at: 0)) else {
            throw StoreError.missingColumn("outcome")
        }
        var result = GrantResult(outcome: outcome, replayed: try row.decode(Bool.self, at: 1), granted: nil)
        if outcome == .granted {
            result.granted = GrantResult.Granted(
                entryID: try row.decode(Int64.self, at: 2), amount: try row.decode(Int64.self, at: 3),
                balance: try row.decode(Int64.self, at: 4), held: try row.decodeIfPresent(Int64.self, at: 5) ?? 0,
                createdAt: try row.decode(Date.self, at: 6), expiresAt: try row.decodeIfPresent(Date.self, at: 7),
                requestID: try row.decodeIfPresent(String.self, at: 8))
        }
        return result
    }
}
