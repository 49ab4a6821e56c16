// Errors a call can end with: a problem document the service answered
// (one class per `code`), an answer that is neither a problem nor the
// documented result, or a transport failure once retries are exhausted.

/** The base of every error this client raises. */
export class WalletError extends Error {
  constructor(message, options) {
    super(message, options && "cause" in options ? { cause: options.cause } : undefined);
    this.name = new.target.name;
    /** How many attempts the call made before giving up with this error. */
    this.attempts = 1;
    /** The Idempotency-Key the call sent, for a write that takes one: retry later with the same. */
    this.idempotencyKey = null;
  }
}

/** The service answered with an RFC 9457 problem document. */
export class WalletProblemError extends WalletError {
  constructor(status, body, response = {}) {
    const code = typeof body.code === "string" ? body.code : "";
    super(`${status} ${code}: ${typeof body.detail === "string" ? body.detail : (body.title ?? "problem")}`);
    this.status = status;
    this.code = code;
    this.type = body.type;
    this.title = body.title;
    this.detail = body.detail;
    this.instance = body.instance;
    this.body = body;
    this.requestId = response.requestId ?? null;
    this.retryAfter = response.retryAfter ?? null;
    this.replayed = response.replayed === true;
    const extra = new.target.extraMembers;
    if (Array.isArray(extra)) for (const member of extra) this[member] = body[member];
  }
}

/** A problem whose `code` this client does not know; the body is kept whole. */
export class UnknownProblemError extends WalletProblemError {}

/** An answer that is neither the documented result nor a problem document. */
export class UnexpectedResponseError extends WalletError {
  constructor(message, status, bodyText, response = {}) {
    super(message);
    this.status = status;
    this.bodyText = bodyText;
    this.requestId = response.requestId ?? null;
  }
}

/** The service could not be reached, or stopped answering, on every attempt. */
export class WalletTransportError extends WalletError {
  constructor(message, cause, attempts) {
    super(message, { cause });
    this.attempts = attempts;
  }
}

const problemClasses = new Map();

function problem(code, name, extraMembers = []) {
  const made = { [name]: class extends WalletProblemError {} }[name];
  Object.defineProperty(made, "code", { value: code });
  Object.defineProperty(made, "extraMembers", { value: Object.freeze(extraMembers) });
  problemClasses.set(code, made);
  return made;
}

export const AmountExceedsHoldError = problem("amount_exceeds_hold", "AmountExceedsHoldError", ["held_amount"]);
export const AmountMismatchError = problem("amount_mismatch", "AmountMismatchError", ["expected_amount"]);
export const BadRequestError = problem("bad_request", "BadRequestError");
export const CursorExpiredError = problem("cursor_expired", "CursorExpiredError");
export const DatabaseUnavailableError = problem("database_unavailable", "DatabaseUnavailableError");
export const FlowNoConflictError = problem("flow_no_conflict", "FlowNoConflictError");
export const ForbiddenError = problem("forbidden", "ForbiddenError");
export const GrantLimitExceededError = problem("grant_limit_exceeded", "GrantLimitExceededError", ["max_amount"]);
export const HeadersTooLargeError = problem("headers_too_large", "HeadersTooLargeError", ["limit_bytes"]);
export const HoldNotActiveError = problem("hold_not_active", "HoldNotActiveError", ["hold_status"]);
export const IdempotencyKeyRequiredError = problem("idempotency_key_required", "IdempotencyKeyRequiredError");
export const IdempotencyKeyReusedError = problem("idempotency_key_reused", "IdempotencyKeyReusedError");
export const InsufficientFundsError = problem("insufficient_funds", "InsufficientFundsError", ["balance", "available"]);
export const InternalError = problem("internal", "InternalError");
export const MalformedJsonError = problem("malformed_json", "MalformedJsonError");
export const MalformedNotificationError = problem("malformed_notification", "MalformedNotificationError");
export const MethodNotAllowedError = problem("method_not_allowed", "MethodNotAllowedError");
export const NotFoundError = problem("not_found", "NotFoundError");
export const OutcomeUnknownError = problem("outcome_unknown", "OutcomeUnknownError");
export const OverloadedError = problem("overloaded", "OverloadedError");
export const PaidCurrencyNotGrantableError = problem("paid_currency_not_grantable", "PaidCurrencyNotGrantableError");
export const PayloadTooLargeError = problem("payload_too_large", "PayloadTooLargeError", ["limit_bytes"]);
export const PurchasePendingError = problem("purchase_pending", "PurchasePendingError");
export const RateLimitedError = problem("rate_limited", "RateLimitedError");
export const RequestTimeoutError = problem("request_timeout", "RequestTimeoutError");
export const ShuttingDownError = problem("shutting_down", "ShuttingDownError");
export const UnauthorizedError = problem("unauthorized", "UnauthorizedError", ["reason"]);
export const UnknownCurrencyError = problem("unknown_currency", "UnknownCurrencyError");
export const UnknownProductError = problem("unknown_product", "UnknownProductError");
export const UnsupportedMediaTypeError = problem("unsupported_media_type", "UnsupportedMediaTypeError");
export const UnsupportedTransferEncodingError = problem("unsupported_transfer_encoding", "UnsupportedTransferEncodingError");
export const ValidationFailedError = problem("validation_failed", "ValidationFailedError", ["errors"]);
export const VerificationFailedError = problem("verification_failed", "VerificationFailedError", ["reason"]);
export const VerificationUnavailableError = problem("verification_unavailable", "VerificationUnavailableError");
export const VoidNotConfirmedError = problem("void_not_confirmed", "VoidNotConfirmedError");
export const WalletBusyError = problem("wallet_busy", "WalletBusyError");

/** The error class for each problem code this client knows. */
export const PROBLEM_CLASSES = Object.freeze(Object.fromEntries(problemClasses));

/** The error for a problem body: the code's own class, or UnknownProblemError. */
export function problemError(status, body, response) {
  const made = problemClasses.get(body.code) ?? UnknownProblemError;
  return new made(status, body, response);
}
