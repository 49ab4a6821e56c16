public import Foundation

/// The time that schedules, pauses and expiry run on: when a background
/// worker looks again, how long a retry backs off, when a cached entry is
/// stale, when a queued call is due.
///
/// Production runs on `SystemClock`. A test gives the service a clock it
/// moves itself, so a test of a schedule or a backoff advances the clock
/// instead of waiting for it.
///
/// Deadlines that bound real work (a request's time, a query's, an HTTP
/// exchange's) stay on `ContinuousClock`: the work they bound takes real
/// time whatever this clock says. Instants from `now` are compared only
/// with instants from the same clock's `now`.
public protocol WorkClock: Sendable {
    /// Now, as the deadlines of `wait` count it.
    var now: ContinuousClock.Instant { get }

    /// Now on the calendar, moving with `now`: for times that are written
    /// down, such as a sweep's mark or when a queued call is next due.
    var date: Date { get }

    /// Waits until `isReady` holds for `monitor`'s value or this clock
    /// reaches `deadline`; true if it holds. As with `Monitor.wait`,
    /// whoever changes the value in a way the waiter may care about
    /// broadcasts, and `isReady` runs under the monitor's lock.
    func wait<State: Sendable>(on monitor: Monitor<State>, until deadline: ContinuousClock.Instant,
                               for isReady: (State) -> Bool) -> Bool
}

extension WorkClock {
    /// Pauses until this clock has moved on by `seconds`.
    public func pause(seconds: Double) {
        pause(until: now + .seconds(max(0, seconds)))
    }

    /// Pauses until this clock reaches `deadline`.
    public func pause(until deadline: ContinuousClock.Instant) {
        // Nobody changes this value: only the clock ends the wait.
        _ = wait(on: Monitor(false), until: deadline) { $0 }
    }
}

/// The real clock: `ContinuousClock` for waits, the system's calendar time
/// for dates.
public struct SystemClock: WorkClock {
    public init() {}

    public var now: ContinuousClock.Instant { .now }

    public var date: Date { Date() }

    public func wait<State: Sendable>(on monitor: Monitor<State>, until deadline: ContinuousClock.Instant,
                                      for isReady: (State) -> Bool) -> Bool {
        monitor.wait(until: deadline, for: isReady)
    }
}
