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
        /// Items the database did not apply, to be tried again (Google Play
        /// voids; the App Store sweep stops at its first instead).
        var failed = 0
        /// notificationUUID (when readable) and reason of each refusal.
        var refusals: [String] = []
        /// What each failure was, without tokens.
        var failures: [String] = []
        /// Where the sweep's mark may move, in epoch milliseconds, when not
        /// to the end of its range: no further than the last item applied
        /// before the first it could not apply, so the next sweep (which
        /// starts an hour before the mark) reads that one again.
        var markMilliseconds: Int64?

        var line: String { "seen=\(seen) applied=\(applied) already=\(already) refused=\(refused)" }
        /// `line` and the failures, for a sweep that goes on past them.
        var lineWithFailures: String { line + " failed=\(failed)" }

        mutating func add(_ other: Summary) {
            seen += other.seen
            applied += other.applied
            already += other.already
            refused += other.refused
            failed += other.failed
            refusals += other.refusals
            failures += other.failures
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
                    if processed.outcome == .duplicate { summary.already += 1 } else { summary.applied += 1 }
                } catch WalletError.verificationFailed(let reason, let detail) {
                    summary.refused += 1
                    summary.refusals.append("\(environment.rawValue) notification refused: \(reason.rawValue): \(detail)")
                } catch {
                    throw SweepError(description: "a notification could not be recorded: \(String(describing: error))")
                }
            }
            guard page.hasMore, let next = page.paginationToken else { return summary }
            token = next
        }
        throw SweepError(description: "\(environment.rawValue) notification history has more than \(Self.pagesMax) pages")
    }
}

/// One sweep that reads a store's record of what happened since its mark:
/// an App Store environment's notification history, or Google Play's
/// voided purchases.
protocol MarkedSweep: Sendable {
    /// Its row in the marks table.
    var markKey: String { get }
    /// How far back the store keeps what the sweep reads.
    var historyDaysMax: Int { get }
    /// How far back the first sweep of a database looks.
    var firstSweepDays: Int { get }
    func sweep(from start: Date, to end: Date) throws(Reconciler.SweepError) -> Reconciler.Summary
}

extension Reconciler {
    /// An App Store environment's notification history.
    struct HistorySweep: MarkedSweep {
        let reconciler: Reconciler
        let environment: Environment

        var markKey: String { environment.rawValue }
        var historyDaysMax: Int { Reconciler.historyDaysMax }
        var firstSweepDays: Int { Reconciler.firstSweepDays }

        func sweep(from start: Date, to end: Date) throws(Reconciler.SweepError) -> Reconciler.Summary {
            try reconciler.sweep(environment, from: start, to: end)
        }
    }

    func sweeps(_ environments: [Environment]) -> [any MarkedSweep] {
        environments.map { HistorySweep(reconciler: self, environment: $0) }
    }

    /// The scheduled sweep: under the sweeps' advisory lock `lockKey`, each
    /// sweep from an hour before its mark (or its `firstSweepDays` back)
    /// until now; a mark moves only when its whole range was read, and then
    /// to its end, or where the sweep says (`Summary.markMilliseconds`) when
    /// something in the range must be read again. Nil when another instance
    /// is sweeping. `clock` says when now is.
    static func sweepSinceMarks(_ sweeps: [any MarkedSweep], lockKey: Int64, ledger: Ledger,
                                clock: any WorkClock) throws -> Summary? {
        try ledger.withSweepLock(lockKey) { () throws -> Summary in
            var total = Summary()
            for sweep in sweeps {
                let end = clock.date
                let oldest = end.addingTimeInterval(-Double(sweep.historyDaysMax - 1) * 86_400)
                var start = end.addingTimeInterval(-Double(sweep.firstSweepDays) * 86_400)
                if let mark = try ledger.reconcileMark(sweep.markKey) {
                    start = Date(timeIntervalSince1970: Double(mark) / 1000).addingTimeInterval(-Self.overlapSeconds)
                }
                start = max(start, oldest)
                let summary = try sweep.sweep(from: start, to: end)
                total.add(summary)
                try ledger.advanceReconcileMark(sweep.markKey, toMilliseconds: summary.markMilliseconds
                                                    ?? Int64(end.timeIntervalSince1970 * 1000))
            }
            return total
        }
    }
}

/// `wallet serve`'s sweeps of one store: soon after start, then every
/// interval (`WALLET_APPLE_RECONCILE_INTERVAL_MINUTES`,
/// `WALLET_GOOGLE_VOIDED_POLL_MINUTES`), under the store's advisory lock so
/// one instance sweeps at a time.
final class ReconcileSchedule: Sendable {
    static let firstDelaySeconds = 5.0

    private let name: String
    private let threadName: String
    private let sweeps: [any MarkedSweep]
    private let lockKey: Int64
    private let ledger: Ledger
    private let intervalSeconds: Double
    private let readiness: Readiness
    private let clock: any WorkClock
    private let logger: Logger
    private let state = Monitor(RunState())

    /// `threadName` tells one store's sweeps from the other's.
    init(name: String, threadName: String, sweeps: [any MarkedSweep], lockKey: Int64, ledger: Ledger,
         intervalMinutes: Int, readiness: Readiness, clock: any WorkClock, logger: Logger) {
        self.name = name
        self.threadName = threadName
        self.sweeps = sweeps
        self.lockKey = lockKey
        self.ledger = ledger
        intervalSeconds = Double(intervalMinutes) * 60
        self.readiness = readiness
        self.clock = clock
        self.logger = logger
    }

    func start() {
        state.startThread(name: threadName) { [self] stopping in
            state.pause(seconds: Self.firstDelaySeconds, on: clock)
            while !stopping() {
                if readiness.isSchemaReady { sweep() }
                state.pause(seconds: intervalSeconds, on: clock)
            }
        }
    }

    func stop() {
        state.stopThread()
    }

    private func sweep() {
        do {
            guard let summary = try Reconciler.sweepSinceMarks(sweeps, lockKey: lockKey, ledger: ledger, clock: clock) else {
                logger.info("\(name) skipped: another instance is sweeping")
                return
            }
            for refusal in summary.refusals { logger.warning(refusal) }
            logger.info(name, ["reconcile.summary": summary.failed > 0 ? summary.lineWithFailures : summary.line])
        } catch {
            logger.warning("\(name) failed; the next sweep covers this one's range", ["error": String(describing: error)])
        }
    }
}

/// `wallet appstore reconcile`, on the service's own parts.
public enum ReconcileCommand {
    public struct Run: Sendable {
        /// `seen=N applied=N already=N refused=N` (and ` failed=N` for
        /// Google Play's voids).
        public var summaryLine: String
        /// One line per refused notification or voided-purchases entry.
        public var refusals: [String]
        /// One line per void the database did not apply (the next run tries
        /// it again): exit 1, the rest applied.
        public var failures: [String] = []
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
        return try withLedger(configuration, metrics: metrics, logger: logger) { ledger in
            let notifications = NotificationProcessor(
                ledger: ledger, verifier: try AppStoreSetup.verifier(configuration.apple), metrics: metrics, readiness: nil,
                queueConsumption: configuration.apple.api.consumptionConsent,
                refusals: NotificationRefusals(logger: logger), logger: logger)
            let reconciler = Reconciler(client: client, notifications: notifications, logger: logger)
            let chosen = (environments ?? configuration.apple.environments).map { Environment(rawValue: $0) }
            return try sweep(reconciler.sweeps(chosen), lockKey: Ledger.reconcileLockKey, since: since, until: until,
                             ledger: ledger)
        }
    }

    /// `wallet googleplay reconcile`: Google Play's voided purchases, from
    /// `since` (at most 30 days back) when given, else since the last sweep.
    public static func runVoidedSweep(configuration: Configuration, since: Date?, logger: Logger) throws -> Run {
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
