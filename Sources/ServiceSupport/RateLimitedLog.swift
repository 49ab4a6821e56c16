package import Locking

/// Runs its body at most once per interval: for log lines that would
/// otherwise repeat on every request.
package final class RateLimitedLog: Sendable {
    private let intervalSeconds: Double
    private let clock: any WorkClock
    private let last = Locked<ContinuousClock.Instant?>(nil)

    package init(intervalSeconds: Double, clock: any WorkClock = SystemClock()) {
        self.intervalSeconds = intervalSeconds
        self.clock = clock
    }

    package func run(_ body: () -> Void) {
        let now = clock.now
        let due = last.withLock { last in
            if let previous = last, now < previous + .seconds(intervalSeconds) { return false }
            last = now
            return true
        }
        if due { body() }
    }
}
