#if canImport(Glibc)
import Glibc
#endif

/// A value guarded by a pthread mutex, with a condition variable to wait on
/// until the value reaches a state.
///
/// Every wait has a deadline: a thread waits for a condition on the value,
/// not for a signal, and gives up when the time is out. Whoever changes the
/// value in a way a waiter may care about calls `signal` or `broadcast`
/// (before or after leaving the lock; the waiter re-checks its condition
/// under the lock, so no wake-up is lost).
///
/// The condition variable runs on `CLOCK_MONOTONIC`, so a change of the wall
/// clock neither shortens nor stretches a wait.
public final class Monitor<State> {
    private let mutex = PthreadMutex()
    private let condition: UnsafeMutablePointer<pthread_cond_t>
    private var state: State

    /// The longest single sleep, so that a deadline far in the future cannot
    /// overflow `timespec`; a waiter that reaches it re-checks and sleeps on.
    private static var sleepSecondsMax: Int { 86_400 }

    public init(_ initial: State) {
        state = initial
        var attributes = pthread_condattr_t()
        var status = pthread_condattr_init(&attributes)
        precondition(status == 0, "pthread_condattr_init failed: \(status)")
        status = pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        precondition(status == 0, "pthread_condattr_setclock failed: \(status)")
        condition = .allocate(capacity: 1)
        condition.initialize(to: pthread_cond_t())
        status = pthread_cond_init(condition, &attributes)
        precondition(status == 0, "pthread_cond_init failed: \(status)")
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        condition.deinitialize(count: 1)
        condition.deallocate()
    }

    /// Runs `body` with the value, holding the lock.
    public func withLock<Result, Failure: Error>(
        _ body: (inout State) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        try mutex.hold { () throws(Failure) -> Result in try body(&state) }
    }

    /// Waits until `isReady` holds for the value or `deadline` passes, then
    /// runs `body` under the same hold of the lock, with whether the value
    /// was ready. `isReady` runs under the lock, once at first and again
    /// after every wake-up.
    public func wait<Result, Failure: Error>(
        until deadline: ContinuousClock.Instant,
        for isReady: (State) -> Bool,
        then body: (inout State, _ ready: Bool) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        pthread_mutex_lock(mutex.pointer)
        defer { pthread_mutex_unlock(mutex.pointer) }
        var ready = isReady(state)
        while !ready {
            // The deadline is on the Swift clock, the condition variable's on
            // CLOCK_MONOTONIC: translate the time left, after every wake-up.
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { break }
            let (seconds, attoseconds) = left.components
            var wakeAt = Self.monotonicNow()
            Self.advance(&wakeAt, seconds: Int(min(seconds, Int64(Self.sleepSecondsMax))),
                         nanoseconds: Int(attoseconds / 1_000_000_000))
            _ = pthread_cond_timedwait(condition, mutex.pointer, &wakeAt)
            ready = isReady(state)
        }
        return try body(&state, ready)
    }

    /// Waits until `isReady` holds for the value or `deadline` passes; true
    /// if it holds.
    @discardableResult
    public func wait(until deadline: ContinuousClock.Instant, for isReady: (State) -> Bool) -> Bool {
        wait(until: deadline, for: isReady) { _, ready in ready }
    }

    /// Wakes one waiter, which re-checks its condition.
    public func signal() {
        pthread_cond_signal(condition)
    }

    /// Wakes every waiter; each re-checks its condition.
    public func broadcast() {
        pthread_cond_broadcast(condition)
    }

    private static func monotonicNow() -> timespec {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return now
    }

    private static func advance(_ time: inout timespec, seconds: Int, nanoseconds: Int) {
        var nanoseconds = time.tv_nsec + nanoseconds
        var seconds = time.tv_sec + seconds
        if nanoseconds >= 1_000_000_000 {
            nanoseconds -= 1_000_000_000
            seconds += 1
        }
        time.tv_sec = seconds
        time.tv_nsec = nanoseconds
    }
}

// Every access to `state` holds the mutex.
extension Monitor: @unchecked Sendable where State: Sendable {}
