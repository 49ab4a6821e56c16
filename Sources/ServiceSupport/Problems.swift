public import HTTPServer
import JSON
public import WalletCore

/// The one place where domain errors become HTTP problems. Every answer that
/// is not a success goes through here (or through the server's own problems
/// for routing, size and syntax), so each code has one status and one shape.
extension WalletError: ProblemConvertible {
    public var problem: Problem {
        switch self {
        case .validationFailed(let errors):
            let fields = errors.map(\.field).joined(separator: ", ")
            return Problem(
                status: 422, code: "validation_failed", title: "Validation failed",
                detail: errors.count == 1 ? "\(errors[0].field): \(errors[0].message)" : "invalid fields: \(fields)",
                extra: ["errors": .array(errors.map { .object([("field", .string($0.field)), ("message", .string($0.message))]) })])
        case .malformedJSON(let detail):
            return Problem(status: 400, code: "malformed_json", title: "Malformed JSON", detail: detail)
        case .idempotencyKeyRequired(let detail):
            return Problem(status: 400, code: "idempotency_key_required", title: "Idempotency key required",
                           detail: detail)
        case .unsupportedMediaType:
            return Problem(status: 415, code: "unsupported_media_type", title: "Unsupported media type",
                           detail: "the request body must be application/json")
        case .unauthorized:
            return Problem(status: 401, code: "unauthorized", title: "Unauthorized",
                           detail: "send a valid API key as Authorization: Bearer <key>",
                           headers: [("WWW-Authenticate", "Bearer")])
        case .forbidden(let scope):
            return Problem(status: 403, code: "forbidden", title: "Forbidden",
                           detail: "this API key lacks the \(scope.rawValue) scope")
        case .notFound(let detail):
            return Problem(status: 404, code: "not_found", title: "Not found", detail: detail)
        case .cursorExpired(let detail):
            return Problem(status: 410, code: "cursor_expired", title: "Cursor expired", detail: detail)
        case .insufficientFunds(let balance, let available):
            return Problem(status: 409, code: "insufficient_funds", title: "Insufficient funds",
                           detail: "the available balance is \(available), below the amount",
                           extra: ["balance": JSONValue(balance), "available": JSONValue(available)])
        case .holdNotActive(let status):
            return Problem(status: 409, code: "hold_not_active", title: "Hold not active",
                           detail: "the hold is \(status.rawValue); only a held hold can be captured or released",
                           extra: ["hold_status": .string(status.rawValue)])
        case .amountExceedsHold(let held):
            return Problem(status: 422, code: "amount_exceeds_hold", title: "Amount exceeds hold",
                           detail: "the hold is for \(held); a capture takes at most that",
                           extra: ["held_amount": JSONValue(held)])
        case .flowNoConflict:
            return Problem(status: 409, code: "flow_no_conflict", title: "flowNO already credited",
                           detail: "this flowNO is already credited to another user, product or quantity")
        case .unknownProduct(let product):
            return Problem(status: 422, code: "unknown_product", title: "Unknown product",
                           detail: "product \(product) is not in the catalog, or is not active")
        case .unknownCurrency(let currency):
            return Problem(status: 422, code: "unknown_currency", title: "Unknown currency",
                           detail: "currency \(currency) is not one of the catalog's")
        case .paidCurrencyNotGrantable(let currency):
            return Problem(status: 422, code: "paid_currency_not_grantable", title: "Paid currency not grantable",
                           detail: "currency \(currency) is made by purchases only; a grant cannot give it")
        case .grantLimitExceeded(let max):
            return Problem(status: 422, code: "grant_limit_exceeded", title: "Grant limit exceeded",
                           detail: "one grant gives at most \(max) (WALLET_GRANT_MAX_AMOUNT)",
                           extra: ["max_amount": JSONValue(max)])
        case .amountMismatch(let expected):
            return Problem(status: 422, code: "amount_mismatch", title: "Amount mismatch",
                           detail: "the amount comes from the catalog: \(expected) for this product and quantity",
                           extra: ["expected_amount": JSONValue(expected)])
        case .idempotencyKeyReused:
            return Problem(status: 422, code: "idempotency_key_reused", title: "Idempotency key reused",
                           detail: "this Idempotency-Key was already used for a different request")
        case .verificationFailed(let reason, let detail):
            return Problem(status: 422, code: "verification_failed", title: "Verification failed", detail: detail,
                           extra: ["reason": .string(reason.rawValue)])
        case .purchasePending:
            return Problem(status: 409, code: "purchase_pending", title: "Purchase pending",
                           detail: "the store says this purchase is not paid yet; retry the same request once it is",
                           headers: [("Retry-After", "30")])
        case .verificationUnavailable:
            return Problem(status: 503, code: "verification_unavailable", title: "Verification unavailable",
                           detail: "the store could not be reached to verify the purchase; retry later",
                           headers: [("Retry-After", "5")])
        case .rateLimited(let seconds):
            return Problem(status: 429, code: "rate_limited", title: "Rate limited",
                           detail: "too many lookups of transactions Apple does not know; retry in \(seconds) seconds",
                           headers: [("Retry-After", String(seconds))])
        case .overloaded:
            return Problem(status: 503, code: "overloaded", title: "Overloaded",
                           detail: "too many requests are queued for the database or for verification; retry later",
                           headers: [("Retry-After", "1")])
        case .databaseUnavailable:
            return Problem(status: 503, code: "database_unavailable", title: "Database unavailable",
                           detail: "the database cannot be reached right now; nothing was written; retry later",
                           headers: [("Retry-After", "1")])
        case .walletBusy:
            return Problem(status: 503, code: "wallet_busy", title: "Wallet busy",
                           detail: "another transaction holds this wallet; nothing was written; retry later with the same request",
                           headers: [("Retry-After", "1")])
        case .outcomeUnknown:
            return Problem(status: 503, code: "outcome_unknown", title: "Outcome unknown",
                           detail: "the database may or may not have applied this request; retry with the same flowNO or idempotency key; the retry replays the result",
                           headers: [("Retry-After", "1")])
        case .shuttingDown:
            return Problem(status: 503, code: "shutting_down", title: "Shutting down",
                           detail: "the service is stopping and did not take this request; retry",
                           headers: [("Retry-After", "1")])
        }
    }
}
