import AppStore
public import Foundation
import Locking
public import Logging
import WalletCore
import WalletStore

/// Reads App Store Notification History and puts every notification it
/// holds through the same verification and processing as the push route.
/// A notification already recorded (by its notificationUUID) is counted
/// `already` and changes nothing.
struct Reconciler: Sendable {
    let client: ServerAPIClient
    let notifications: NotificationProcessor
    let logger: Logger

    /// Apple keeps 180 days of history.
    static let historyDaysMax = 180
    /// A sweep starts this long before the last one ended, for notifications
    /// Apple records late.
    static let overlapSeconds = 3_600.0
    /// The first sweep of a database looks back this far.
    static let firstSweepDays = 7
    static let pagesMax = 100_000
    static let applySeconds = 10

    struct Summary: Sendable, Equatable {
        var seen = 0
        var applied = 0
        var already = 0
        var refused = 0
        /// notificationUUID (when readable) and reason of each refusal.
        var refusals: [String] = []

        var line: String { "seen=\(seen) applied=\(applied) already=\(already) refused=\(refused)" }

        mutating func add(_ other: Summary) {
            seen += other.seen
            applied += other.applied
            already += other.already
            refused += other.refused
            refusals += other.refusals
        }
    }

    struct SweepError: Error, CustomStringConvertible {
        let description: String
    }

    /// Reads `environment`'s history from `start` to `end`, every page.
    func sweep(_ environment: Environment, from start: Date, to end: Date) throws(SweepError) -> Summary {
        var summary = Summary()
        var token: String?
        for _ in 0..<Self.pagesMax {
            let page: ServerAPIClient.HistoryPage
            do {
                page = try client.notificationHistory(environment: environment, start: start, end: end,
                                                      paginationToken: token, deadline: client.deadline())
            } catch {
                throw SweepError(description: "\(environment.rawValue) notification history: \(error.description)")
            }
            for payload in page.signedPayloads {
                summary.seen += 1
                do {
                    let processed = try notifications.process(payload, requestID: nil,
                                                              deadline: .now + .seconds(Self.applySeconds))
                    if processed.outcome == "duplicate" { summary.already += 1 } else { summary.applied += 1 }
                } catch WalletError.verificationFailed(let reason, let detail) {
                    summary.refused += 1
                    summary.refusals.append("\(environment.rawValue) notification refused: \(reason): \(detail)")
                } catch {
                    throw SweepError(description: "a notification could not be recorded: \(String(describing: error))")
                }
            }
            guard page.hasMore, let next = page.paginationToken else { return summary }
            token = next
        }
        throw SweepError(description: "\(environment.rawValue) notification history has more than \(Self.pagesMax) pages")
    }

    /// The scheduled sweep: under the advisory lock, each environment from
    /// an hour before its mark (or `firstSweepDays` back) until now; the
    /// mark moves only when the whole range was read. Nil when another
    /// instance is sweeping.
    func sweepSinceMarks(_ environments: [Environment], ledger: Ledger) throws -> Summary? {
        try ledger.withReconcileLock { () throws -> Summary in
            var total = Summary()
            for environment in environments {
                let end = Date()
                let oldest = end.addingTimeInterval(-Double(Self.historyDaysMax - 1) * 86_400)
                var start = end.addingTimeInterval(-Double(Self.firstSweepDays) * 86_400)
                if let mark = try ledger.reconcileMark(environment.rawValue) {
                    start = Date(timeIntervalSince1970: Double(mark) / 1000).addingTimeInterval(-Self.overlapSeconds)
                }
                start = max(start, oldest)
                total.add(try sweep(environment, from: start, to: end))
                try ledger.advanceReconcileMark(environment.rawValue,
                                                toMilliseconds: Int64(end.timeIntervalSince1970 * 1000))
            }
            return total
        }
    }
}

/// `wallet serve`'s reconciliation: a sweep soon after start, then every
/// `WALLET_APPLE_RECONCILE_INTERVAL_MINUTES`.
final class ReconcileSchedule: Sendable {
    static let firstDelaySeconds = 5.0

    private let reconciler: Reconciler
    private let ledger: Ledger
    private let environments: [Environment]
    private let intervalSeconds: Double
    private let readiness: Readiness
    private let logger: Logger
    private let state = Monitor(RunState())

    init(reconciler: Reconciler, ledger: Ledger, environments: [Environment], intervalMinutes: Int,
         readiness: Readiness, logger: Logger) {
        self.reconciler = reconciler
        self.ledger = ledger
        self.environments = environments
        intervalSeconds = Double(intervalMinutes) * 60
        self.readiness = readiness
        self.logger = logger
    }

    func start() {
        state.startThread(name: "wallet-reconcile") { [self] stopping in
            state.pause(seconds: Self.firstDelaySeconds)
            while !stopping() {
                if readiness.isSchemaReady { sweep() }
                state.pause(seconds: intervalSeconds)
            }
        }
    }

    func stop() {
        state.stopThread()
    }

    private func sweep() {
        do {
            guard let summary = try reconciler.sweepSinceMarks(environments, ledger: ledger) else {
                logger.info("notification reconciliation skipped: another instance is sweeping")
                return
            }
            for refusal in summary.refusals { logger.warning(refusal) }
            logger.info("notification reconciliation", ["reconcile.summary": summary.line])
        } catch {
            logger.warning("notification reconciliation failed; the next sweep covers this one's range",
                           ["error": String(describing: error)])
        }
    }
}

/// `wallet appstore reconcile`, on the service's own parts.
public enum ReconcileCommand {
    public struct Run: Sendable {
        /// `seen=N applied=N already=N refused=N`.
        public var summaryLine: String
        /// One line per refused notification.
        public var refusals: [String]
        /// Set when the API or the database could not be read: exit 1.
        public var failure: String?
    }

    /// Sweeps `environments` (default: the accepted ones). With `since`, the
    /// range `since`…`until` (default now) and no mark moves; without it,
    /// the scheduled sweep's range, and the marks move on success.
    public static func run(configuration: Configuration, since: Date?, until: Date?, environments: [String]?,
                           logger: Logger) throws -> Run {
        try configuration.validateServerAPI()
        let metrics = Metrics()
        guard let client = try AppStoreSetup.serverAPIClient(configuration, metrics: metrics, logger: logger) else {
            throw Configuration.ConfigurationError(variable: "WALLET_APPLE_API_KEY_ID", message: "must be set")
        }
        var embedded: EmbeddedDatabase?
        let conninfo: String
        if let url = configuration.sessionDatabaseURL {
            conninfo = url
        } else {
            let started = try EmbeddedDatabase.start(dataDirectory: configuration.dataDirectory,
                                                     logger: Logger(label: "wallet", level: .warning))
            embedded = started
            conninfo = started.conninfo
        }
        defer { embedded?.stopIfStartedHere() }
        let ledger = Ledger(
            configuration: .init(conninfo: conninfo, poolSize: 2, writers: 1, batchOperationsMax: 1,
                                 statementTimeoutMilliseconds: 30_000, acquireTimeoutMilliseconds: 5_000,
                                 lockTimeoutMilliseconds: configuration.lockTimeoutMilliseconds),
            metrics: metrics, logger: logger)
        defer { ledger.shutdown(timeoutSeconds: 5) }
        try ledger.bringSchemaUp(migrate: false)

        let notifications = NotificationProcessor(
            ledger: ledger, verifier: try AppStoreSetup.verifier(configuration.apple), metrics: metrics, readiness: nil,
            queueConsumption: configuration.apple.api.consumptionConsent, logger: logger)
        let reconciler = Reconciler(client: client, notifications: notifications, logger: logger)
        let chosen = (environments ?? configuration.apple.environments).map { Environment(rawValue: $0) }
        do {
            var summary = Reconciler.Summary()
            if let since {
                for environment in chosen {
                    summary.add(try reconciler.sweep(environment, from: since, to: until ?? Date()))
                }
            } else {
                guard let swept = try reconciler.sweepSinceMarks(chosen, ledger: ledger) else {
                    return Run(summaryLine: summary.line, refusals: [],
                               failure: "another instance is sweeping now; try again, or pass --since")
                }
                summary = swept
            }
            return Run(summaryLine: summary.line, refusals: summary.refusals, failure: nil)
        } catch let error as Reconciler.SweepError {
            return Run(summaryLine: Reconciler.Summary().line, refusals: [], failure: error.description)
        }
    }
}
