// One error type per problem code the API document names, with the extra
// members the document gives that code. `ProblemCatalog` maps a code to its
// type; a code it lacks becomes `UnknownProblemError`.

/// 400: the request target or framing was unreadable.
public struct BadRequestError: WalletProblemError {
    public static let code = "bad_request"
    public let problem: ProblemDetails
}

/// 400: the body is not acceptable JSON.
public struct MalformedJSONError: WalletProblemError {
    public static let code = "malformed_json"
    public let problem: ProblemDetails
}

/// 400: the Idempotency-Key header is missing or not acceptable.
public struct IdempotencyKeyRequiredError: WalletProblemError {
    public static let code = "idempotency_key_required"
    public let problem: ProblemDetails
}

/// 401: no key, or an unknown or revoked one.
public struct UnauthorizedError: WalletProblemError {
    public static let code = "unauthorized"
    public let problem: ProblemDetails
    /// The check that failed, when the service names one.
    public let reason: String?

    init(problem: ProblemDetails) throws {
        self.problem = problem
        reason = try problem.optional("reason", as: String.self)
    }
}

/// 403: the key lacks the operation's scope.
public struct ForbiddenError: WalletProblemError {
    public static let code = "forbidden"
    public let problem: ProblemDetails
}

/// 410: the events cursor is below what retention deleted; start again from 0.
public struct CursorExpiredError: WalletProblemError {
    public static let code = "cursor_expired"
    public let problem: ProblemDetails
}

/// 404: no such credit or hold (or route).
public struct NotFoundError: WalletProblemError {
    public static let code = "not_found"
    public let problem: ProblemDetails
}

/// 405: the path exists for other methods.
public struct MethodNotAllowedError: WalletProblemError {
    public static let code = "method_not_allowed"
    public let problem: ProblemDetails
}

/// 408: the request did not arrive in time.
public struct RequestTimeoutError: WalletProblemError {
    public static let code = "request_timeout"
    public let problem: ProblemDetails
}

/// 409: the hold was captured, released or expired.
public struct HoldNotActiveError: WalletProblemError {
    public static let code = "hold_not_active"
    public let problem: ProblemDetails
    public let holdStatus: HoldStatus

    init(problem: ProblemDetails) throws {
        self.problem = problem
        holdStatus = try problem.required("hold_status", as: HoldStatus.self)
    }
}

/// 422: a capture of more than the hold.
public struct AmountExceedsHoldError: WalletProblemError {
    public static let code = "amount_exceeds_hold"
    public let problem: ProblemDetails
    public let heldAmount: Int64

    init(problem: ProblemDetails) throws {
        self.problem = problem
        heldAmount = try problem.required("held_amount", as: Int64.self)
    }
}

/// 409: the available balance is below the amount. Stored under the
/// idempotency key: a retry with the same key replays it.
public struct InsufficientFundsError: WalletProblemError {
    public static let code = "insufficient_funds"
    public let problem: ProblemDetails
    /// The balance when the operation was refused.
    public let balance: Int64
    /// The balance less active holds, then.
    public let available: Int64

    init(problem: ProblemDetails) throws {
        self.problem = problem
        balance = try problem.required("balance", as: Int64.self)
        available = try problem.required("available", as: Int64.self)
    }
}

/// 409: the flowNO is already credited to another user, product or quantity.
public struct FlowNoConflictError: WalletProblemError {
    public static let code = "flow_no_conflict"
    public let problem: ProblemDetails
}

/// 400: a Google Play push that is not a developer notification.
public struct MalformedNotificationError: WalletProblemError {
    public static let code = "malformed_notification"
    public let problem: ProblemDetails
}

/// 409: Google Play says the purchase is not paid yet; ask again after `Retry-After`.
public struct PurchasePendingError: WalletProblemError {
    public static let code = "purchase_pending"
    public let problem: ProblemDetails
}

/// 413: the body is larger than the service takes.
public struct PayloadTooLargeError: WalletProblemError {
    public static let code = "payload_too_large"
    public let problem: ProblemDetails
    public let limitBytes: Int64

    init(problem: ProblemDetails) throws {
        self.problem = problem
        limitBytes = try problem.required("limit_bytes", as: Int64.self)
    }
}

/// 415: the body was not declared `application/json`.
public struct UnsupportedMediaTypeError: WalletProblemError {
    public static let code = "unsupported_media_type"
    public let problem: ProblemDetails
}

/// 422: fields failed validation, each named in `errors`.
public struct ValidationFailedError: WalletProblemError {
    public static let code = "validation_failed"
    public let problem: ProblemDetails
    public let errors: [FieldError]

    init(problem: ProblemDetails) throws {
        self.problem = problem
        errors = try problem.required("errors", as: [FieldError].self)
    }
}

/// 422: the currency is not one of the catalog's.
public struct UnknownCurrencyError: WalletProblemError {
    public static let code = "unknown_currency"
    public let problem: ProblemDetails
}

/// 422: a grant of a currency only purchases make.
public struct PaidCurrencyNotGrantableError: WalletProblemError {
    public static let code = "paid_currency_not_grantable"
    public let problem: ProblemDetails
}

/// 422: a grant of more than the service allows at once.
public struct GrantLimitExceededError: WalletProblemError {
    public static let code = "grant_limit_exceeded"
    public let problem: ProblemDetails
    public let maxAmount: Int64

    init(problem: ProblemDetails) throws {
        self.problem = problem
        maxAmount = try problem.required("max_amount", as: Int64.self)
    }
}

/// 422: the product is not in the catalog, or not active.
public struct UnknownProductError: WalletProblemError {
    public static let code = "unknown_product"
    public let problem: ProblemDetails
}

/// 422: the stated amount is not catalog x quantity.
public struct AmountMismatchError: WalletProblemError {
    public static let code = "amount_mismatch"
    public let problem: ProblemDetails
    /// What this credit would give.
    public let expectedAmount: Int64

    init(problem: ProblemDetails) throws {
        self.problem = problem
        expectedAmount = try problem.required("expected_amount", as: Int64.self)
    }
}

/// 422: the idempotency key was used before for a different request.
public struct IdempotencyKeyReusedError: WalletProblemError {
    public static let code = "idempotency_key_reused"
    public let problem: ProblemDetails
}

/// 422: the store's evidence did not hold; `reason` says why
/// (`mode_not_enabled`, `bad_signature`, `revoked`, `transaction_not_found`, ...).
public struct VerificationFailedError: WalletProblemError {
    public static let code = "verification_failed"
    public let problem: ProblemDetails
    public let reason: String

    init(problem: ProblemDetails) throws {
        self.problem = problem
        reason = try problem.required("reason", as: String.self)
    }
}

/// 431: the headers are larger than the service takes.
public struct HeadersTooLargeError: WalletProblemError {
    public static let code = "headers_too_large"
    public let problem: ProblemDetails
    public let limitBytes: Int64

    init(problem: ProblemDetails) throws {
        self.problem = problem
        limitBytes = try problem.required("limit_bytes", as: Int64.self)
    }
}

/// 500: a fault of the service's; the detail is in its log under `instance`.
public struct InternalError: WalletProblemError {
    public static let code = "internal"
    public let problem: ProblemDetails
}

/// 501: a transfer coding other than chunked.
public struct UnsupportedTransferEncodingError: WalletProblemError {
    public static let code = "unsupported_transfer_encoding"
    public let problem: ProblemDetails
}

/// 503: PostgreSQL could not be reached; nothing was written.
public struct DatabaseUnavailableError: WalletProblemError {
    public static let code = "database_unavailable"
    public let problem: ProblemDetails
}

/// 503: the write may or may not have committed. The client retries it
/// with the same flowNO or key; this is raised only when the bounds ran out.
public struct OutcomeUnknownError: WalletProblemError {
    public static let code = "outcome_unknown"
    public let problem: ProblemDetails
}

/// 503: another transaction held the wallet too long; nothing was written.
public struct WalletBusyError: WalletProblemError {
    public static let code = "wallet_busy"
    public let problem: ProblemDetails
}

/// 503: too many writes are queued; nothing was written.
public struct OverloadedError: WalletProblemError {
    public static let code = "overloaded"
    public let problem: ProblemDetails
}

/// 429: too many lookups of unknown flowNOs for this user.
public struct RateLimitedError: WalletProblemError {
    public static let code = "rate_limited"
    public let problem: ProblemDetails
}

/// 503: the store could not be asked; nothing was written.
public struct VerificationUnavailableError: WalletProblemError {
    public static let code = "verification_unavailable"
    public let problem: ProblemDetails
}

/// 503: a Google Play void that Google does not show (yet).
public struct VoidNotConfirmedError: WalletProblemError {
    public static let code = "void_not_confirmed"
    public let problem: ProblemDetails
}

/// 503: the service stopped before it could answer.
public struct ShuttingDownError: WalletProblemError {
    public static let code = "shutting_down"
    public let problem: ProblemDetails
}

/// The codes this client knows, each with the type it becomes.
enum ProblemCatalog {
    typealias Make = @Sendable (ProblemDetails) throws -> any WalletProblemError

    static let types: [String: Make] = [
        BadRequestError.code: { BadRequestError(problem: $0) },
        MalformedJSONError.code: { MalformedJSONError(problem: $0) },
        IdempotencyKeyRequiredError.code: { IdempotencyKeyRequiredError(problem: $0) },
        UnauthorizedError.code: { try UnauthorizedError(problem: $0) },
        ForbiddenError.code: { ForbiddenError(problem: $0) },
        CursorExpiredError.code: { CursorExpiredError(problem: $0) },
        NotFoundError.code: { NotFoundError(problem: $0) },
        MethodNotAllowedError.code: { MethodNotAllowedError(problem: $0) },
        RequestTimeoutError.code: { RequestTimeoutError(problem: $0) },
        HoldNotActiveError.code: { try HoldNotActiveError(problem: $0) },
        AmountExceedsHoldError.code: { try AmountExceedsHoldError(problem: $0) },
        InsufficientFundsError.code: { try InsufficientFundsError(problem: $0) },
        FlowNoConflictError.code: { FlowNoConflictError(problem: $0) },
        MalformedNotificationError.code: { MalformedNotificationError(problem: $0) },
        PurchasePendingError.code: { PurchasePendingError(problem: $0) },
        PayloadTooLargeError.code: { try PayloadTooLargeError(problem: $0) },
        UnsupportedMediaTypeError.code: { UnsupportedMediaTypeError(problem: $0) },
        ValidationFailedError.code: { try ValidationFailedError(problem: $0) },
        UnknownCurrencyError.code: { UnknownCurrencyError(problem: $0) },
        PaidCurrencyNotGrantableError.code: { PaidCurrencyNotGrantableError(problem: $0) },
        GrantLimitExceededError.code: { try GrantLimitExceededError(problem: $0) },
        UnknownProductError.code: { UnknownProductError(problem: $0) },
        AmountMismatchError.code: { try AmountMismatchError(problem: $0) },
        IdempotencyKeyReusedError.code: { IdempotencyKeyReusedError(problem: $0) },
        VerificationFailedError.code: { try VerificationFailedError(problem: $0) },
        HeadersTooLargeError.code: { try HeadersTooLargeError(problem: $0) },
        InternalError.code: { InternalError(problem: $0) },
        UnsupportedTransferEncodingError.code: { UnsupportedTransferEncodingError(problem: $0) },
        DatabaseUnavailableError.code: { DatabaseUnavailableError(problem: $0) },
        OutcomeUnknownError.code: { OutcomeUnknownError(problem: $0) },
        WalletBusyError.code: { WalletBusyError(problem: $0) },
        OverloadedError.code: { OverloadedError(problem: $0) },
        RateLimitedError.code: { RateLimitedError(problem: $0) },
        VerificationUnavailableError.code: { VerificationUnavailableError(problem: $0) },
        VoidNotConfirmedError.code: { VoidNotConfirmedError(problem: $0) },
        ShuttingDownError.code: { ShuttingDownError(problem: $0) },
    ]

    /// The typed error for a problem: its code's type, or
    /// `UnknownProblemError` for a code this client does not know.
    /// Throws when a known code lacks a member its type requires.
    static func error(for problem: ProblemDetails) throws -> any WalletProblemError {
        guard let make = types[problem.code] else { return UnknownProblemError(problem: problem) }
        return try make(problem)
    }
}
