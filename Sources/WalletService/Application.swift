import AppStore
import Foundation
import GooglePlay
import HTTPServer
public import Locking
import Synchronization
public import Logging
import WalletCore
public import WalletStore

/// The running service: database pools, group-commit writers, the HTTP
/// server and the background upkeep. `main` builds it with
/// `buildApplication(configuration:logger:)`; tests call the same factory
/// with their own database and port 0.
public final class Application: Sendable {
    public let configuration: Configuration
    /// The database the service uses: the URL's, or the embedded one.
    public let database: DatabaseEndpoint
    public var embeddedDatabase: EmbeddedDatabase? { database.embedded }
    /// The ledger database: pools, writers, and every query.
    public let ledger: Ledger
    let metrics: Metrics
    let readiness: Readiness
    let server: Server
    let router: Router
    /// Credits whose purchase is looked up with a store.
    let blockingWork: BlockingWork
    /// App Store notifications.
    let notificationWork: BlockingWork
    /// Google Play pushes, when they are set up: apart from the App Store's,
    /// since a push may wait seconds for Google's keys.
    let googlePushWork: BlockingWork?
    /// The support console's page reads, when the console is on.
    let consoleWork: BlockingWork?
    /// The App Store Server API, when its credentials are set.
    let serverAPI: ServerAPIClient?
    /// Notification-history sweeps, when the API is set up and the interval is not 0.
    private let reconcile: ReconcileSchedule?
    /// Google Play voided-purchases sweeps, when Google Play is set up and the interval is not 0.
    private let voidedSweep: ReconcileSchedule?
    /// The outbox's calls: consumption answers when the operator consents,
    /// Google Play consumes when Google Play is set up.
    private let outbox: OutboxSender?
    private let holdSweeper: HoldSweeper
    private let logger: Logger
    private let upkeep: Upkeep
    /// What the background work's schedules, pauses and expiry run on.
    let clock: any WorkClock

    /// Every limit below comes from `configuration`, which checked it.
    init(configuration: Configuration, database: DatabaseEndpoint, logger: Logger, clock: any WorkClock) throws {
        self.configuration = configuration
        self.database = database
        self.logger = logger
        self.clock = clock
        metrics = Metrics()
        readiness = Readiness()

        // The server's statement timeout is a second longer than the
        // request's deadline: the service gives up first, and answers
        // outcome_unknown for what it sent; the server then ends the
        // statement the service no longer waits for. Equal, the two would
        // race, and the answer would depend on which fired first.
        ledger = Ledger(
            configuration: .init(
                conninfo: database.conninfo, poolSize: configuration.databasePoolSize, writers: configuration.writers,
                batchOperationsMax: configuration.batchOperationsMax,
                statementTimeoutMilliseconds: (configuration.requestTimeoutSeconds + 1) * 1_000,
                acquireTimeoutMilliseconds: min(configuration.databaseAcquireTimeoutMillisecondsMax,
                                                configuration.requestTimeoutSeconds * 1_000),
                lockTimeoutMilliseconds: configuration.lockTimeoutMilliseconds,
                sessionConninfo: configuration.databaseSessionURL,
                preparedStatements: configuration.databasePreparedStatements),
            metrics: metrics, logger: logger, clock: clock)

        router = Router()
        let transactions = try AppStoreSetup.verifier(configuration.apple)
        serverAPI = try AppStoreSetup.serverAPIClient(configuration, metrics: metrics, logger: logger, clock: clock)
        blockingWork = BlockingWork(threads: configuration.storeLookupThreads,
                                    queueDepthMax: configuration.storeLookupQueueDepthMax)
        notificationWork = BlockingWork(threads: configuration.notificationThreads,
                                        queueDepthMax: configuration.notificationQueueDepthMax, name: "wallet-notifications")
        let googlePlay = try GooglePlaySetup.client(configuration, metrics: metrics, clock: clock)
        let policy = PurchasePolicy(allowTestPurchases: configuration.google.allowTestPurchases,
                                    requireAccountID: configuration.google.requireAccountID)
        let googleCredits = googlePlay.map { [ledger] in
            GooglePlayCredits(client: $0, policy: policy, ledger: ledger, logger: logger)
        }
        let api = WalletAPI(
            ledger: ledger, authenticator: Authenticator(ledger: ledger, clock: clock),
            credits: CreditVerification(configuration: configuration, transactions: transactions, serverAPI: serverAPI,
                                        googlePlay: googleCredits, clock: clock, logger: logger),
            blockingWork: blockingWork, metrics: metrics, readiness: readiness, requestTimeoutSeconds: configuration.requestTimeoutSeconds,
            logger: logger)
        api.register(on: router)
        OperationsAPI(ledger: ledger, readiness: readiness, metrics: metrics).register(on: router)
        let notifications = NotificationProcessor(
            ledger: ledger, verifier: transactions, metrics: metrics, readiness: readiness,
            queueConsumption: serverAPI != nil && configuration.apple.api.consumptionConsent,
            refusals: NotificationRefusals(logger: logger, clock: clock), logger: logger)
        AppStoreAPI(notifications: notifications, work: notificationWork, metrics: metrics,
                    requestTimeoutSeconds: configuration.requestTimeoutSeconds, logger: logger)
            .register(on: router)
        if let serverAPI, configuration.apple.api.reconcileIntervalMinutes > 0 {
            let reconciler = Reconciler(client: serverAPI, notifications: notifications, logger: logger)
            reconcile = ReconcileSchedule(
                name: "notification reconciliation", threadName: "wallet-history",
                sweeps: reconciler.sweeps(configuration.apple.environments.map { Environment(rawValue: $0) }),
                lockKey: Ledger.reconcileLockKey, ledger: ledger,
                intervalMinutes: configuration.apple.api.reconcileIntervalMinutes, readiness: readiness, clock: clock,
                logger: logger)
        } else {
            reconcile = nil
        }
        var outboxHandlers: [OutboxSender.Handler] = []
        if let serverAPI, configuration.apple.api.consumptionConsent {
            outboxHandlers.append(.appStoreConsumption(client: serverAPI, preference: configuration.apple.api.refundPreference,
                                                       metrics: metrics))
        }
        if let googlePlay {
            outboxHandlers.append(.googlePlayConsume(client: googlePlay, metrics: metrics))
        }
        outbox = outboxHandlers.isEmpty ? nil
            : OutboxSender(ledger: ledger, handlers: outboxHandlers, readiness: readiness, clock: clock, logger: logger)
        let googleVoids = googlePlay.map { [ledger, metrics] in
            GooglePlayVoids(client: $0, ledger: ledger, metrics: metrics, logger: logger)
        }
        let pushAuthenticator = GooglePlaySetup.pushAuthenticator(configuration, metrics: metrics, clock: clock)
        // Pushes verify a token whose key may have to be fetched from Google
        // (up to its timeout, with other pushes waiting for the same fetch):
        // on threads of their own, so App Store notifications never wait
        // behind them.
        googlePushWork = pushAuthenticator != nil && googleVoids != nil
            ? BlockingWork(threads: configuration.googlePushThreads, queueDepthMax: configuration.googlePushQueueDepthMax,
                           name: "wallet-google-pushes")
            : nil
        GooglePlayNotificationsAPI(authenticator: pushAuthenticator, voids: googleVoids,
                                   packageName: configuration.google.packageName, work: googlePushWork,
                                   metrics: metrics, requestTimeoutSeconds: configuration.requestTimeoutSeconds, logger: logger)
            .register(on: router)
        if let googleVoids, configuration.google.voidedPollMinutes > 0 {
            voidedSweep = ReconcileSchedule(
                name: "voided purchases sweep", threadName: "wallet-voids",
                sweeps: [VoidedPurchasesSweep(voids: googleVoids)],
                lockKey: Ledger.voidedSweepLockKey, ledger: ledger, intervalMinutes: configuration.google.voidedPollMinutes,
                readiness: readiness, clock: clock, logger: logger)
        } else {
            voidedSweep = nil
        }

        let consoleCookies: SessionCookies?
        if configuration.adminConsole {
            consoleWork = BlockingWork(threads: configuration.consoleThreads, queueDepthMax: configuration.consoleQueueDepthMax,
                                       name: "wallet-console")
            consoleCookies = SessionCookies()
            AdminConsole(ledger: ledger, readiness: readiness, work: consoleWork!, cookies: consoleCookies!,
                         configuration: configuration, clock: clock, logger: logger).register(on: router)
        } else {
            consoleWork = nil
            consoleCookies = nil
        }

        metrics.seed(routes: router.routes)
        let metrics = metrics
        server = Server(
            configuration: .init(
                host: configuration.listen.host, port: configuration.listen.port, threads: configuration.httpThreads,
                maxBodyBytes: configuration.bodyBytesMax, maxHeaderBytes: configuration.headerBytesMax,
                maxConnections: configuration.connectionsMax, idleTimeoutSeconds: configuration.idleTimeoutSeconds,
                requestTimeoutSeconds: configuration.requestTimeoutSeconds,
                shutdownGraceSeconds: configuration.shutdownGraceSeconds,
                maxConnectionsPerAddress: configuration.connectionsPerIPMax),
            router: router,
            logger: Logger(label: "wallet.http", level: logger.level, metadata: logger.metadata),
            observer: { completed in
                metrics.observeRequest(method: completed.method, route: completed.routePattern,
                                       status: completed.status, durationSeconds: completed.durationSeconds)
            })
        holdSweeper = HoldSweeper(ledger: ledger, readiness: readiness,
                                  intervalSeconds: Double(configuration.holdSweepIntervalSeconds),
                                  walletsMax: configuration.holdSweepWalletsMax, clock: clock, logger: logger)
        upkeep = Upkeep(ledger: ledger, readiness: readiness, migrate: configuration.migrateOnStart,
                        purge: .init(retentionHours: configuration.idempotencyRetentionHours,
                                     intervalSeconds: Double(configuration.idempotencyPurgeIntervalSeconds),
                                     roundRowsMax: configuration.idempotencyPurgeRoundRowsMax,
                                     roundsMax: configuration.idempotencyPurgeRoundsMax),
                        clock: clock, logger: logger,
                        afterSchema: { [ledger, startupReadSeconds = configuration.startupReadTimeoutSeconds] in
                            try consoleCookies?.load(ledger.consoleCookieKey(deadline: .now + .seconds(startupReadSeconds)))
                        })
    }

    /// The bound port (useful with port 0).
    public var port: UInt16 { server.port }

    /// Opens the port and starts the background work. The database may still
    /// be coming up: the service then answers 503 until it is reachable and
    /// migrated, and `/readyz` says so.
    public func start() throws {
        upkeep.start()
        reconcile?.start()
        voidedSweep?.start()
        outbox?.start()
        holdSweeper.start()
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
        let graceSeconds = Double(configuration.shutdownGraceSeconds)
        server.shutdown()
        blockingWork.stop(timeoutSeconds: graceSeconds)
        notificationWork.stop(timeoutSeconds: graceSeconds)
        googlePushWork?.stop(timeoutSeconds: graceSeconds)
        consoleWork?.stop(timeoutSeconds: graceSeconds)
        reconcile?.stop()
        voidedSweep?.stop()
        outbox?.stop()
        holdSweeper.stop()
        upkeep.stop()
        ledger.shutdown(timeoutSeconds: graceSeconds)
        database.close()
        logger.info("stopped")
    }
}

extension Application {
    /// On the first start of an empty database, makes two keys to try the
    /// API with and returns them (for the console, never the log); nil once
    /// any key exists.
    public func createDevelopmentKeysIfFirstStart() throws -> DevelopmentKeys? {
        try ledger.createDevelopmentKeysIfFirstStart()
    }
}

/// Builds the service from its configuration, which `load` (or, for one
/// built in code, `validate`) has checked: this adds what serving needs, the
/// one time it is checked. With no database URL it starts the embedded
/// development database first. `clock` is the real one but in tests, which
/// move their own.
public func buildApplication(configuration: Configuration, logger: Logger,
                             clock: any WorkClock = SystemClock()) throws -> Application {
    try configuration.validateForServing()
    let database = try configuration.openDatabase(session: false, logger: logger)
    do {
        return try Application(configuration: configuration, database: database, logger: logger, clock: clock)
    } catch {
        database.close()
        throw error
    }
}

/// Whether the schema is in place. Until it is, requests that need the
/// database answer 503 and `/readyz` is not ready.
final class Readiness: Sendable {
    /// Read by every request's gate: an atomic load, no lock.
    private let schemaReady = Atomic<Bool>(false)
    /// The same flag, for `waitForSchema`, set under its lock so no waiter
    /// misses it. (Not an empty state: the thread sanitizer places an
    /// access to a zero-sized property on its neighbour and reports a race.)
    private let waiters = Monitor(false)

    var isSchemaReady: Bool { schemaReady.load(ordering: .acquiring) }

    func markSchemaReady() {
        waiters.withLock { ready in
            schemaReady.store(true, ordering: .releasing)
            ready = true
        }
        waiters.broadcast()
    }

    func waitForSchema(timeoutSeconds: Double) -> Bool {
        waiters.wait(until: .now + .seconds(timeoutSeconds)) { $0 }
    }
}

/// Background work on one thread: bring the schema up (retrying with
/// backoff while the database is unreachable), then purge expired
/// idempotency records in small rounds.
final class Upkeep: Sendable {
    /// Which idempotency records go, and how much of them at a time.
    struct Purge: Sendable {
        var retentionHours: Int
        var intervalSeconds: Double
        var roundRowsMax: Int
        var roundsMax: Int
    }

    private let ledger: Ledger
    private let readiness: Readiness
    private let migrate: Bool
    private let purge: Purge
    private let clock: any WorkClock
    private let logger: Logger
    /// What must be read from the database once the schema is up, before
    /// the service counts as ready (the console's cookie key).
    private let afterSchema: @Sendable () throws -> Void
    private let state = Monitor(RunState())

    init(ledger: Ledger, readiness: Readiness, migrate: Bool, purge: Purge, clock: any WorkClock, logger: Logger,
         afterSchema: @escaping @Sendable () throws -> Void) {
        self.ledger = ledger
        self.readiness = readiness
        self.migrate = migrate
        self.purge = purge
        self.clock = clock
        self.logger = logger
        self.afterSchema = afterSchema
    }

    func start() {
        state.startThread(name: "wallet-upkeep") { [self] stopping in
            bringSchemaUp(stopping)
            while !stopping() {
                purgeExpired(stopping)
                state.pause(seconds: purge.intervalSeconds, on: clock)
            }
        }
    }

    /// Stops the thread and waits for it, at most 10 seconds.
    func stop() {
        state.stopThread()
    }

    private func bringSchemaUp(_ stopping: () -> Bool) {
        var backoffSeconds = 0.25
        while !stopping() {
            do {
                try ledger.bringSchemaUp(migrate: migrate)
                try afterSchema()
                readiness.markSchemaReady()
                return
            } catch {
                logger.warning("database not ready; retrying", ["error": String(reflecting: error),
                                                                "retry.seconds": String(backoffSeconds)])
            }
            state.pause(seconds: backoffSeconds, on: clock)
            backoffSeconds = min(backoffSeconds * 2, 5)
        }
    }

    private func purgeExpired(_ stopping: () -> Bool) {
        guard readiness.isSchemaReady else { return }
        var total = 0
        for _ in 0..<purge.roundsMax {
            guard !stopping() else { break }
            let deleted = (try? ledger.purgeIdempotencyKeys(olderThanHours: purge.retentionHours,
                                                            limit: purge.roundRowsMax)) ?? 0
            total += deleted
            if deleted < purge.roundRowsMax { break }
        }
        if total > 0 { logger.info("idempotency records purged", ["purge.rows": String(total)]) }
    }
}

/// Expires holds past their time every few seconds. Nothing depends on it
/// for correctness (every write expires its wallet's due holds first, and
/// reads count only holds still in time); it keeps `held` and the hold
/// rows current for reports and admins.
///
/// When it looks is the service's clock; which holds are due is
/// PostgreSQL's, the clock every write and read of a hold goes by, so the
/// instances of a service never disagree about it.
final class HoldSweeper: Sendable {
    private let ledger: Ledger
    private let readiness: Readiness
    private let intervalSeconds: Double
    private let walletsMax: Int
    private let clock: any WorkClock
    private let logger: Logger
    private let state = Monitor(RunState())

    init(ledger: Ledger, readiness: Readiness, intervalSeconds: Double, walletsMax: Int, clock: any WorkClock,
         logger: Logger) {
        self.ledger = ledger
        self.readiness = readiness
        self.intervalSeconds = intervalSeconds
        self.walletsMax = walletsMax
        self.clock = clock
        self.logger = logger
    }

    func start() {
        state.startThread(name: "wallet-holds") { [self] stopping in
            while !stopping() {
                if readiness.isSchemaReady {
                    do {
                        let expired = try ledger.expireHolds(wallets: walletsMax)
                        if expired > 0 { logger.info("holds expired", ["holds.expired": String(expired)]) }
                    } catch {
                        logger.warning("holds could not be expired", ["error": String(reflecting: error)])
                    }
                }
                state.pause(seconds: intervalSeconds, on: clock)
            }
        }
    }

    func stop() {
        state.stopThread()
    }
}
