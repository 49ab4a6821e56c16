import Foundation
import Locking
import Postgres
import WalletCore

/// The one way a libmicrohttpd thread reads the database: API-key lookups,
/// `/readyz` and the GET handlers.
///
/// - A read holds its thread for `deadline` at most. A balance read
///   takes well under a millisecond and a page of entries a few; a second
///   is hundreds of times that, yet short enough that `/healthz` and the
///   other requests on the few server threads keep being answered.
/// - When a read finds the database unavailable, the reads of the next
///   `quiet` answer 503 at once instead of each spending its second
///   on a server thread. Without that, requests queued behind each other on
///   one thread would add their waits up while the database is stalled.
///   The first read after the quiet period probes the database again, so
///   the service recovers by itself within about a second of its return.
///   The quiet period is counted on the ledger's clock; the read's own
///   deadline, which bounds real work, on the real one.
final class ServerThreadReads: Sendable {
    static let deadline = Duration.seconds(1)
    static let quiet = Duration.seconds(1)

    private let pool: ConnectionPool
    private let metrics: any StoreMetrics
    private let quietUntil = Locked<ContinuousClock.Instant?>(nil)
    private let clock: any WorkClock

    init(pool: ConnectionPool, metrics: any StoreMetrics, clock: any WorkClock = SystemClock()) {
        self.pool = pool
        self.metrics = metrics
        self.clock = clock
    }

    /// Runs `body` on a pooled connection by `deadline` (`Self.deadline`
    /// from now unless given), or throws `WalletError.databaseUnavailable`
    /// at once in a quiet period.
    func run<T>(deadline: ContinuousClock.Instant? = nil, _ body: (Connection) throws -> T) throws -> T {
        if let until = quietUntil.withLock({ $0 }), clock.now < until {
            metrics.countDatabaseUnavailableFastFail()
            throw WalletError.databaseUnavailable
        }
        do {
            let result = try readBounded(pool: pool, metrics: metrics, deadline: deadline ?? .now + Self.deadline, body)
            quietUntil.withLock { $0 = nil }
            return result
        } catch WalletError.databaseUnavailable {
            quietUntil.withLock { $0 = clock.now + Self.quiet }
            throw WalletError.databaseUnavailable
        }
    }
}
