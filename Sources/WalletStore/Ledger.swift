import Foundation
public import Locking
public import Logging
import Postgres
public import WalletCore

/// The ledger database, as the service sees it: the only way the service
/// reaches PostgreSQL. It owns the connection pools and the group-commit
/// writers, runs the SQL in `LedgerStore` and `APIKeys`, and answers every
/// failure as a `WalletError` (mapped once, by `StoreFailure`).
///
/// Reads made on an HTTP server thread go through `ServerThreadReads`:
/// bounded to a second, and answered at once while the database was just
/// found unavailable. Reads made elsewhere take the caller's deadline.
public final class Ledger: Sendable {
    public struct Configuration: Sendable {
        public var conninfo: String
        /// Connections for reads (and everything but group commit).
        public var poolSize: Int
        /// Group-commit writers, each with a connection of its own.
        public var writers: Int
        public var batchOperationsMax: Int
        /// The server-side bound on one statement.
        public var statementTimeoutMilliseconds: Int
        /// The longest wait for a pooled connection when the caller gives no deadline.
        public var acquireTimeoutMilliseconds: Int
        /// The longest a writer waits for a wallet another transaction holds.
        public var lockTimeoutMilliseconds: Int
        /// For migrations and the advisory-locked sweeps, which need a
        /// session of their own past any pooler; nil means `conninfo`.
        public var sessionConninfo: String?
        /// See `Connection.Options.preparedStatements`.
        public var preparedStatements: Bool

        public init(conninfo: String, poolSize: Int, writers: Int, batchOperationsMax: Int,
                    statementTimeoutMilliseconds: Int, acquireTimeoutMilliseconds: Int, lockTimeoutMilliseconds: Int,
                    sessionConninfo: String? = nil, preparedStatements: Bool = true) {
            self.sessionConninfo = sessionConninfo
            self.preparedStatements = preparedStatements
            self.conninfo = conninfo
            self.poolSize = poolSize
            self.writers = writers
            self.batchOperationsMax = batchOperationsMax
            self.statementTimeoutMilliseconds = statementTimeoutMilliseconds
            self.acquireTimeoutMilliseconds = acquireTimeoutMilliseconds
            self.lockTimeoutMilliseconds = lockTimeoutMilliseconds
        }
    }

    /// The pools, for `/metrics`.
    public struct PoolStatistics: Sendable, Equatable {
        public var open: Int
        public var inUse: Int
        public var waiting: Int
        public var maximum: Int
        /// Connections found broken since the pool started.
        public var broken: Int
    }

    let pool: ConnectionPool
    let writerPool: ConnectionPool
    /// Sessions for migrations and the reconciliation lock.
    let sessionPool: ConnectionPool
    /// Webhook delivery's own connections, so a backlog or a slow endpoint
    /// never holds one a request needs.
    let webhookPool: ConnectionPool
    public let groupCommit: GroupCommit
    let reads: ServerThreadReads
    let balanceReads: BalanceReads
    let metrics: any StoreMetrics
    private let logger: Logger
    /// What the pauses before retries and the server-thread reads' quiet
    /// period are counted on.
    let clock: any WorkClock
    /// Holds' owners, by hold id (see `holdOwner(id:)`).
    let holdOwners = BoundedCache<Int64, String>(entriesMax: Ledger.holdOwnersMax)
    /// A few megabytes at most; a hold it has forgotten costs one read.
    static let holdOwnersMax = 16_384
    /// The lease thread's batches and retries, and the sender threads'
    /// records.
    static let webhookConnections = 2

    public init(configuration: Configuration, metrics: any StoreMetrics, logger: Logger,
                clock: any WorkClock = SystemClock()) {
        self.clock = clock
        self.metrics = metrics
        self.logger = logger
        let databaseLogger = Logger(label: "wallet.db", level: logger.level, metadata: logger.metadata)
        var connection = Connection.Options(conninfo: configuration.conninfo)
        connection.statementTimeoutMilliseconds = configuration.statementTimeoutMilliseconds
        connection.connectTimeoutSeconds = 3
        connection.preparedStatements = configuration.preparedStatements
        // A row held by another transaction fails a write soon: a batch's
        // other operations then commit without it, and any other write is
        // answered `wallet_busy` instead of holding its thread.
        connection.lockTimeoutMilliseconds = configuration.lockTimeoutMilliseconds
        var poolConfiguration = ConnectionPool.Configuration(connection: connection)
        poolConfiguration.maximumConnections = configuration.poolSize
        poolConfiguration.acquireTimeoutMilliseconds = configuration.acquireTimeoutMilliseconds
        pool = ConnectionPool(configuration: poolConfiguration, logger: databaseLogger)

        // The writers get their own connections, one each, apart from reads.
        var writerConfiguration = poolConfiguration
        writerConfiguration.maximumConnections = configuration.writers
        writerPool = ConnectionPool(configuration: writerConfiguration, logger: databaseLogger)
        // Three: one start-up migration or sweep, and the ledger verifier's
        // check (which may take minutes) beside one of them.
        var sessionConfiguration = poolConfiguration
        sessionConfiguration.maximumConnections = 3
        sessionConfiguration.connection.conninfo = configuration.sessionConninfo ?? configuration.conninfo
        // A migration waits for the locks it needs, within its own deadline.
        sessionConfiguration.connection.lockTimeoutMilliseconds = 0
        sessionPool = ConnectionPool(configuration: sessionConfiguration, logger: databaseLogger)
        var webhookConfiguration = poolConfiguration
        webhookConfiguration.maximumConnections = Self.webhookConnections
        webhookPool = ConnectionPool(configuration: webhookConfiguration, logger: databaseLogger)
        groupCommit = GroupCommit(writerCount: configuration.writers, batchOperationsMax: configuration.batchOperationsMax,
                                  pool: writerPool, metrics: metrics, logger: logger, clock: clock)
        reads = ServerThreadReads(pool: pool, metrics: metrics, clock: clock)
        balanceReads = BalanceReads(reads: reads)
    }

    /// Drains the writers (at most `timeoutSeconds`) and closes the pools.
    public func shutdown(timeoutSeconds: Double) {
        groupCommit.shutdown(timeoutSeconds: timeoutSeconds)
        balanceReads.shutdown(timeoutSeconds: timeoutSeconds)
        writerPool.shutdown()
        sessionPool.shutdown()
        webhookPool.shutdown()
        pool.shutdown()
    }

    /// Balance reads waiting for the next batched query.
    public var balanceReadQueueDepth: Int { balanceReads.queueDepth }

    public var poolStatistics: PoolStatistics {
        let statistics = pool.statistics
        return PoolStatistics(open: statistics.open, inUse: statistics.inUse, waiting: statistics.waiting,
                              maximum: statistics.maximum, broken: statistics.broken)
    }

    // MARK: Reads on a server thread

    /// The user's balances, one per currency that has a wallet, handed to
    /// `completion` on the reader thread (see `BalanceReads`).
    public func balances(of userID: UserID,
                         completion: @escaping @Sendable (Result<[WalletBalance], any Error>) -> Void) {
        balanceReads.submit(userID, completion: completion)
    }

    /// Newest first, below `beforeID` when given; one more than `limit`, to
    /// tell whether another page follows.
    public func entries(of userID: UserID, currency: Currency?, beforeID: Int64?, limit: Int) throws -> [LedgerStore.Entry] {
        try reads.run { try LedgerStore.entries(of: userID, currency: currency, beforeID: beforeID, limit: limit, on: $0) }
    }

    /// A player's credits, newest first (`LedgerStore.credits`).
    public func credits(of userID: UserID, beforeEntryID: Int64?, limit: Int) throws -> [LedgerStore.Credit] {
        try reads.run { try LedgerStore.credits(of: userID, beforeEntryID: beforeEntryID, limit: limit, on: $0) }
    }

    /// The credit of a flowNO, or nil when it was never credited.
    public func credit(_ flowNo: FlowNumber, deadline: ContinuousClock.Instant? = nil) throws -> LedgerStore.Credit? {
        try reads.run(deadline: deadline) { try LedgerStore.credit(flowNo, on: $0) }
    }

    /// A credit through the group commit, waited for on this thread: by
    /// `deadline` the group commit answers (a second more is allowed for
    /// the answer to come back); past that its outcome is unknown.
    public func creditAndWait(_ operation: LedgerStore.CreditOperation,
                              deadline: ContinuousClock.Instant) throws -> LedgerStore.CreditResult {
        let answer = Monitor<Result<GroupCommit.Outcome, any Error>?>(nil)
        groupCommit.submit(.credit(operation), deadline: deadline) { result in
            answer.withLock { $0 = result }
            answer.broadcast()
        }
        guard let result = answer.wait(until: deadline + .seconds(1), for: { $0 != nil }, then: { state, _ in state }) else {
            throw WalletError.outcomeUnknown
        }
        guard case .credit(let credit) = try result.get() else { preconditionFailure("credit answered as another operation") }
        return credit
    }

    /// The live client whose key has this SHA-256, or nil.
    public func authenticate(hash: [UInt8]) throws -> APIClient? {
        // A read that may note the key's last use: that write carries the
        // transaction's settings like every other.
        try reads.run { try $0.withLocalSettings { try APIKeys.authenticate(hash: hash, on: $0) } }
    }

    /// A round trip to a database that takes writes, for `/readyz`: a
    /// server in recovery (a standby, or a primary not yet promoted, which
    /// a pooler or a stale address can lead to) answers, but is no primary.
    public func ping() throws {
        let writable = try reads.run { try $0.prepared("SELECT NOT pg_is_in_recovery()")[0].decode(Bool.self, at: 0) }
        guard writable else { throw WalletError.databaseUnavailable }
    }

    // MARK: Work off the server threads

    /// Applies a verified App Store notification once, by `deadline`;
    /// returns its outcome.
    public func applyNotification(_ record: LedgerStore.NotificationRecord, queueConsumption: Bool = false,
                                  deadline: ContinuousClock.Instant) throws -> LedgerStore.NotificationApplied {
        try writeBounded(.transaction, pool: pool, metrics: metrics, deadline: deadline) {
            try LedgerStore.applyNotification(record, queueConsumption: queueConsumption, on: $0)
        }
    }

    /// Applies this build's migrations and function files (with `migrate`),
    /// or checks that the schema is there. Throws while the database cannot
    /// be reached.
    public func bringSchemaUp(migrate: Bool) throws {
        try sessionPool.withConnection(deadline: .now + .seconds(5)) { connection in
            if migrate {
                let migrator = try Schema.migrator(logger: logger)
                // Migrations take what they take; connecting did not.
                connection.deadline = .now + Self.migrationSecondsMax
                try connection.withoutStatementTimeout { try migrator.migrate(connection: $0) }
            } else {
                _ = try connection.query("SELECT 1 FROM wallet.entries LIMIT 0")
            }
        }
    }

    static let migrationSecondsMax = Duration.seconds(600)

    /// Deletes up to `limit` idempotency records older than `hours`; returns how many.
    public func purgeIdempotencyKeys(olderThanHours hours: Int, limit: Int) throws -> Int {
        try writeBounded(.statement, pool: pool, metrics: metrics, deadline: .now + .seconds(10)) {
            try LedgerStore.purgeIdempotencyKeys(olderThanHours: hours, limit: limit, on: $0)
        }
    }

    /// On the first start of an empty database, makes two keys to try the
    /// API with and returns them; nil once any key exists.
    public func createDevelopmentKeysIfFirstStart() throws -> DevelopmentKeys? {
        try pool.withTransaction { try APIKeys.createDevelopmentKeysIfNone(on: $0) }
    }
}

/// A read by `deadline`. A read that meets a connection the server has
/// dropped (after a restart) is tried once more on a fresh one. Failures
/// come out as `WalletError.databaseUnavailable`, or as they are when they
/// are the service's own fault.
func readBounded<T>(pool: ConnectionPool, metrics: any StoreMetrics, deadline: ContinuousClock.Instant,
                    _ body: (Connection) throws -> T) throws -> T {
    var attempt = 0
    while true {
        attempt += 1
        do {
            return try pool.withConnection(deadline: deadline, body)
        } catch let error as PostgresError {
            metrics.countDatabaseError(error)
            if error.kind == .connection, attempt < 2 { continue }
            throw StoreFailure.walletError(reading: error) ?? error
        }
    }
}
