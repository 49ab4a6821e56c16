package import AppStore
package import Locking
package import Logging

/// What a refused App Store notification leaves besides its answer and its
/// count in `/metrics`: a log line and a row for the console, within bounds.
///
/// The endpoint takes no key, so anyone can send junk: a body that is not a
/// notification, a token whose signature or chain fails. Such a refusal
/// costs memory, not the disk. Of each reason at most one row a second is
/// kept, standing for itself and the refusals of its reason since the
/// previous row, and nothing client-chosen is stored (not its request id).
/// A refusal of data Apple signed (another bundle, environment or app: the
/// signature and chain held) is rare and says the service is set up wrong,
/// so every one is kept.
///
/// Log lines of every kind are limited to `logLinesMax` per reason per
/// `logIntervalSeconds`; the next line after a pause says how many were
/// left out (`log.suppressed`). The state has one entry per reason and
/// kind, a fixed set.
package final class NotificationRefusals: Sendable {
    package static let storeIntervalSeconds = 1
    package static let logLinesMax = 10
    package static let logIntervalSeconds = 60

    package struct Kind: Hashable {
        package var reason: VerificationFailure
        package var appleSigned: Bool

        package init(reason: VerificationFailure, appleSigned: Bool) {
            self.reason = reason
            self.appleSigned = appleSigned
        }
    }

    private struct Tally {
        /// When the last row of this kind was kept, and the refusals since.
        var lastStored: ContinuousClock.Instant?
        var notStored = 0
        /// The current log interval: when it began, lines logged, lines left out.
        var logIntervalStart: ContinuousClock.Instant?
        var logged = 0
        var suppressed = 0
    }

    private let tallies = Locked<[Kind: Tally]>([:])
    private let clock: any WorkClock
    private let logger: Logger

    package init(logger: Logger, clock: any WorkClock = SystemClock()) {
        self.logger = logger
        self.clock = clock
    }

    /// Notes one refusal: logs it if its reason has lines left in this
    /// interval, and answers how many refusals a row kept now stands for,
    /// or nil when none is to be kept.
    package func refused(_ kind: Kind, requestID: String?) -> Int? {
        let now = clock.now
        let (refusals, logSuppressed) = tallies.withLock { tallies -> (Int?, Int?) in
            var tally = tallies[kind] ?? Tally()
            defer { tallies[kind] = tally }
            var logSuppressed: Int?
            if let start = tally.logIntervalStart, now < start + .seconds(Self.logIntervalSeconds) {
                if tally.logged < Self.logLinesMax {
                    tally.logged += 1
                    logSuppressed = 0
                } else {
                    tally.suppressed += 1
                }
            } else {
                logSuppressed = tally.suppressed
                (tally.logIntervalStart, tally.logged, tally.suppressed) = (now, 1, 0)
            }
            if kind.appleSigned { return (1, logSuppressed) }
            if let last = tally.lastStored, now < last + .seconds(Self.storeIntervalSeconds) {
                tally.notStored += 1
                return (nil, logSuppressed)
            }
            let refusals = tally.notStored + 1
            (tally.lastStored, tally.notStored) = (now, 0)
            return (refusals, logSuppressed)
        }
        if let logSuppressed {
            var metadata = ["request.id": requestID ?? "reconcile", "appstore.reason": kind.reason.rawValue,
                            "appstore.apple_signed": String(kind.appleSigned)]
            if logSuppressed > 0 { metadata["log.suppressed"] = String(logSuppressed) }
            logger.warning("notification refused", metadata)
        }
        return refusals
    }
}
