/// A value that only one thread at a time may touch, guarded by a pthread
/// mutex.
///
/// The standard library's `Synchronization.Mutex` waits on a futex directly,
/// which the thread sanitizer does not see as synchronisation: every access
/// it guards then looks like a race. A pthread mutex is intercepted by the
/// sanitizer, so a race it reports here is a real one.
///
/// The lock is not recursive: calling `withLock` again from inside its body
/// deadlocks.
public final class Locked<State> {
    private let mutex = PthreadMutex()
    private var state: State

    public init(_ initial: State) {
        state = initial
    }

    /// Runs `body` with the value, holding the lock.
    public func withLock<Result, Failure: Error>(
        _ body: (inout State) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        try mutex.hold { () throws(Failure) -> Result in try body(&state) }
    }
}

// Every access to `state` holds the mutex.
extension Locked: @unchecked Sendable where State: Sendable {}
