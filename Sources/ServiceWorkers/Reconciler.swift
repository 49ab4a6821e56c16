package import AppStore
package import Foundation
package import Locking
package import Logging
package import ServiceSupport
import WalletCore
package import WalletStore

/// Reads App Store Notification History and puts every notification it
/// holds through the same verification and processing as the push route.
/// A notification already recorded (by its notificationUUID) is counted
/// `already` and changes nothing.
package struct Reconciler: Sendable {
    package let client: ServerAPIClient
    package let notifications: NotificationProcessor
    package let logger: Logger

    package init(client: ServerAPIClient, notifications: NotificationProcessor, logger: Logger) {
        self.client = client
        self.notifications = notifications
        self.logger = logger
    }

    /// Apple keeps 180 days of history.
    package static let historyDaysMax = 180
    /// A sweep starts this long before the last one ended, for notifications
    /// Apple records late.
    package static let overlapSeconds = 3_600.0
    /// The first sweep of a database looks back this far.
    package static let firstSweepDays = 7
    package static let pagesMax = 100_000
    package static let applySeconds = 10

    package struct Summary: Sendable, Equatable {
        package init() {}

        package var seen = 0
        package var applied = 0
        package var already = 0
        package var refused = 0
        /// ONE_TIME_CHARGE notifications credited by this sweep (their push
        /// was lost, or not yet applied).
        package var credited = 0
        /// Items the database did not apply, to be tried again (Google Play
        /// voids; the App Store sweep stops at its first instead).
        package var failed = 0
        /// notificationUUID (when readable) and reason of each refusal.
        package var refusals: [String] = []
        /// What each failure was, without tokens.
        package var failures: [String] = []
        /// Where the sweep's mark may move, in epoch milliseconds, when not
        /// to the end of its range: no further than the last item applied
        /// before the first it could not apply, so the next sweep (which
        /// starts an hour before the mark) reads that one again.
        package var markMilliseconds: Int64?

        package var line: String { "seen=\(seen) applied=\(applied) already=\(already) refused=\(refused)" }
        /// `line` and the failures, for a sweep that goes on past them.
        package var lineWithFailures: String { line + " failed=\(failed)" }
        /// `line` and the charges credited, for the App Store's sweep.
        package var lineWithCharges: String { line + " credited=\(credited)" }

        package mutating func add(_ other: Summary) {
            seen += other.seen
            applied += other.applied
            already += other.already
            refused += other.refused
            credited += other.credited
            failed += other.failed
            refusals += other.refusals
            failures += other.failures
        }
    }

    package struct SweepError: Error, CustomStringConvertible {
        package let description: String
    }

    /// Reads `environment`'s history from `start` to `end`, every page.
    package func sweep(_ environment: Environment, from start: Date, to end: Date) throws(SweepError) -> Summary {
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
                    if processed.charge == .credited { summary.credited += 1 }
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
package protocol MarkedSweep: Sendable {
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
    package struct HistorySweep: MarkedSweep {
        package let reconciler: Reconciler
        package let environment: Environment

        package var markKey: String { environment.rawValue }
        package var historyDaysMax: Int { Reconciler.historyDaysMax }
        package var firstSweepDays: Int { Reconciler.firstSweepDays }

        package func sweep(from start: Date, to end: Date) throws(Reconciler.SweepError) -> Reconciler.Summary {
            try reconciler.sweep(environment, from: start, to: end)
        }
    }

    package func sweeps(_ environments: [Environment]) -> [any MarkedSweep] {
        environments.map { HistorySweep(reconciler: self, environment: $0) }
    }

    /// The scheduled sweep: under the sweeps' advisory lock `lockKey`, each
    /// sweep from an hour before its mark (or its `firstSweepDays` back)
    /// until now; a mark moves only when its whole range was read, and then
    /// to its end, or where the sweep says (`Summary.markMilliseconds`) when
    /// something in the range must be read again. Nil when another instance
    /// is sweeping. `clock` says when now is.
    package static func sweepSinceMarks(_ sweeps: [any MarkedSweep], lockKey: Int64, ledger: Ledger,
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
package final class ReconcileSchedule: Sendable {
    package static let firstDelaySeconds = 5.0

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
    package init(name: String, threadName: String, sweeps: [any MarkedSweep], lockKey: Int64, ledger: Ledger,
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

    package func start() {
        state.startThread(name: threadName) { [self] stopping in
            state.pause(seconds: Self.firstDelaySeconds, on: clock)
            while !stopping() {
                if readiness.isSchemaReady { sweep() }
                state.pause(seconds: intervalSeconds, on: clock)
            }
        }
    }

    package func stop() {
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
