import Foundation
import HTTPServer
import Locking
public import Logging
import Postgres
import WalletCore

/// The running service: database pools, group-commit writers, the HTTP
/// server and the background upkeep. `main` builds it with
/// `buildApplication(configuration:logger:)`; tests call the same factory
/// with their own database and port 0.
public final class Application: Sendable {
    public let configuration: Configuration
    /// The database the service uses (the embedded one's conninfo, or the URL).
    public let databaseConninfo: String
    public let embeddedDatabase: EmbeddedDatabase?
    let pool: ConnectionPool
    let writerPool: ConnectionPool
    let groupCommit: GroupCommit
    let metrics: Metrics
    let readiness: Readiness
    let server: Server
    let router: Router
    let blockingWork: BlockingWork
    let notificationWork: BlockingWork
    private let logger: Logger
    private let upkeep: Upkeep

    static let notificationThreads = 2
    static let notificationQueueDepthMax = 32

    init(configuration: Configuration, databaseConninfo: String, embeddedDatabase: EmbeddedDatabase?,
         logger: Logger) throws {
        self.configuration = configuration
        self.databaseConninfo = databaseConninfo
        self.embeddedDatabase = embeddedDatabase
        self.logger = logger
        metrics = Metrics()
        readiness = Readiness()

        let databaseLogger = Logger(label: "wallet.db", level: logger.level, metadata: logger.metadata)
        var connection = Connection.Options(conninfo: databaseConninfo)
        connection.statementTimeoutMilliseconds = max(1_000, configuration.requestTimeoutSeconds * 1_000)
        connection.connectTimeoutSeconds = 3
        var poolConfiguration = ConnectionPool.Configuration(connection: connection)
        poolConfiguration.maximumConnections = configuration.databasePoolSize
        poolConfiguration.acquireTimeoutMilliseconds = min(5_000, configuration.requestTimeoutSeconds * 1_000)
        pool = ConnectionPool(configuration: poolConfiguration, logger: databaseLogger)

        // The writers get their own connections, one each, apart from reads.
        var writerConfiguration = poolConfiguration
        writerConfiguration.maximumConnections = configuration.writers
        // A wallet held by another transaction fails its batch soon, and
        // the batch's other operations commit without it.
        writerConfiguration.connection.lockTimeoutMilliseconds = configuration.lockTimeoutMilliseconds
        writerPool = ConnectionPool(configuration: writerConfiguration, logger: databaseLogger)
        groupCommit = GroupCommit(writerCount: configuration.writers, batchOperationsMax: configuration.batchOperationsMax,
                                  pool: writerPool, metrics: metrics, logger: logger)

        router = Router()
        let transactions = try AppStoreSetup.verifier(configuration.apple)
        blockingWork = BlockingWork(threads: 4, queueDepthMax: 256)
        // Notifications need no key, so their work is CPU (signature checks)
        // anyone can ask for: two threads, and a short queue past which Apple
        // is told to retry.
        notificationWork = BlockingWork(threads: Self.notificationThreads, queueDepthMax: Self.notificationQueueDepthMax,
                                        name: "wallet-notifications")
        let reads = ServerThreadReads(pool: pool, metrics: metrics)
        let api = WalletAPI(
            reads: reads, groupCommit: groupCommit, authenticator: Authenticator(reads: reads),
            credits: CreditVerification(configuration: configuration, transactions: transactions),
            blockingWork: blockingWork, metrics: metrics, readiness: readiness, requestTimeoutSeconds: configuration.requestTimeoutSeconds,
            logger: logger)
        api.register(on: router)
        OperationsAPI(pool: pool, reads: reads, readiness: readiness, metrics: metrics, groupCommit: groupCommit)
            .register(on: router)
        AppStoreAPI(pool: pool, verifier: transactions, work: notificationWork, metrics: metrics,
                    readiness: readiness, requestTimeoutSeconds: configuration.requestTimeoutSeconds, logger: logger)
            .register(on: router)

        let metrics = metrics
        server = Server(
            configuration: .init(
                host: configuration.listen.host, port: configuration.listen.port, threads: configuration.httpThreads,
                maxBodyBytes: configuration.maxBodyBytes, maxHeaderBytes: configuration.maxHeaderBytes,
                maxConnections: configuration.maxConnections, idleTimeoutSeconds: configuration.idleTimeoutSeconds,
                requestTimeoutSeconds: configuration.requestTimeoutSeconds, shutdownGraceSeconds: 10),
            router: router,
            logger: Logger(label: "wallet.http", level: logger.level, metadata: logger.metadata),
            observer: { completed in
                metrics.observeRequest(method: completed.method, route: completed.routePattern,
                                       status: completed.status, durationSeconds: completed.durationSeconds)
            })
        upkeep = Upkeep(pool: pool, readiness: readiness, migrate: configuration.migrateOnStart,
                        retentionHours: configuration.idempotencyRetentionHours, logger: logger)
    }

    /// The bound port (useful with port 0).
    public var port: UInt16 { server.port }

    /// Opens the port and starts the background work. The database may still
    /// be coming up: the service then answers 503 until it is reachable and
    /// migrated, and `/readyz` says so.
    public func start() throws {
        upkeep.start()
        try server.start()
        logger.info("listening", ["http.address": "\(configuration.listen.host):\(port)"])
    }

    /// Waits until the schema is ready (migrations applied), at most `timeoutSeconds`.
    @discardableResult
    public func waitUntilReady(timeoutSeconds: Double) -> Bool {
        readiness.waitForSchema(timeoutSeconds: timeoutSeconds)
    }

    /// Stops accepting, finishes requests in flight, drains the writers,
    /// closes the pools and, for the embedded database, stops PostgreSQL.
    public func shutdown() {
        server.shutdown()
        blockingWork.stop(timeoutSeconds: 10)
        notificationWork.stop(timeoutSeconds: 10)
        groupCommit.shutdown(timeoutSeconds: 10)
        upkeep.stop()
        writerPool.shutdown()
        pool.shutdown()
        embeddedDatabase?.stopIfStartedHere()
        logger.info("stopped")
    }
}

/// Builds the service from its configuration. With no database URL it starts
/// the embedded development database first.
public func buildApplication(configuration: Configuration, logger: Logger) throws -> Application {
    try configuration.validateForServing()
    if let url = configuration.databaseURL {
        return try Application(configuration: configuration, databaseConninfo: url, embeddedDatabase: nil, logger: logger)
    }
    let embedded = try EmbeddedDatabase.start(dataDirectory: configuration.dataDirectory, logger: logger)
    do {
        return try Application(configuration: configuration, databaseConninfo: embedded.conninfo,
                               embeddedDatabase: embedded, logger: logger)
    } catch {
        embedded.stopIfStartedHere()
        throw error
    }
}

/// Whether the schema is in place. Until it is, requests that need the
/// database answer 503 and `/readyz` is not ready.
final class Readiness: Sendable {
    private let schemaReady = Monitor(false)

    var isSchemaReady: Bool { schemaReady.withLock { $0 } }

    func markSchemaReady() {
        schemaReady.withLock { $0 = true }
        schemaReady.broadcast()
    }

    func waitForSchema(timeoutSeconds: Double) -> Bool {
        schemaReady.wait(until: .now + .seconds(timeoutSeconds)) { $0 }
    }
}

/// Background work on one thread: bring the schema up (retrying with
/// backoff while the database is unreachable), then purge expired
/// idempotency records in small rounds.
final class Upkeep: Sendable {
    private let pool: ConnectionPool
    private let readiness: Readiness
    private let migrate: Bool
    private let retentionHours: Int
    private let logger: Logger
    private struct State: Sendable {
        /// Set by `stop`; a pause between rounds ends at once.
        var stopping = false
        /// The thread has started and not yet returned.
        var running = false
    }

    private let state = Monitor(State())
    private var stopping: Bool { state.withLock { $0.stopping } }

    static let purgeRoundRows = 1_000
    static let purgeRoundsMax = 20
    static let purgeIntervalSeconds = 60.0
    static let migrationSecondsMax = Duration.seconds(600)

    init(pool: ConnectionPool, readiness: Readiness, migrate: Bool, retentionHours: Int, logger: Logger) {
        self.pool = pool
        self.readiness = readiness
        self.migrate = migrate
        self.retentionHours = retentionHours
        self.logger = logger
    }

    func start() {
        state.withLock { $0.running = true }
        let thread = Thread { [self] in
            bringSchemaUp()
            while !stopping {
                purge()
                sleep(seconds: Self.purgeIntervalSeconds)
            }
            state.withLock { $0.running = false }
            state.broadcast()
        }
        thread.name = "wallet-upkeep"
        thread.start()
    }

    /// Stops the thread and waits for it, at most 10 seconds.
    func stop() {
        state.withLock { $0.stopping = true }
        state.broadcast()
        state.wait(until: .now + .seconds(10)) { !$0.running }
    }

    private func bringSchemaUp() {
        var backoffSeconds = 0.25
        while !stopping {
            do {
                try pool.withConnection(deadline: .now + .seconds(5)) { connection in
                    if migrate {
                        let migrator = try Schema.migrator(logger: logger)
                        // Migrations take what they take; connecting did not.
                        connection.deadline = .now + Self.migrationSecondsMax
                        try connection.withoutStatementTimeout { try migrator.migrate(connection: $0) }
                    } else {
                        _ = try connection.query("SELECT 1 FROM wallet.entries LIMIT 0")
                    }
                }
                readiness.markSchemaReady()
                return
            } catch {
                logger.warning("database not ready; retrying", ["error": String(reflecting: error),
                                                                "retry.seconds": String(backoffSeconds)])
            }
            sleep(seconds: backoffSeconds)
            backoffSeconds = min(backoffSeconds * 2, 5)
        }
    }

    private func purge() {
        guard readiness.isSchemaReady else { return }
        var total = 0
        for _ in 0..<Self.purgeRoundsMax {
            guard !stopping else { break }
            let deleted = (try? pool.withConnection {
                try LedgerStore.purgeIdempotencyKeys(olderThanHours: retentionHours, limit: Self.purgeRoundRows, on: $0)
            }) ?? 0
            total += deleted
            if deleted < Self.purgeRoundRows { break }
        }
        if total > 0 { logger.info("idempotency records purged", ["purge.rows": String(total)]) }
    }

    /// Pauses for `seconds`, or until `stop` is called.
    private func sleep(seconds: Double) {
        state.wait(until: .now + .seconds(seconds)) { $0.stopping }
    }
}
