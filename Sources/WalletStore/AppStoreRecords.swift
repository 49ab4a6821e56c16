import Foundation
import Postgres

/// The sweeps' high-water marks in the ledger database, one per sweep: an
/// App Store environment's notification history, and Google Play's voided
/// purchases (`googleplay-voided`). Times cross as epoch milliseconds.
extension LedgerStore {
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
    public func reconcileMark(_ environment: String) throws -> Int64? {
        try pool.withConnection(deadline: .now + .seconds(5)) { try LedgerStore.reconcileMark(environment, on: $0) }
    }

    public func advanceReconcileMark(_ environment: String, toMilliseconds until: Int64) throws {
        try writeBounded(.statement, pool: pool, metrics: metrics, deadline: .now + .seconds(5)) {
            try LedgerStore.advanceReconcileMark(environment, toMilliseconds: until, on: $0)
        }
    }

    /// Runs `body` holding a sweep's advisory lock (a session lock on a
    /// connection kept for the purpose; `key` names the sweep), or returns
    /// nil at once when another session holds it.
    public func withSweepLock<T>(_ key: Int64, _ body: () throws -> T) throws -> T? {
        try sessionPool.withConnection(deadline: .now + .seconds(5)) { connection in
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

    /// "wallreco": the App Store notification-history sweep's advisory lock key.
    public static let reconcileLockKey: Int64 = 0x7761_6C6C_7265_636F
    /// "wallvoid": the Google Play voided-purchases sweep's.
    public static let voidedSweepLockKey: Int64 = 0x7761_6C6C_766F_6964
}
