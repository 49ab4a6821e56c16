public import Foundation
public import Locking

/// A clock for tests: real time, plus however far the test has moved it on.
///
/// `advance(by:)` moves it forward at once, and every wait whose deadline
/// that passes ends then: a worker paused for its hour-long interval runs
/// the moment the test advances an hour. Between advances it runs with real
/// time, so it is never behind `ContinuousClock`, and a wait nobody
/// advances past still ends by itself at its deadline.
///
/// With `movesWithRealTime` false it stands still between advances, for a
/// test that compares instants exactly (a cache entry alive at 999 ms and
/// gone at 1 s). A wait on it that nobody advances past still ends once as
/// much real time has passed as the wait was long: no wait is without a
/// deadline.
///
/// It tells a test when a named thread is waiting on it: the test advances
/// the clock once the worker has finished its pass and paused, then waits
/// for the worker to pause again, which it does only once the pass that
/// the advance released has finished. No test guesses how long a worker takes.
/// (A thread is known by its name, which Linux keeps only when it is at
/// most 15 bytes long.)
///
/// `advancingToEachWait` makes every wait move the clock to its deadline
/// by itself, as though the time had passed at once: for one caller's
/// backoff on one thread, whose pauses `waitsRequested` then lists. Not
/// for a whole service, whose workers would then run flat out.
public final class ManualClock: WorkClock {
    private struct ThreadWaits: Sendable {
        var begun = 0
        var waiting = false
        var lastLength = Duration.zero
    }

    private struct State: Sendable {
        var offset = Duration.zero
        /// Who to wake when the clock moves, by the number of their wait.
        var wakers: [Int: @Sendable () -> Void] = [:]
        var waitsBegun = 0
        /// How far ahead of the clock each wait's deadline was when it began.
        var requested: [Duration] = []
        /// By thread name: waits begun, and whether one is under way.
        var threads: [String: ThreadWaits] = [:]
    }

    /// A bound on `waitsRequested`, so a long run cannot grow it without end.
    public static let requestedMax = 10_000

    private let advancesToEachWait: Bool
    private let movesWithRealTime: Bool
    private let startedAt = ContinuousClock.now
    private let startedOn = Date()
    private let state = Monitor(State())

    public init(movesWithRealTime: Bool = true, advancingToEachWait: Bool = false) {
        self.movesWithRealTime = movesWithRealTime
        advancesToEachWait = advancingToEachWait
    }

    /// How far the test has moved the clock.
    public var offset: Duration { state.withLock { $0.offset } }

    public var now: ContinuousClock.Instant { (movesWithRealTime ? ContinuousClock.now : startedAt) + offset }

    public var date: Date {
        let (seconds, attoseconds) = offset.components
        return (movesWithRealTime ? Date() : startedOn).addingTimeInterval(Double(seconds) + Double(attoseconds) / 1e18)
    }

    /// The length of every wait begun so far (its deadline less the clock's
    /// time when it began), oldest first; at most `requestedMax`.
    public var waitsRequested: [Duration] { state.withLock { $0.requested } }

    /// Moves the clock on by `duration` and ends every wait it passes.
    public func advance(by duration: Duration) {
        precondition(duration >= .zero, "a clock does not go back")
        let wakers = state.withLock { state in
            state.offset += duration
            return Array(state.wakers.values)
        }
        for wake in wakers { wake() }
    }

    public func advance(seconds: Double) {
        advance(by: .milliseconds(Int64((seconds * 1_000).rounded())))
    }

    public func wait<Value: Sendable>(on monitor: Monitor<Value>, until deadline: ContinuousClock.Instant,
                                      for isReady: (Value) -> Bool) -> Bool {
        let thread = Thread.current.name ?? ""
        let length = now.duration(to: deadline)
        // When the wait ends if nobody moves the clock.
        let realDeadline = ContinuousClock.now + max(.zero, length)
        let number = state.withLock { state in
            state.waitsBegun += 1
            if state.requested.count < Self.requestedMax {
                state.requested.append(length)
            }
            // Taking the monitor's lock before the broadcast: the waiter holds
            // it from its last check until it waits, so the wake-up cannot
            // fall between the two.
            state.wakers[state.waitsBegun] = {
                monitor.withLock { _ in }
                monitor.broadcast()
            }
            if !thread.isEmpty {
                state.threads[thread, default: ThreadWaits()].begun += 1
                state.threads[thread, default: ThreadWaits()].waiting = true
                state.threads[thread, default: ThreadWaits()].lastLength = length
            }
            return state.waitsBegun
        }
        state.broadcast()
        defer {
            state.withLock { state in
                state.wakers[number] = nil
                if !thread.isEmpty { state.threads[thread]?.waiting = false }
            }
            state.broadcast()
        }
        if advancesToEachWait {
            let ready = monitor.withLock { isReady($0) }
            if !ready, now < deadline { advance(by: now.duration(to: deadline)) }
            return ready
        }
        // One pass per move of the clock; each ends at the real deadline,
        // or when the clock moves, or when the value is ready.
        var ready = false
        repeat {
            let offset = self.offset
            let passDeadline = movesWithRealTime ? min(realDeadline, deadline - offset) : realDeadline
            ready = monitor.wait(until: passDeadline, for: { isReady($0) || self.offset != offset }) { value, _ in
                isReady(value)
            }
        } while !ready && now < deadline && ContinuousClock.now < realDeadline
        return ready
    }

    /// The waits begun so far by each named thread, for a failure's message.
    public var waitsBegunByThread: [String: Int] {
        state.withLock { $0.threads.mapValues(\.begun) }
    }

    /// How long the last wait of the thread named `thread` was when it
    /// began (its deadline less the clock's time then); nil if it has not
    /// waited.
    public func lastWaitLength(thread: String) -> Duration? {
        state.withLock { $0.threads[thread]?.lastLength }
    }

    /// Waits, at most `seconds` of real time, until the thread named
    /// `thread` is waiting on this clock having begun more than
    /// `afterWaits` waits; returns how many it has begun, or nil.
    ///
    /// With `afterWaits` from an earlier call, this returns once the thread
    /// has woken from that wait, done what it does, and paused again.
    public func waitUntilWaiting(thread: String, afterWaits: Int = 0, seconds: Double) -> Int? {
        state.wait(until: .now + .seconds(seconds), for: { state in
            guard let waits = state.threads[thread] else { return false }
            return waits.waiting && waits.begun > afterWaits
        }) { state, ready in
            ready ? state.threads[thread]?.begun : nil
        }
    }
}
