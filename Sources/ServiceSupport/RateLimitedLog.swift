import Locking

/// Runs its body at most once per interval: for log lines that would
/// otherwise repeat on every request.
package final class RateLimitedLog: Sendable {
    private let intervalSeconds: Double
    private let last = Locked<ContinuousClock.Instant?>(nil)

    package init(intervalSeconds: Double) {
        self.intervalSeconds = intervalSeconds
    }

    package func run(_ body: () -> Void) {
        let now = ContinuousClock.now
        let due = last.withLock { last in
            if let previous = last, now < previous + .seconds(intervalSeconds) { return false }
            last = now
            return true
        }
        if due { body() }
    }
}
