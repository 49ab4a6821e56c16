/// An error from PostgreSQL or from the way to it.
///
/// `description` is deliberately generic: server messages can carry values
/// (a duplicate key, a parameter), so they stay in `debugDescription`, which
/// goes to the log and never to a client.
public struct PostgresError: Error, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// The server answered a statement with an error; `sqlState` says which.
        case server
        /// The connection could not be made, or broke. If `sent`, the
        /// statement may or may not have run.
        case connection
        /// The caller's deadline passed before the server answered (or before
        /// a connection was made); the connection was closed.
        case deadline
        /// The pool had no connection to give before the deadline.
        case poolTimeout
        /// The pool is shut down.
        case poolClosed
        /// A value in a row could not be decoded to the asked type.
        case decoding
        /// `withTransaction` failed at a step other than the body.
        case transaction(TransactionStep)
        /// The server reported success, with a warning that the commit was
        /// not confirmed by the synchronous standby it waits for: it may be
        /// lost in a failover. Never an acknowledgement.
        case unconfirmedCommit
    }

    public enum TransactionStep: String, Sendable {
        case begin, body, commit, rollback
    }

    public var kind: Kind
    /// The five-character SQLSTATE, when the server sent one.
    public var sqlState: SQLState?
    /// The server's message and details, for logs only.
    public var serverMessage: String
    /// The name of the violated constraint, when there is one.
    public var constraint: String?
    /// Whether the statement had been sent when this happened. A statement
    /// that was never sent never ran; one that was sent, with no answer
    /// because the connection broke or the deadline passed, may have run and
    /// committed. (An answer with an ERROR means it did not commit.)
    public var sent: Bool

    public init(kind: Kind, sqlState: SQLState? = nil, serverMessage: String = "", constraint: String? = nil,
                sent: Bool = false) {
        self.kind = kind
        self.sqlState = sqlState
        self.serverMessage = serverMessage
        self.constraint = constraint
        self.sent = sent
    }

    /// The same failure, for a statement known not to have run.
    public var unsent: PostgresError {
        var error = self
        error.sent = false
        return error
    }

    /// True when the database could not be reached or the connection broke:
    /// the caller may answer "unavailable" and retry later.
    public var isUnavailable: Bool {
        switch kind {
        case .connection, .deadline, .poolTimeout, .poolClosed, .unconfirmedCommit: return true
        default: return sqlState?.isUnavailable ?? false
        }
    }

    public var description: String {
        switch kind {
        case .server: "PostgreSQL error \(sqlState?.code ?? "?????")"
        case .connection: "PostgreSQL connection error"
        case .deadline: "PostgreSQL did not answer before the deadline"
        case .poolTimeout: "no PostgreSQL connection available in time"
        case .poolClosed: "the PostgreSQL pool is closed"
        case .decoding: "a PostgreSQL value could not be decoded"
        case .transaction(let step): "PostgreSQL transaction failed at \(step.rawValue)"
        case .unconfirmedCommit: "PostgreSQL committed without the synchronous standby's confirmation"
        }
    }

    public var debugDescription: String {
        var text = description
        if !serverMessage.isEmpty { text += ": " + serverMessage }
        if let constraint { text += " (constraint \(constraint))" }
        if sent, kind != .server { text += " (after the statement was sent)" }
        return text
    }
}

/// A PostgreSQL SQLSTATE code. The ones the service acts on are named here.
public struct SQLState: Hashable, Sendable, CustomStringConvertible {
    public let code: String

    public init(_ code: String) { self.code = code }

    public static let warning = SQLState("01000")
    public static let readOnlySQLTransaction = SQLState("25006")
    public static let uniqueViolation = SQLState("23505")
    public static let checkViolation = SQLState("23514")
    public static let foreignKeyViolation = SQLState("23503")
    public static let serializationFailure = SQLState("40001")
    public static let deadlockDetected = SQLState("40P01")
    public static let queryCanceled = SQLState("57014")
    public static let adminShutdown = SQLState("57P01")
    public static let crashShutdown = SQLState("57P02")
    public static let cannotConnectNow = SQLState("57P03")
    public static let lockNotAvailable = SQLState("55P03")
    public static let raiseException = SQLState("P0001")

    /// Class 08 (connection exception), the shutdown states of class 57,
    /// and a server that takes no writes (a standby, or a primary being
    /// promoted): another connection may find a server that can answer.
    public var isUnavailable: Bool {
        isConnectionException || self == .adminShutdown || self == .crashShutdown || self == .cannotConnectNow
            || self == .readOnlySQLTransaction
    }

    /// Class 08: the connection failed. A pooler reports the end of the
    /// server's session this way too, whatever the server had done.
    public var isConnectionException: Bool {
        code.hasPrefix("08")
    }

    /// Worth running the whole transaction again.
    public var isRetryableTransactionFailure: Bool {
        self == .serializationFailure || self == .deadlockDetected
    }

    public var description: String { code }
}
