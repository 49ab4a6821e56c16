public import Foundation
public import Postgres
public import WalletCore

/// The outbox (`wallet.outbox`): calls the service owes a store, queued in
/// the transaction that makes them owed, then leased, sent and recorded by
/// one sender off every request path. Both stores' calls are rows of it.
public enum OutboxKind: String, Sendable, CaseIterable, PostgresDecodable, PostgresEncodable {
    /// Send Consumption Information, for an App Store CONSUMPTION_REQUEST.
    case appStoreConsumption = "appstore_consumption"
    /// Consume a credited Google Play purchase.
    case googlePlayConsume = "googleplay_consume"
}

/// Where a call owed to a store stands: `wallet.outbox.status`.
public enum OutboxStatus: String, Sendable, CaseIterable, PostgresDecodable, PostgresEncodable {
    /// Due at its next attempt.
    case pending
    /// The store accepted it.
    case sent
    /// Refused by the store, or its window passed: never tried again.
    case failed
}

extension LedgerStore {
    /// A leased row, with what its call is made from as the ledger is now.
    public struct OutboxTask: Sendable, Equatable {
        public var kind: OutboxKind
        /// The notificationUUID (App Store) or the purchase token (Google Play).
        public var key: String
        public var flowNo: String
        public var environment: PurchaseEnvironment
        public var attempts: Int
        /// After this (epoch milliseconds) the call is pointless.
        public var windowEndsAtMilliseconds: Int64
        /// The credit's status, or nil when never credited.
        public var creditStatus: CreditStatus?
        public var creditedAmount: Int64?
        /// The credit's wallet balance now.
        public var balance: Int64?
        /// The credit's product as Google Play names it.
        public var googleProductID: String?
    }

    /// One row, for the `consumption list` commands.
    public struct OutboxRecord: Sendable {
        public var key: String
        public var flowNo: String
        public var environment: PurchaseEnvironment
        public var status: OutboxStatus
        public var attempts: Int
        public var lastError: String?
        public var requestBody: String?
        public var createdAt: Date
        public var sentAt: Date?
    }

    /// Takes up to `limit` rows due at `now` (on the sender's clock, which
    /// also waits for them) and leases them for `leaseSeconds` (their next
    /// attempt moves on), so another instance does not send them meanwhile.
    static func claimOutbox(_ kinds: [OutboxKind], limit: Int, leaseSeconds: Int, now: Date,
                            on connection: Connection) throws -> [OutboxTask] {
        try connection.query("""
            WITH due AS (
                SELECT o.kind, o.key FROM wallet.outbox o
                WHERE o.status = \(literal: OutboxStatus.pending)
                  AND o.next_attempt_at <= \(now)::timestamptz
                  AND o.kind = ANY(\(kinds.map(\.rawValue))::text[])
                ORDER BY o.next_attempt_at LIMIT \(limit) FOR UPDATE SKIP LOCKED
            ), leased AS (
                UPDATE wallet.outbox o
                SET next_attempt_at = \(now)::timestamptz + make_interval(secs => \(leaseSeconds)),
                    updated_at = now()
                FROM due WHERE o.kind = due.kind AND o.key = due.key
                RETURNING o.*
            )
            SELECT l.kind, l.key, l.flow_no, l.environment, l.attempts,
                   (extract(epoch FROM l.window_ends_at) * 1000)::bigint, c.status, c.amount, w.balance,
                   coalesce(p.google_product_id, p.product_id)
            FROM leased l
            LEFT JOIN wallet.credits c ON c.flow_no = l.flow_no
            LEFT JOIN wallet.wallets w ON w.user_id = c.user_id AND w.currency = c.currency
            LEFT JOIN wallet.products p ON p.product_id = c.product_id
            ORDER BY l.created_at
            """).map { row in
            OutboxTask(
                kind: try row.decode(OutboxKind.self, at: 0), key: try row.decode(String.self, at: 1),
                flowNo: try row.decode(String.self, at: 2), environment: try row.decode(PurchaseEnvironment.self, at: 3),
                attempts: try row.decode(Int.self, at: 4), windowEndsAtMilliseconds: try row.decode(Int64.self, at: 5),
                creditStatus: try row.decodeIfPresent(CreditStatus.self, at: 6), creditedAmount: try row.decodeIfPresent(Int64.self, at: 7),
                balance: try row.decodeIfPresent(Int64.self, at: 8), googleProductID: try row.decodeIfPresent(String.self, at: 9))
        }
    }

    /// Records one attempt: `sent`, `failed`, or still `pending` until
    /// `retryInSeconds` after `now` (the sender's clock).
    static func recordOutboxAttempt(_ kind: OutboxKind, key: String, status: OutboxStatus, body: String?, error: String?,
                                    retryInSeconds: Int, now: Date, on connection: Connection) throws {
        try connection.query("""
            UPDATE wallet.outbox
            SET status = \(status), attempts = attempts + 1, last_error = \(error),
                request_body = coalesce(\(body)::jsonb, request_body),
                next_attempt_at = \(now)::timestamptz + make_interval(secs => \(retryInSeconds)),
                updated_at = now(),
                sent_at = CASE WHEN \(status == .sent)::boolean THEN now() END
            WHERE kind = \(kind.rawValue) AND key = \(key) AND status = \(literal: OutboxStatus.pending)
            """)
    }

    static func outboxRecords(_ kind: OutboxKind, limit: Int, on connection: Connection) throws -> [OutboxRecord] {
        try connection.query("""
            SELECT key, flow_no, environment, status, attempts, last_error, request_body::text, created_at, sent_at
            FROM wallet.outbox WHERE kind = \(kind.rawValue) ORDER BY created_at DESC, key LIMIT \(limit)
            """).map { row in
            OutboxRecord(
                key: try row.decode(String.self, at: 0), flowNo: try row.decode(String.self, at: 1),
                environment: try row.decode(PurchaseEnvironment.self, at: 2), status: try row.decode(OutboxStatus.self, at: 3),
                attempts: try row.decode(Int.self, at: 4), lastError: try row.decodeIfPresent(String.self, at: 5),
                requestBody: try row.decodeIfPresent(String.self, at: 6), createdAt: try row.decode(Date.self, at: 7),
                sentAt: try row.decodeIfPresent(Date.self, at: 8))
        }
    }
}

extension Ledger {
    public func claimOutbox(_ kinds: [OutboxKind], limit: Int, leaseSeconds: Int, now: Date) throws -> [LedgerStore.OutboxTask] {
        try writeBounded(.statement, pool: pool, metrics: metrics, deadline: .now + .seconds(5)) {
            try LedgerStore.claimOutbox(kinds, limit: limit, leaseSeconds: leaseSeconds, now: now, on: $0)
        }
    }

    public func recordOutboxAttempt(_ kind: OutboxKind, key: String, status: OutboxStatus, body: String?, error: String?,
                                    retryInSeconds: Int, now: Date) throws {
        try writeBounded(.statement, pool: pool, metrics: metrics, deadline: .now + .seconds(5)) {
            try LedgerStore.recordOutboxAttempt(kind, key: key, status: status, body: body, error: error,
                                                retryInSeconds: retryInSeconds, now: now, on: $0)
        }
    }
}

extension Administration {
    /// The newest rows of one kind, newest first.
    public func outboxRecords(_ kind: OutboxKind, limit: Int) throws -> [LedgerStore.OutboxRecord] {
        try LedgerStore.outboxRecords(kind, limit: limit, on: connection)
    }
}
