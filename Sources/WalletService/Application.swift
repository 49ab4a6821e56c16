import AppStore
import Foundation
import GooglePlay
import HTTPServer
public import Locking
public import Logging
import ServiceAPI
import ServiceConsole
import ServiceSupport
import ServiceWorkers
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
    /// The operations port's server (WALLET_OPS_LISTEN): probes and metrics.
    let operationsServer: Server?
    /// The HTTP API's routes and pools.
    private let api: HTTPAPI
    /// The support console, when it is on.
    private let console: SupportConsole?
    private let workers: BackgroundWorkers
    private let logger: Logger

    /// Every limit below comes from `configuration`, which checked it.
    init(configuration: Configuration, database: DatabaseEndpoint, logger: Logger, clock: any WorkClock) throws {
        self.configuration = configuration
        self.database = database
        self.logger = logger
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
        let apple = configuration.apple, google = configuration.google
        let environments = apple.environments.map { Environment(rawValue: $0) }
        let transactions = try AppStoreSetup.verifier(apple)
        let serverAPI = try AppStoreSetup.serverAPIClient(configuration, metrics: metrics, logger: logger, clock: clock)
        let googlePlay = try GooglePlaySetup.client(configuration, metrics: metrics, clock: clock)
        let pushAuthenticator = GooglePlaySetup.pushAuthenticator(configuration, metrics: metrics, clock: clock)
        let notifications = NotificationProcessor(
            ledger: ledger, verifier: transactions, metrics: metrics, readiness: readiness,
            queueConsumption: serverAPI != nil && apple.api.consumptionConsent,
            refusals: NotificationRefusals(logger: logger, clock: clock), charges: configuration.chargePolicy,
            logger: logger)
        let googleVoids = googlePlay.map { [ledger, metrics] in
            GooglePlayVoids(client: $0, ledger: ledger, metrics: metrics, logger: logger)
        }
        let operationsRouter = configuration.opsListen == nil ? nil : Router()
        api = HTTPAPI(
            router: router, operations: operationsRouter, ledger: ledger, metrics: metrics, readiness: readiness,
            transactions: transactions,
            serverAPI: serverAPI, googlePlay: googlePlay, pushAuthenticator: pushAuthenticator, notifications: notifications,
            googleVoids: googleVoids,
            settings: .init(
                requestTimeoutSeconds: configuration.requestTimeoutSeconds, creditModes: configuration.creditVerification,
                appleEnvironments: environments,
                creditPolicy: configuration.creditPolicy,
                receipts: AppStoreSetup.receiptVerifier(apple),
                googlePolicy: PurchasePolicy(allowTestPurchases: google.allowTestPurchases,
                                             requireAccountID: google.requireAccountID),
                creditFromNotifications: configuration.creditFromNotifications,
                grantAmountMax: Int64(configuration.grantAmountMax),
                metricsToken: try configuration.metricsToken(),
                googlePackageName: google.packageName,
                storeLookups: .init(configuration.storeLookupThreads, configuration.storeLookupQueueDepthMax),
                notifications: .init(configuration.notificationThreads, configuration.notificationQueueDepthMax),
                googlePushes: .init(configuration.googlePushThreads, configuration.googlePushQueueDepthMax)),
            clock: clock, logger: logger)

        console = !configuration.adminConsole ? nil : SupportConsole(
            router: router, ledger: ledger, readiness: readiness, clock: clock, threads: configuration.consoleThreads,
            queueDepthMax: configuration.consoleQueueDepthMax, sessionMinutes: configuration.adminSessionMinutes,
            cookieSecure: configuration.consoleCookieSecure, trustedProxies: configuration.trustedProxies,
            requestTimeoutSeconds: configuration.requestTimeoutSeconds, logger: logger)

        metrics.seed(routes: router.routes + (operationsRouter?.routes ?? []))
        if let listen = configuration.opsListen, let operationsRouter {
            operationsServer = Server(
                configuration: .init(
                    host: listen.host, port: listen.port, threads: 1, maxBodyBytes: configuration.bodyBytesMax,
                    maxHeaderBytes: configuration.headerBytesMax, maxConnections: Self.operationsConnectionsMax,
                    idleTimeoutSeconds: configuration.idleTimeoutSeconds,
                    requestTimeoutSeconds: configuration.requestTimeoutSeconds,
                    shutdownGraceSeconds: configuration.shutdownGraceSeconds,
                    maxConnectionsPerAddress: Self.operationsConnectionsMax),
                router: operationsRouter,
                logger: Logger(label: "wallet.ops", level: logger.level, metadata: logger.metadata),
                observer: metrics.observe)
        } else {
            operationsServer = nil
        }
        server = Server(
            configuration: .init(
                host: configuration.listen.host, port: configuration.listen.port, threads: configuration.httpThreads,
                maxBodyBytes: configuration.bodyBytesMax, maxHeaderBytes: configuration.headerBytesMax,
                maxConnections: configuration.connectionsMax, idleTimeoutSeconds: configuration.idleTimeoutSeconds,
                requestTimeoutSeconds: configuration.requestTimeoutSeconds,
                shutdownGraceSeconds: configuration.shutdownGraceSeconds,
                maxConnectionsPerAddress: configuration.connectionsPerIPMax),
            router: router,
            logger: Logger(label: "wallet.http", level: logger.level, metadata: logger.metadata), observer: metrics.observe)
        workers = BackgroundWorkers(
            ledger: ledger, readiness: readiness, metrics: metrics, notifications: notifications, serverAPI: serverAPI,
            googlePlay: googlePlay, googleVoids: googleVoids,
            settings: .init(
                migrate: configuration.migrateOnStart,
                purge: .init(retentionHours: configuration.idempotencyRetentionHours,
                             eventRetentionDays: configuration.eventRetentionDays,
                             unclaimedRetentionDays: configuration.unclaimedRetentionDays,
                             intervalSeconds: Double(configuration.idempotencyPurgeIntervalSeconds),
                             roundRowsMax: configuration.idempotencyPurgeRoundRowsMax,
                             roundsMax: configuration.idempotencyPurgeRoundsMax),
                holdSweepIntervalSeconds: Double(configuration.holdSweepIntervalSeconds),
                holdSweepWalletsMax: configuration.holdSweepWalletsMax,
                reconcileIntervalMinutes: apple.api.reconcileIntervalMinutes, appleEnvironments: environments,
                consumptionConsent: apple.api.consumptionConsent, refundPreference: apple.api.refundPreference,
                voidedPollMinutes: google.voidedPollMinutes,
                webhooks: .init(threads: configuration.webhookThreads, timeoutSeconds: configuration.webhookTimeoutSeconds,
                                retry: WebhookRetry(hours: configuration.webhookRetryHours,
                                                    firstSeconds: configuration.webhookFirstRetrySeconds),
                                allowHTTP: configuration.webhooksAllowHTTP),
                verifyIntervalSeconds: configuration.verifyIntervalSeconds),
            clock: clock, logger: logger,
            afterSchema: { [console, ledger, namespace = apple.accountTokenNamespace,
                            paidFirst = configuration.spendPaidFirst, refundDebt = configuration.refundDebt,
                            startupReadSeconds = configuration.startupReadTimeoutSeconds] in
                try console?.loadCookieKey(deadline: .now + .seconds(startupReadSeconds))
                // A wallet an admin script makes records its App Store token
                // too, and a script takes coins from lots in the same order.
                try ledger.setAccountTokenNamespace(namespace, deadline: .now + .seconds(startupReadSeconds))
                try ledger.setSpendingOrder(paidFirst: paidFirst, deadline: .now + .seconds(startupReadSeconds))
                try ledger.setRefundDebt(refundDebt, deadline: .now + .seconds(startupReadSeconds))
            })
    }

    /// The operations port's connections at most: a scraper and probes.
    static let operationsConnectionsMax = 64

    /// The bound port (useful with port 0).
    public var port: UInt16 { server.port }
    /// The operations port's, when there is one.
    public var operationsPort: UInt16? { operationsServer?.port }

    /// Opens the port and starts the background work. The database may still
    /// be coming up: the service then answers 503 until it is reachable and
    /// migrated, and `/readyz` says so.
    public func start() throws {
        workers.start()
        try server.start()
        logger.info("listening", ["http.address": "\(configuration.listen.host):\(port)"])
        if let operationsServer, let listen = configuration.opsListen {
            try operationsServer.start()
            logger.info("operations listening", ["http.address": "\(listen.host):\(operationsServer.port)"])
        }
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
        operationsServer?.shutdown()
        api.stop(timeoutSeconds: graceSeconds)
        console?.stop(timeoutSeconds: graceSeconds)
        workers.stop()
        ledger.shutdown(timeoutSeconds: graceSeconds)
        database.close()
        logger.info("stopped")
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
