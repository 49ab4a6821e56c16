import Foundation
import Locking
public import Logging

/// A bounded pool of connections.
///
/// - At most `maximumConnections` exist; `acquire` waits until the caller's
///   deadline (or `acquireTimeoutMilliseconds` without one) and then fails
///   with `.poolTimeout`.
/// - The deadline of `acquire` is the deadline of the operation: connecting
///   and every statement on the connection handed out must finish by then.
/// - A connection found broken is closed and replaced by a new one on a later
///   acquire. When one breaks, the idle ones made before it are dropped too:
///   after a server restart they are all dead.
/// - Connections are made lazily, outside the lock.
public final class ConnectionPool: Sendable {
    public struct Configuration: Sendable {
        public var connection: Connection.Options
        public var maximumConnections: Int = 8
        public var acquireTimeoutMilliseconds: Int = 5_000
        /// Attempts for `withTransaction` when PostgreSQL reports a
        /// serialization failure or a deadlock.
        public var transactionAttemptsMax: Int = 5

        public init(connection: Connection.Options) {
            self.connection = connection
        }
    }

    public struct Statistics: Sendable, Equatable {
        public var open: Int
        public var inUse: Int
        public var waiting: Int
        public var maximum: Int
        /// Connections found broken since the pool started.
        public var broken: Int
    }

    private struct State: Sendable {
        var idle: [Connection] = []
        var open = 0
        var inUse = 0
        var waiting = 0
        var broken = 0
        var generation: UInt64 = 0
        var closed = false
    }

    public let configuration: Configuration
    private let logger: Logger
    /// Waiters for a connection wait on this, until one is idle, a new one
    /// may be made, or the pool closes.
    private let state = Monitor(State())

    public init(configuration: Configuration, logger: Logger) {
        precondition(configuration.maximumConnections > 0)
        self.configuration = configuration
        self.logger = logger
    }

    public var statistics: Statistics {
        state.withLock { state in
            Statistics(open: state.open, inUse: state.inUse, waiting: state.waiting,
                       maximum: configuration.maximumConnections, broken: state.broken)
        }
    }

    /// Takes a connection, waiting until `deadline` at most; its statements
    /// must answer by `deadline` too. Without one, the wait is
    /// `acquireTimeoutMilliseconds`, and statements get the server's
    /// statement timeout and a second more.
    public func acquire(deadline: ContinuousClock.Instant? = nil) throws(PostgresError) -> Connection {
        let acquireDeadline = deadline ?? .now + .milliseconds(configuration.acquireTimeoutMilliseconds)
        let statementDeadline = deadline
            ?? acquireDeadline + .milliseconds(configuration.connection.statementTimeoutMilliseconds) + .seconds(1)
        enum Grant {
            case idle(Connection)
            case make(generation: UInt64)
            case closed
            case timedOut
        }
        let maximumConnections = configuration.maximumConnections
        state.withLock { $0.waiting += 1 }
        let grant = state.wait(
            until: acquireDeadline,
            for: { $0.closed || !$0.idle.isEmpty || $0.open < maximumConnections }
        ) { state, ready -> Grant in
            state.waiting -= 1
            guard ready else { return .timedOut }
            if state.closed { return .closed }
            if let connection = state.idle.popLast() {
                state.inUse += 1
                return .idle(connection)
            }
            state.open += 1
            state.inUse += 1
            return .make(generation: state.generation)
        }
        switch grant {
        case .closed:
            throw PostgresError(kind: .poolClosed)
        case .timedOut:
            throw PostgresError(kind: .poolTimeout)
        case .idle(let connection):
            connection.deadline = statementDeadline
            return connection
        case .make(let generation):
            // Connecting takes a round trip or more: outside the lock.
            do {
                return try Connection(options: configuration.connection, generation: generation,
                                      deadline: statementDeadline)
            } catch {
                state.withLock { state in
                    state.open -= 1
                    state.inUse -= 1
                }
                state.signal()
                throw error
            }
        }
    }

    /// Gives a connection back. A broken one, or one left inside a
    /// transaction by a failed caller, is closed instead of reused.
    public func release(_ connection: Connection) {
        var reusable = !connection.isBroken
        if reusable, connection.isInTransaction {
            // A caller bailed out mid-transaction; never hand that state on.
            connection.deadline = .now + Self.rollbackSecondsMax
            do { try connection.execute("ROLLBACK") } catch { reusable = false }
        }
        let dropped = state.withLock { state -> [Connection] in
            state.inUse -= 1
            if reusable, !state.closed, connection.generation >= state.generation {
                state.idle.append(connection)
                return []
            }
            state.open -= 1
            var dropped: [Connection] = [connection]
            if connection.isBroken {
                state.broken += 1
                // Everything made before this failure is suspect.
                state.generation += 1
                dropped += state.idle
                state.open -= state.idle.count
                state.idle.removeAll()
            }
            return dropped
        }
        // One connection back wakes one waiter; a connection closed, or the
        // idle ones dropped, leave room to make new ones: wake everyone.
        if dropped.isEmpty {
            state.signal()
        } else {
            state.broadcast()
        }
        for stale in dropped { stale.close() }
    }

    /// Runs `body` with a connection and gives it back, whatever happens.
    public func withConnection<T>(deadline: ContinuousClock.Instant? = nil, _ body: (Connection) throws -> T) throws -> T {
        let connection = try acquire(deadline: deadline)
        defer { release(connection) }
        return try body(connection)
    }

    /// Runs `body` inside BEGIN … COMMIT on one connection.
    ///
    /// Serialization failures and deadlocks re-run the whole transaction, up
    /// to `transactionAttemptsMax` times. A connection that turns out dead at
    /// BEGIN is replaced, because nothing has run yet. Other failures roll
    /// back and are rethrown; a failure in BEGIN, COMMIT or ROLLBACK says so
    /// in `PostgresError.kind`.
    ///
    /// Only COMMIT can commit, so an error thrown before it is marked unsent
    /// (`sent == false`): nothing of the transaction can have committed.
    public func withTransaction<T>(deadline: ContinuousClock.Instant? = nil, attemptsMax: Int? = nil,
                                   _ body: (Connection) throws -> T) throws -> T {
        let attemptsMax = attemptsMax ?? configuration.transactionAttemptsMax
        var attempt = 0
        while true {
            attempt += 1
            let connection = try acquire(deadline: deadline)
            defer { release(connection) }
            do {
                try connection.begin()
            } catch {
                if error.kind == .connection, attempt <= configuration.maximumConnections { continue }
                if error.isUnavailable { throw error.unsent }
                throw PostgresError(kind: .transaction(.begin), sqlState: error.sqlState, serverMessage: error.serverMessage)
            }
            let value: T
            do {
                value = try body(connection)
            } catch let error as PostgresError {
                rollback(connection)
                if let state = error.sqlState, state.isRetryableTransactionFailure,
                   attempt < attemptsMax {
                    logger.debug("retrying transaction", ["db.sqlstate": state.code, "db.attempt": String(attempt)])
                    continue
                }
                throw error.unsent
            } catch {
                rollback(connection)
                throw error
            }
            do {
                try connection.execute("COMMIT")
            } catch {
                if let state = error.sqlState, state.isRetryableTransactionFailure, attempt < attemptsMax {
                    continue
                }
                // Whatever came back instead of COMMIT's answer (a session
                // ended mid-commit, a commit the standby never confirmed),
                // the transaction may have committed.
                var error = error
                error.sent = true
                if error.isUnavailable { throw error }
                throw PostgresError(kind: .transaction(.commit), sqlState: error.sqlState, serverMessage: error.serverMessage,
                                    sent: true)
            }
            return value
        }
    }

    /// Runs `body`, which sends a single statement, outside an explicit
    /// transaction: the statement is its own transaction, with no BEGIN and
    /// COMMIT round trips, and carries the settings `withTransaction` sets
    /// in BEGIN (`Connection.withLocalSettings`). Serialization failures and
    /// deadlocks run it again, as `withTransaction` does.
    public func withSingleStatement<T>(deadline: ContinuousClock.Instant? = nil, attemptsMax: Int? = nil,
                                       _ body: (Connection) throws -> T) throws -> T {
        let attemptsMax = attemptsMax ?? configuration.transactionAttemptsMax
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try withConnection(deadline: deadline) { try $0.withLocalSettings(body) }
            } catch let error as PostgresError {
                if let state = error.sqlState, state.isRetryableTransactionFailure, attempt < attemptsMax { continue }
                throw error
            }
        }
    }

    /// Most a ROLLBACK of a failed caller may take, past any deadline.
    static let rollbackSecondsMax = Duration.seconds(1)

    private func rollback(_ connection: Connection) {
        guard !connection.isBroken else { return }
        connection.deadline = .now + Self.rollbackSecondsMax
        do {
            try connection.execute("ROLLBACK")
        } catch {
            logger.warning("rollback failed", ["db.error": error.debugDescription])
        }
    }

    /// Closes idle connections and refuses new acquires. Connections in use
    /// are closed as they come back.
    public func shutdown() {
        let idle = state.withLock { state in
            state.closed = true
            let idle = state.idle
            state.open -= idle.count
            state.idle.removeAll()
            return idle
        }
        state.broadcast()
        for connection in idle { connection.close() }
    }
}
