import AppStore
import Foundation
import Locking
import Logging
import ServiceSupport
import ServiceWorkers
import WalletService
import WalletStore

/// `wallet appstore reconcile` and `wallet googleplay reconcile`, on the
/// service's own parts: the sweeps `serve` runs on its schedule, run once.
enum ReconcileCommand {
    struct Run: Sendable {
        /// `seen=N applied=N already=N refused=N`, then ` credited=N` (the
        /// App Store's charges credited) or ` failed=N` (Google Play's voids).
        var summaryLine: String
        /// One line per refused notification or voided-purchases entry.
        var refusals: [String]
        /// One line per void the database did not apply (the next run tries
        /// it again): exit 1, the rest applied.
        var failures: [String] = []
        /// Set when the API or the database could not be read: exit 1.
        var failure: String?
    }

    /// Sweeps `environments` (default: the accepted ones). With `since`, the
    /// range `since`…`until` (default now) and no mark moves; without it,
    /// the scheduled sweep's range, and the marks move on success.
    static func run(configuration: Configuration, since: Date?, until: Date?, environments: [String]?,
                           logger: Logger) throws -> Run {
        try configuration.validateServerAPI()
        let metrics = Metrics()
        guard let client = try AppStoreSetup.serverAPIClient(configuration, metrics: metrics, logger: logger) else {
            throw Configuration.ConfigurationError(variable: "WALLET_APPLE_API_KEY_ID", message: "must be set")
        }
        return try withLedger(configuration, metrics: metrics, logger: logger) { ledger in
            let notifications = NotificationProcessor(
                ledger: ledger, verifier: try AppStoreSetup.verifier(configuration.apple), metrics: metrics, readiness: nil,
                queueConsumption: configuration.apple.api.consumptionConsent,
                refusals: NotificationRefusals(logger: logger), charges: configuration.chargePolicy, logger: logger)
            let reconciler = Reconciler(client: client, notifications: notifications, logger: logger)
            let chosen = (environments ?? configuration.apple.environments).map { Environment(rawValue: $0) }
            return try sweep(reconciler.sweeps(chosen), lockKey: Ledger.reconcileLockKey, since: since, until: until,
                             ledger: ledger, line: \.lineWithCharges)
        }
    }

    /// `wallet googleplay reconcile`: Google Play's voided purchases, from
    /// `since` (at most 30 days back) when given, else since the last sweep.
    static func runVoidedSweep(configuration: Configuration, since: Date?, logger: Logger) throws -> Run {
        let metrics = Metrics()
        guard let client = try GooglePlaySetup.client(configuration, metrics: metrics) else {
            throw Configuration.ConfigurationError(variable: "WALLET_GOOGLE_SERVICE_ACCOUNT_FILE",
                                                   message: "must be set, with WALLET_GOOGLE_PACKAGE_NAME")
        }
        return try withLedger(configuration, metrics: metrics, logger: logger) { ledger in
            let sweep = VoidedPurchasesSweep(voids: GooglePlayVoids(client: client, ledger: ledger, metrics: metrics,
                                                                     logger: logger))
            let oldest = Date().addingTimeInterval(-Double(sweep.historyDaysMax - 1) * 86_400)
            return try Self.sweep([sweep], lockKey: Ledger.voidedSweepLockKey, since: since.map { max($0, oldest) },
                                  until: nil, ledger: ledger, line: \.lineWithFailures)
        }
    }

    /// With `since`, the range `since`…`until` (default now) and no mark
    /// moves; without it, the scheduled sweep's range, and the marks move on
    /// success.
    /// The summary is printed as `line` says.
    private static func sweep(_ sweeps: [any MarkedSweep], lockKey: Int64, since: Date?, until: Date?, ledger: Ledger,
                              line: (Reconciler.Summary) -> String = \.line) throws -> Run {
        do {
            var summary = Reconciler.Summary()
            if let since {
                for sweep in sweeps { summary.add(try sweep.sweep(from: since, to: until ?? Date())) }
            } else {
                guard let swept = try Reconciler.sweepSinceMarks(sweeps, lockKey: lockKey, ledger: ledger,
                                                                 clock: SystemClock()) else {
                    return Run(summaryLine: line(summary), refusals: [],
                               failure: "another instance is sweeping now; try again, or pass --since")
                }
                summary = swept
            }
            return Run(summaryLine: line(summary), refusals: summary.refusals, failures: summary.failures, failure: nil)
        } catch let error as Reconciler.SweepError {
            return Run(summaryLine: line(Reconciler.Summary()), refusals: [], failure: error.description)
        }
    }

    /// A small ledger on the configured database (its session URL), or on
    /// the embedded one started for the command.
    private static func withLedger(_ configuration: Configuration, metrics: Metrics, logger: Logger,
                                   _ body: (Ledger) throws -> Run) throws -> Run {
        let database = try configuration.openDatabase(session: true, logger: Logger(label: "wallet", level: .warning))
        defer { database.close() }
        // One sweep at a time, applying one notification or void at a time.
        let ledger = Ledger(
            configuration: .init(conninfo: database.conninfo, poolSize: 2, writers: 1, batchOperationsMax: 1,
                                 statementTimeoutMilliseconds: configuration.reconcileCommandStatementTimeoutMilliseconds,
                                 acquireTimeoutMilliseconds: configuration.databaseAcquireTimeoutMillisecondsMax,
                                 lockTimeoutMilliseconds: configuration.lockTimeoutMilliseconds),
            metrics: metrics, logger: logger)
        defer { ledger.shutdown(timeoutSeconds: Double(configuration.shutdownGraceSeconds)) }
        try ledger.bringSchemaUp(migrate: false)
        return try body(ledger)
    }
}
