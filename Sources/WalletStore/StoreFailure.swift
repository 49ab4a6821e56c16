public import Postgres
public import WalletCore

/// What a failed database call means for its caller: the one place where a
/// `PostgresError` becomes the domain's words. Every store call maps through
/// here; nothing above the store sees a `PostgresError`.
public enum StoreFailure: Equatable, Sendable {
    /// The connection failed before the statement was sent: it provably
    /// never reached the server, so it may run again inside its deadline.
    case notSent
    /// The server answered with an ERROR: nothing committed. The batch path
    /// isolates the operation that caused it; alone, it is the service's
    /// own fault.
    case rejected
    /// A lock wait ran out (`lock_timeout`): an ERROR too, so nothing
    /// committed, but the caller should come back later.
    case busy
    /// A concurrent transaction committed one of the batch's flowNOs or keys
    /// first (WL008, or a unique violation on an idempotency key): nothing
    /// committed, and a retry finds the committed row.
    case conflict
    /// The deadline passed, or no connection came free, before anything was
    /// sent.
    case timeout
    /// The statement was sent, and then the connection broke or the deadline
    /// passed: it may have committed.
    case outcomeUnknown
    /// The pool is closed, or the database cannot be reached.
    case unavailable

    public init(_ error: PostgresError) {
        switch error.kind {
        case .poolClosed: self = .unavailable
        case .poolTimeout: self = .timeout
        case .deadline: self = error.sent ? .outcomeUnknown : .timeout
        case .connection: self = error.sent ? .outcomeUnknown : .notSent
        // Committed here, not confirmed by the standby: a failover may lose it.
        case .unconfirmedCommit: self = .outcomeUnknown
        case .server, .decoding, .transaction:
            switch error.sqlState {
            case .lockNotAvailable?: self = .busy
            case .concurrentTake?: self = .conflict
            case .uniqueViolation? where error.constraint == "idempotency_keys_pkey": self = .conflict
            default: self = .rejected
            }
        }
    }

    /// The answer to a caller whose write failed so; nil when the failure is
    /// the service's own fault (a bare 500).
    public var walletError: WalletError? {
        switch self {
        case .notSent, .unavailable, .timeout: .databaseUnavailable
        case .busy, .conflict: .walletBusy
        case .outcomeUnknown: .outcomeUnknown
        case .rejected: nil
        }
    }

    /// For a write.
    public static func walletError(writing error: PostgresError) -> WalletError? {
        StoreFailure(error).walletError
    }

    /// For a read, which changes nothing: whatever happened after sending,
    /// the database is just unavailable.
    public static func walletError(reading error: PostgresError) -> WalletError? {
        error.isUnavailable ? .databaseUnavailable : nil
    }

    /// The `kind` label of `wallet_db_errors_total`: `unavailable`,
    /// `pool_timeout`, `deadline`, `unconfirmed_commit`, `sqlstate_XXXXX`
    /// or `other`.
    public static func metricKind(_ error: PostgresError) -> String {
        switch error.kind {
        case .connection, .poolClosed: "unavailable"
        case .poolTimeout: "pool_timeout"
        case .deadline: "deadline"
        case .unconfirmedCommit: "unconfirmed_commit"
        default: error.sqlState.map { "sqlstate_\($0.code)" } ?? "other"
        }
    }
}

/// What the store reports to the service's metrics.
public protocol StoreMetrics: Sendable {
    /// A database call failed; `kind` is `StoreFailure.metricKind`'s label.
    func countDatabaseError(kind: String)
    /// A server-thread read answered 503 at once, without asking the
    /// database, because one just found it unavailable.
    func countDatabaseUnavailableFastFail()
    /// A group-commit transaction applied `size` operations of one kind.
    func observeBatch(operation: BatchOperation, size: Int)
}

/// The kinds of operation a group-commit batch applies, each with its own
/// SQL function: the `operation` label of `wallet_batch_operations`.
public enum BatchOperation: String, Sendable, CaseIterable {
    case credit, debit, hold, grant
}

extension StoreMetrics {
    func countDatabaseError(_ error: PostgresError) {
        countDatabaseError(kind: StoreFailure.metricKind(error))
    }
}
