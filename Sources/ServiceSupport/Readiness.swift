import Locking
import Synchronization

/// Whether the schema is in place. Until it is, requests that need the
/// database answer 503 and `/readyz` is not ready.
package final class Readiness: Sendable {
    /// Read by every request's gate: an atomic load, no lock.
    private let schemaReady = Atomic<Bool>(false)
    /// The same flag, for `waitForSchema`, set under its lock so no waiter
    /// misses it. (Not an empty state: the thread sanitizer places an
    /// access to a zero-sized property on its neighbour and reports a race.)
    private let waiters = Monitor(false)

    package init() {}

    package var isSchemaReady: Bool { schemaReady.load(ordering: .acquiring) }

    package func markSchemaReady() {
        waiters.withLock { ready in
            schemaReady.store(true, ordering: .releasing)
            ready = true
        }
        waiters.broadcast()
    }

    package func waitForSchema(timeoutSeconds: Double) -> Bool {
        waiters.wait(until: .now + .seconds(timeoutSeconds)) { $0 }
    }
}
