import Locking
import WalletStore

/// What the store reports to its metrics, counted, for tests that check
/// the store's own counts without the service's exposition.
final class RecordedStoreMetrics: StoreMetrics {
    private let errors = Locked<[String: Int]>([:])

    /// How many database failures of `kind` were counted.
    func databaseErrors(_ kind: String) -> Int {
        errors.withLock { $0[kind] ?? 0 }
    }

    func countDatabaseError(kind: String) {
        errors.withLock { $0[kind, default: 0] += 1 }
    }

    func countDatabaseUnavailableFastFail() {
        countDatabaseError(kind: "fast_fail")
    }

    func observeBatch(operation: BatchOperation, size: Int) {}
}
