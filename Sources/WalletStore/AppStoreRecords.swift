import Foundation
import Postgres

/// The App Store Server API's state in the ledger database: the outbox of
/// consumption answers and the reconciliation marks. Times cross as epoch
/// milliseconds.
extension LedgerStore {
    /// A queued consumption answer, with what its body is computed from.
    public struct ConsumptionTask: Sendable, Equatable {
        public var notificationUUID: String
        public var flowNo: String
        public var environment: String
        public var attempts: Int
        /// When Apple sent the request (the notification's signedDate): its
        /// 12-hour window runs from here.
        public var requestedAtMilliseconds: Int64
        /// The credit's status (`credited`, `refunded`) or nil when never credited.
        public var creditStatus: String?
        public var creditedAmount: Int64?
        /// The credit's wallet balance now.
        public var balance: Int64?
    }

    /// One outbox row, for `wallet appstore consumption list`.
    public struct ConsumptionRecord: Sendable {
        public var notificationUUID: String
        public var flowNo: String
        public var environment: String
        public var status: String
        public var attempts: Int
        public var lastError: String?
        public var requestBody: String?
        public var createdAt: String
        public var sentAt: String?
    }

    /// Takes up to `limit` due answers and leases them for `leaseSeconds`
    /// (their next attempt moves on), so another instance does not send
    /// them meanwhile.
    static func claimConsumption(limit: Int, leaseSeconds: Int, on connection: Connection) throws -> [ConsumptionTask] {
        try connection.query("""
            WITH due AS (
                SELECT r.notification_uuid FROM wallet.appstore_consumption_requests r
                WHERE r.status = 'pending' AND r.next_attempt_at <= now()
                ORDER BY r.next_attempt_at LIMIT \(limit) FOR UPDATE SKIP LOCKED
            ), leased AS (
                UPDATE wallet.appstore_consumption_requests r
                SET next_attempt_at = now() + make_interval(secs => \(leaseSeconds)), updated_at = now()
                FROM due WHERE r.notification_uuid = due.notification_uuid
                RETURNING r.*
            )
            SELECT l.notification_uuid, l.flow_no, l.environment, l.attempts,
                   (extract(epoch FROM n.signed_date) * 1000)::bigint, c.status, c.amount, w.balance
            FROM leased l
            JOIN wallet.appstore_notifications n ON n.notification_uuid = l.notification_uuid
            LEFT JOIN wallet.credits c ON c.flow_no = l.flow_no
            LEFT JOIN wallet.wallets w ON w.user_id = c.user_id AND w.currency = c.currency
            ORDER BY l.created_at
            """).map { row in
            ConsumptionTask(
                notificationUUID: try row.decode(String.self, at: 0), flowNo: try row.decode(String.self, at: 1),
                environment: try row.decode(String.self, at: 2), attempts: try row.decode(Int.self, at: 3),
                requestedAtMilliseconds: try row.decode(Int64.self, at: 4), creditStatus: try row.decodeIfPresent(String.self, at: 5),
                creditedAmount: try row.decodeIfPresent(Int64.self, at: 6), balance: try row.decodeIfPresent(Int64.self, at: 7))
        }
    }

    /// Records one attempt: `sent`, `failed`, or still `pending` until
    /// `retryInSeconds` from now.
    static func recordConsumptionAttempt(_ notificationUUID: String, status: String, body: String, error: String?,
                                         retryInSeconds: Int, on connection: Connection) throws {
        try connection.query("""
            UPDATE wallet.appstore_consumption_requests
            SET status = \(status), attempts = attempts + 1, last_error = \(error), request_body = \(body)::jsonb,
                next_attempt_at = now() + make_interval(secs => \(retryInSeconds)), updated_at = now(),
                sent_at = CASE WHEN \(status) = 'sent' THEN now() END
            WHERE notification_uuid = \(notificationUUID) AND status = 'pending'
            """)
    }

    static func consumptionRecords(limit: Int, on connection: Connection) throws -> [ConsumptionRecord] {
        try connection.query("""
            SELECT notification_uuid, flow_no, environment, status, attempts, last_error, request_body::text,
                   to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                   to_char(sent_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
            FROM wallet.appstore_consumption_requests ORDER BY created_at DESC, notification_uuid LIMIT \(limit)
            """).map { row in
            ConsumptionRecord(
                notificationUUID: try row.decode(String.self, at: 0), flowNo: try row.decode(String.self, at: 1),
                environment: try row.decode(String.self, at: 2), status: try row.decode(String.self, at: 3),
                attempts: try row.decode(Int.self, at: 4), lastError: try row.decodeIfPresent(String.self, at: 5),
                requestBody: try row.decodeIfPresent(String.self, at: 6), createdAt: try row.decode(String.self, at: 7),
                sentAt: try row.decodeIfPresent(String.self, at: 8))
        }
    }

    /// The end of the last complete sweep of `environment`, in epoch milliseconds.
    static func reconcileMark(_ environment: String, on connection: Connection) throws -> Int64? {
        try connection.query("""
            SELECT (extract(epoch FROM swept_until) * 1000)::bigint FROM wallet.appstore_reconcile_marks
            WHERE environment = \(environment)
            """).single.map { try $0.decode(Int64.self, at: 0) }
    }

    /// Moves the mark forward, never back.
    static func advanceReconcileMark(_ environment: String, toMilliseconds until: Int64, on connection: Connection) throws {
        try connection.query("""
            INSERT INTO wallet.appstore_reconcile_marks AS m (environment, swept_until)
            VALUES (\(environment), to_timestamp(\(until)::bigint / 1000.0))
            ON CONFLICT (environment) DO UPDATE
                SET swept_until = greatest(m.swept_until, EXCLUDED.swept_until), updated_at = now()
            """)
    }
}

extension Ledger {
    public func claimConsumption(limit: Int, leaseSeconds: Int) throws -> [LedgerStore.ConsumptionTask] {
        try pool.withConnection(deadline: .now + .seconds(5)) {
            try LedgerStore.claimConsumption(limit: limit, leaseSeconds: leaseSeconds, on: $0)
        }
    }

    public func recordConsumptionAttempt(_ notificationUUID: String, status: String, body: String, error: String?,
                                         retryInSeconds: Int) throws {
        try pool.withConnection(deadline: .now + .seconds(5)) {
            try LedgerStore.recordConsumptionAttempt(notificationUUID, status: status, body: body, error: error,
                                                     retryInSeconds: retryInSeconds, on: $0)
        }
    }

    public func reconcileMark(_ environment: String) throws -> Int64? {
        try pool.withConnection(deadline: .now + .seconds(5)) { try LedgerStore.reconcileMark(environment, on: $0) }
    }

    public func advanceReconcileMark(_ environment: String, toMilliseconds until: Int64) throws {
        try pool.withConnection(deadline: .now + .seconds(5)) {
            try LedgerStore.advanceReconcileMark(environment, toMilliseconds: until, on: $0)
        }
    }

    /// Runs `body` holding the reconciliation advisory lock (a session lock
    /// on a connection kept for the purpose), or returns nil at once when
    /// another session holds it.
    public func withReconcileLock<T>(_ body: () throws -> T) throws -> T? {
        try sessionPool.withConnection(deadline: .now + .seconds(5)) { connection in
            let key = Self.reconcileLockKey
            guard try connection.query("SELECT pg_try_advisory_lock(\(key)::bigint)")[0].decode(Bool.self, at: 0) else {
                return nil
            }
            // The sweep takes what it takes; this connection only holds the lock.
            connection.deadline = nil
            defer {
                connection.deadline = .now + .seconds(5)
                _ = try? connection.query("SELECT pg_advisory_unlock(\(key)::bigint)")
            }
            return try body()
        }
    }

    /// "wallet reconcile" as eight bytes: the one advisory lock key the service takes.
    static let reconcileLockKey: Int64 = 0x7761_6C6C_7265_636F
}

extension Administration {
    /// The newest consumption answers, newest first.
    public func consumptionRecords(limit: Int) throws -> [LedgerStore.ConsumptionRecord] {
        try LedgerStore.consumptionRecords(limit: limit, on: connection)
    }
}
