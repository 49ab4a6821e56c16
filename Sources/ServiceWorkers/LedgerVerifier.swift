import Foundation
package import Locking
package import Logging
package import ServiceSupport
package import WalletStore

/// Checks the ledger's invariants in the background, every
/// WALLET_VERIFY_INTERVAL_SECONDS: the rules over what was written since the
/// last clean check (`Ledger.verifyLedger`, the incremental `wallet check`),
/// one instance of a service at a time (an advisory lock; the others skip
/// the round). Each violation is logged and counted on /metrics
/// (`wallet_invariant_violations_total`), and `wallet_verified_entry_id`
/// says how far the checkpoint reached. A round that finds violations
/// stores no checkpoint, so the next round finds them again (and counts
/// them again) until they are put right and a round is clean.
package final class LedgerVerifier: Sendable {
    /// The most one round may take: a first round, with no checkpoint yet,
    /// checks the whole ledger.
    static let roundSecondsMax = 3_600

    private let ledger: Ledger
    private let readiness: Readiness
    private let intervalSeconds: Double
    private let metrics: Metrics
    private let clock: any WorkClock
    private let logger: Logger
    private let state = Monitor(RunState())

    package init(ledger: Ledger, readiness: Readiness, intervalSeconds: Double, metrics: Metrics, clock: any WorkClock,
                 logger: Logger) {
        precondition(intervalSeconds > 0, "a verifier that is off is not built")
        self.ledger = ledger
        self.readiness = readiness
        self.intervalSeconds = intervalSeconds
        self.metrics = metrics
        self.clock = clock
        self.logger = logger
    }

    package func start() {
        state.startThread(name: "wallet-verify") { [self] stopping in
            while !stopping() {
                if readiness.isSchemaReady { verify() }
                state.pause(seconds: intervalSeconds, on: clock)
            }
        }
    }

    /// Stops the thread and waits for it, at most 10 seconds.
    package func stop() {
        state.stopThread()
    }

    private func verify() {
        let run: LedgerCheckRun
        do {
            guard let checked = try ledger.verifyLedger(deadline: .now + .seconds(Self.roundSecondsMax)) else { return }
            run = checked
        } catch {
            logger.warning("ledger check failed", ["error": String(reflecting: error)])
            return
        }
        for violation in run.violations {
            logger.error("ledger invariant violated", ["invariant": violation.invariant, "invariant.subject": violation.subject,
                                                       "invariant.detail": violation.detail])
        }
        metrics.recordLedgerCheck(violations: run.violations.count, verifiedEntryID: run.throughEntryID)
        logger.info("ledger checked", ["check.mode": run.mode.rawValue, "check.violations": String(run.violations.count),
                                       "check.milliseconds": String(run.durationMilliseconds)])
    }
}
