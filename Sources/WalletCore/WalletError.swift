/// Everything a request can fail with, in the domain's words. The service
/// maps each case to an HTTP problem in exactly one place.
public enum WalletError: Error, Sendable, Equatable {
    /// Fields that failed validation, each with a message.
    case validationFailed([FieldError])
    case malformedJSON(detail: String)
    case idempotencyKeyRequired(detail: String)
    case unsupportedMediaType
    case unauthorized
    case forbidden(required: Scope)
    case notFound(detail: String)
    /// A feed cursor below what retention keeps: the events after it are gone.
    case cursorExpired(detail: String)
    /// The available balance (the balance less active holds; for a
    /// capture, the balance) is below the amount.
    case insufficientFunds(balance: Int64, available: Int64)
    /// The hold is no longer `held`: it was captured, released or expired.
    case holdNotActive(status: HoldStatus)
    /// A capture of more than the hold; `held` is the hold's amount.
    case amountExceedsHold(held: Int64)
    /// The flowNO is already credited to another user, product or quantity.
    case flowNoConflict
    case unknownProduct(String)
    /// The currency is not one of the catalog's.
    case unknownCurrency(String)
    /// A grant of a currency only purchases make.
    case paidCurrencyNotGrantable(String)
    /// A grant of more than the configured most (WALLET_GRANT_MAX_AMOUNT).
    case grantLimitExceeded(max: Int64)
    /// The caller's amount differs from catalog × quantity.
    case amountMismatch(expected: Int64)
    /// The idempotency key was used before for a different request.
    case idempotencyKeyReused
    /// The store's evidence did not hold, for `reason`.
    case verificationFailed(reason: RefusalReason, detail: String)
    /// The store says the purchase is not paid yet (Google Play's pending
    /// state); the same request succeeds once it is.
    case purchasePending
    /// The store could not be asked right now.
    case verificationUnavailable
    /// The caller made too many lookups of a kind that is limited; retry
    /// after `retryAfterSeconds`.
    case rateLimited(retryAfterSeconds: Int)
    /// PostgreSQL cannot be reached; retry after a moment.
    case databaseUnavailable
    /// Too much work is queued; retry after a moment.
    case overloaded
    /// The wallet is locked by another transaction (an operator's, say);
    /// nothing was written; retry after a moment.
    case walletBusy
    /// The write was sent to the database, and then the connection broke or
    /// the time ran out: it may or may not have committed. A retry with the
    /// same flowNO or idempotency key replays it if it did.
    case outcomeUnknown
    /// The service is stopping; the request was not queued.
    case shuttingDown
}

public struct FieldError: Sendable, Equatable, Codable {
    public var field: String
    public var message: String

    public init(field: String, message: String) {
        self.field = field
        self.message = message
    }
}

/// What an API key may do.
public enum Scope: String, Sendable, CaseIterable, Codable, Comparable {
    /// POST /v1/credits
    case credit
    /// POST /v1/debits
    case debit
    /// POST /v1/grants: the game server's rewards
    case grant
    /// GET wallets, entries and credits
    case read
    /// GET /v1/events: every change to every wallet
    case events
    /// The support console (`/admin`) only: sign in, read its pages, revoke
    /// keys. No `/v1` route takes it, so a support agent's key moves no coins.
    case console
    /// Everything.
    case admin

    public static func < (lhs: Scope, rhs: Scope) -> Bool {
        allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
    }
}

/// The caller of a request: the API key's name and what it may do.
public struct APIClient: Sendable, Equatable {
    public let name: String
    public let scopes: Set<Scope>

    public init(name: String, scopes: Set<Scope>) {
        self.name = name
        self.scopes = scopes
    }

    public func allows(_ scope: Scope) -> Bool {
        scopes.contains(scope) || scopes.contains(.admin)
    }
}
