package import AppStore
package import GooglePlay
package import HTTPServer
package import Locking
package import Logging
package import ServiceSupport
package import WalletCore
package import WalletStore

/// The HTTP API on one router: the wallet's routes and holds (credits
/// verified with the stores), the stores' notification routes, and the
/// operations routes; with the pools that keep a store's round trip, a
/// notification's checks and a push's key fetch off the server threads.
package final class HTTPAPI: Sendable {
    /// What the API is built from, read by the composition root from its
    /// configuration, which checked every value.
    package struct Settings: Sendable {
        /// Threads and a queue bound for one pool.
        package struct Pool: Sendable {
            package var threads: Int
            package var queueDepthMax: Int

            package init(_ threads: Int, _ queueDepthMax: Int) {
                self.threads = threads
                self.queueDepthMax = queueDepthMax
            }
        }

        package var requestTimeoutSeconds: Int
        /// The credit verification modes that are on.
        package var creditModes: Set<CreditSource>
        /// The App Store environments a credit is accepted from.
        package var appleEnvironments: [Environment]
        package var creditPolicy: CreditPolicy
        package var receipts: ReceiptVerifier
        package var googlePolicy: PurchasePolicy
        /// Credit a one-time product from Google's own PURCHASED notification.
        package var creditFromNotifications: Bool
        /// The most one grant gives (WALLET_GRANT_MAX_AMOUNT).
        package var grantAmountMax: Int64
        /// What `/metrics` asks for as a bearer token (WALLET_METRICS_TOKEN_FILE).
        package var metricsToken: String?
        package var googlePackageName: String?
        package var storeLookups: Pool
        package var notifications: Pool
        package var googlePushes: Pool

        package init(requestTimeoutSeconds: Int, creditModes: Set<CreditSource>, appleEnvironments: [Environment],
                     creditPolicy: CreditPolicy, receipts: ReceiptVerifier, googlePolicy: PurchasePolicy,
                     creditFromNotifications: Bool = true, grantAmountMax: Int64 = 1_000_000, metricsToken: String? = nil,
                     googlePackageName: String?, storeLookups: Pool,
                     notifications: Pool, googlePushes: Pool) {
            self.creditFromNotifications = creditFromNotifications
            self.grantAmountMax = grantAmountMax
            self.metricsToken = metricsToken
            self.requestTimeoutSeconds = requestTimeoutSeconds
            self.creditModes = creditModes
            self.appleEnvironments = appleEnvironments
            self.creditPolicy = creditPolicy
            self.receipts = receipts
            self.googlePolicy = googlePolicy
            self.googlePackageName = googlePackageName
            self.storeLookups = storeLookups
            self.notifications = notifications
            self.googlePushes = googlePushes
        }
    }

    /// Credits whose purchase is looked up with a store.
    private let blockingWork: BlockingWork
    /// App Store notifications.
    private let notificationWork: BlockingWork
    /// Google Play pushes, when they are set up: apart from the App Store's,
    /// since a push may wait seconds for Google's keys.
    private let googlePushWork: BlockingWork?

    /// Builds the API and registers its routes on `router`, and the probes
    /// and metrics on `operations` when there is an operations port (on
    /// `router` otherwise). A store's client is nil when that store is not
    /// set up; the caches' times are counted on `clock`.
    package init(router: Router, operations: Router? = nil, ledger: Ledger, metrics: Metrics, readiness: Readiness, transactions: SignedDataVerifier,
                 serverAPI: ServerAPIClient?, googlePlay: PlayClient?, pushAuthenticator: PushAuthenticator?,
                 notifications: NotificationProcessor, googleVoids: GooglePlayVoids?, settings: Settings, clock: any WorkClock,
                 logger: Logger) {
        blockingWork = BlockingWork(threads: settings.storeLookups.threads, queueDepthMax: settings.storeLookups.queueDepthMax)
        notificationWork = BlockingWork(threads: settings.notifications.threads,
                                        queueDepthMax: settings.notifications.queueDepthMax, name: "wallet-notifications")
        // Pushes verify a token whose key may have to be fetched from Google
        // (up to its timeout, with other pushes waiting for the same fetch):
        // on threads of their own, so App Store notifications never wait
        // behind them.
        googlePushWork = pushAuthenticator != nil && googleVoids != nil
            ? BlockingWork(threads: settings.googlePushes.threads, queueDepthMax: settings.googlePushes.queueDepthMax,
                           name: "wallet-google-pushes")
            : nil
        let googleCredits = googlePlay.map {
            GooglePlayCredits(client: $0, policy: settings.googlePolicy, ledger: ledger, logger: logger)
        }
        let credits = CreditVerification(
            modes: settings.creditModes, transactions: transactions, policy: settings.creditPolicy, receipts: settings.receipts,
            serverAPI: serverAPI, apiEnvironments: settings.appleEnvironments, googlePlay: googleCredits, clock: clock,
            logger: logger)
        WalletAPI(ledger: ledger, authenticator: Authenticator(ledger: ledger, clock: clock), credits: credits,
                  blockingWork: blockingWork,
                  metrics: metrics, readiness: readiness, requestTimeoutSeconds: settings.requestTimeoutSeconds,
                  grantAmountMax: settings.grantAmountMax, logger: logger)
            .register(on: router)
        let operationsAPI = OperationsAPI(ledger: ledger, readiness: readiness, metrics: metrics,
                                          metricsToken: settings.metricsToken)
        operationsAPI.registerProbes(on: operations ?? router)
        operationsAPI.registerDocument(on: router)
        AppStoreAPI(notifications: notifications, work: notificationWork, metrics: metrics,
                    requestTimeoutSeconds: settings.requestTimeoutSeconds, logger: logger)
            .register(on: router)
        GooglePlayNotificationsAPI(authenticator: pushAuthenticator, voids: googleVoids, packageName: settings.googlePackageName,
                                   purchases: settings.creditFromNotifications ? settings.googlePolicy : nil,
                                   work: googlePushWork, metrics: metrics,
                                   requestTimeoutSeconds: settings.requestTimeoutSeconds, logger: logger)
            .register(on: router)
    }

    /// Refuses new work, lets queued work finish, and waits for each pool's
    /// threads, at most `timeoutSeconds` each.
    package func stop(timeoutSeconds: Double) {
        blockingWork.stop(timeoutSeconds: timeoutSeconds)
        notificationWork.stop(timeoutSeconds: timeoutSeconds)
        googlePushWork?.stop(timeoutSeconds: timeoutSeconds)
    }
}
