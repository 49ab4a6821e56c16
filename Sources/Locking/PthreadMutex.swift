#if canImport(Glibc)
import Glibc
#endif

/// A pthread mutex on the heap (a `pthread_mutex_t` must not move once
/// initialised), destroyed with its owner: the lock under `Locked` and
/// `Monitor`. Not recursive.
final class PthreadMutex {
    let pointer: UnsafeMutablePointer<pthread_mutex_t>

    init() {
        pointer = .allocate(capacity: 1)
        pointer.initialize(to: pthread_mutex_t())
        let status = pthread_mutex_init(pointer, nil)
        precondition(status == 0, "pthread_mutex_init failed: \(status)")
    }

    deinit {
        pthread_mutex_destroy(pointer)
        pointer.deinitialize(count: 1)
        pointer.deallocate()
    }

    /// Runs `body` holding the mutex.
    func hold<Result, Failure: Error>(_ body: () throws(Failure) -> Result) throws(Failure) -> Result {
        pthread_mutex_lock(pointer)
        defer { pthread_mutex_unlock(pointer) }
        return try body()
    }
}
