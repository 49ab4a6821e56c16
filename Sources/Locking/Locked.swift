#if canImport(Glibc)
import Glibc
#endif

/// A value that only one thread at a time may touch, guarded by a pthread
/// mutex.
///
/// The standard library's `Synchronization.Mutex` waits on a futex directly,
/// which the thread sanitizer does not see as synchronisation: every access
/// it guards then looks like a race. A pthread mutex is intercepted by the
/// sanitizer, so a race it reports here is a real one.
///
/// The mutex lives on the heap (a `pthread_mutex_t` must not move once
/// initialised) and is destroyed with its owner. The lock is not recursive:
/// calling `withLock` again from inside its body deadlocks.
public final class Locked<State> {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var state: State

    public init(_ initial: State) {
        state = initial
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        let status = pthread_mutex_init(mutex, nil)
        precondition(status == 0, "pthread_mutex_init failed: \(status)")
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    /// Runs `body` with the value, holding the lock.
    public func withLock<Result, Failure: Error>(
        _ body: (inout State) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&state)
    }
}

// Every access to `state` holds the mutex.
extension Locked: @unchecked Sendable where State: Sendable {}
