import Locking
import Postgres
import WalletCore

/// The one way the store writes outside group commit: App Store
/// notifications, Google Play voids, refusal records, the console's
/// sessions and revocations, hold expiry, the outbox, sweep marks and
/// upkeep.
///
/// - Every write is a transaction that carries its own settings
///   (`synchronous_commit = on`, the statement and lock timeouts), set in
///   the same round trip: behind a pooler in transaction mode the session
///   a connection was set up on is not the one a later transaction gets.
/// - A write is run again only when it provably never reached the server
///   (`StoreFailure.notSent`), while its deadline leaves time to send it.
///   A write that was sent is never run again here: its caller hears
///   `outcome_unknown` and decides, by the key that makes it idempotent.
/// - Failures become `WalletError`s through `StoreFailure`, as group
///   commit's do: `database_unavailable` only for what never reached the
///   server.
enum WriteShape {
    /// One statement, its own transaction: the settings go ahead of it in
    /// one pipeline, so it costs one round trip.
    case statement
    /// Several statements between BEGIN (which carries the settings) and
    /// COMMIT.
    case transaction
}

/// The pause before a retry is on `clock`.
func writeBounded<T>(_ shape: WriteShape, pool: ConnectionPool, metrics: any StoreMetrics,
                     deadline: ContinuousClock.Instant, clock: any WorkClock = SystemClock(),
                     _ body: (Connection) throws -> T) throws -> T {
    var attempt = 0
    while true {
        attempt += 1
        do {
            switch shape {
            case .statement: return try pool.withSingleStatement(deadline: deadline, body)
            case .transaction: return try pool.withTransaction(deadline: deadline, body)
            }
        } catch let error as PostgresError {
            metrics.countDatabaseError(error)
            let failure = StoreFailure(error)
            if failure == .notSent, deadline > .now + GroupCommit.sendTimeMin {
                GroupCommit.pauseBeforeRetry(attempt, on: clock)
                continue
            }
            throw failure.walletError ?? error
        }
    }
}
