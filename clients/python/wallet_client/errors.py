"""Typed errors: one class per problem `code` of the API document.

Every problem answer (RFC 9457, `application/problem+json`) is raised as a
`ProblemError` subclass named after its code: `insufficient_funds` is
`InsufficientFundsError`, `flow_no_conflict` is `FlowNoConflictError`, and so
on. A code this client does not know is `UnknownProblemError`, with the whole
body kept. Members a code adds (`balance` and `available`, `expected_amount`,
`errors`, ...) are typed attributes of its class; each is None only when the
answer left it out.

A connection failure that outlasted the retries is `TransportError`; a body
that does not match the document is `DecodeError`. All derive from
`WalletError`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from datetime import datetime, timezone
from typing import Any, ClassVar

from ._base import DecodeError, WalletError
from ._decode import Obj
from .models import FieldError

__all__ = [
    "WalletError",
    "DecodeError",
    "TransportError",
    "ProblemError",
    "UnknownProblemError",
    "PROBLEM_TYPES",
    "BadRequestError",
    "MalformedJsonError",
    "IdempotencyKeyRequiredError",
    "UnauthorizedError",
    "ForbiddenError",
    "NotFoundError",
    "MethodNotAllowedError",
    "RequestTimeoutError",
    "CursorExpiredError",
    "HoldNotActiveError",
    "AmountExceedsHoldError",
    "InsufficientFundsError",
    "FlowNoConflictError",
    "MalformedNotificationError",
    "PurchasePendingError",
    "PayloadTooLargeError",
    "UnsupportedMediaTypeError",
    "ValidationFailedError",
    "UnknownCurrencyError",
    "PaidCurrencyNotGrantableError",
    "GrantLimitExceededError",
    "UnknownProductError",
    "AmountMismatchError",
    "IdempotencyKeyReusedError",
    "VerificationFailedError",
    "HeadersTooLargeError",
    "InternalError",
    "UnsupportedTransferEncodingError",
    "DatabaseUnavailableError",
    "OutcomeUnknownError",
    "WalletBusyError",
    "OverloadedError",
    "RateLimitedError",
    "VerificationUnavailableError",
    "VoidNotConfirmedError",
    "ShuttingDownError",
]


class TransportError(WalletError):
    """No usable answer: the connection failed on every attempt the bounds allowed.

    `cause` is the last underlying exception (also chained as `__cause__`),
    `attempts` how many attempts the call made.
    """

    def __init__(self, message: str, *, cause: BaseException, attempts: int, method: str, path: str) -> None:
        super().__init__(f"{message} ({method} {path}, after {attempts} attempt{'s' if attempts != 1 else ''}): {cause!r}")
        self.cause = cause
        self.attempts = attempts
        self.method = method
        self.path = path


def parse_retry_after(value: str | None) -> float | None:
    """The delay a `Retry-After` header asks for, in seconds, or None without one.

    Delay-seconds is what the service sends; an HTTP date is understood too.
    """
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(int(text))
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


class ProblemError(WalletError):
    """A problem answer from the service.

    `status` is the HTTP status; `code`, `title`, `detail` and `instance` come
    from the body (`instance` is the request id); `body` is the whole parsed
    body. `replayed` is True when the service replayed a stored answer
    (`Idempotent-Replayed: true`); `idempotency_key` is the key the call sent,
    if any; `retry_after` the delay the `Retry-After` header asked for;
    `attempts` how many attempts the call made.
    """

    CODE: ClassVar[str | None] = None

    def __init__(
        self,
        *,
        status: int,
        body: Mapping[str, Any],
        headers: Mapping[str, str] | None = None,
        attempts: int = 1,
        idempotency_key: str | None = None,
    ) -> None:
        self.status = status
        self.body: dict[str, Any] = dict(body)
        self.headers: dict[str, str] = {k.lower(): v for k, v in (headers or {}).items()}
        self.code: str | None = _text(body, "code")
        self.title: str | None = _text(body, "title")
        self.detail: str | None = _text(body, "detail")
        self.instance: str | None = _text(body, "instance")
        self.type: str | None = _text(body, "type")
        self.attempts = attempts
        self.idempotency_key = idempotency_key
        self.replayed = self.headers.get("idempotent-replayed", "").strip().lower() == "true"
        self.retry_after = parse_retry_after(self.headers.get("retry-after"))
        super().__init__(f"{status} {self.code or 'problem'}: {self.detail or self.title or ''}".rstrip(": "))


def _text(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    return value if isinstance(value, str) else None


def _integer(body: Mapping[str, Any], name: str) -> int | None:
    value = body.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class UnknownProblemError(ProblemError):
    """A problem whose code this client does not know (or an error answer that is no problem document)."""


class BadRequestError(ProblemError):
    """`bad_request`: the request framing or target is invalid."""

    CODE = "bad_request"


class MalformedJsonError(ProblemError):
    """`malformed_json`: the body is not acceptable JSON."""

    CODE = "malformed_json"


class IdempotencyKeyRequiredError(ProblemError):
    """`idempotency_key_required`: the key is missing, too long, not printable ASCII, or begins with `hold:`."""

    CODE = "idempotency_key_required"


class UnauthorizedError(ProblemError):
    """`unauthorized`: no API key, or an unknown or revoked one."""

    CODE = "unauthorized"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reason: str | None = _text(self.body, "reason")


class ForbiddenError(ProblemError):
    """`forbidden`: the API key lacks the operation's scope."""

    CODE = "forbidden"


class NotFoundError(ProblemError):
    """`not_found`: no such route, credit or hold (for this API key)."""

    CODE = "not_found"


class MethodNotAllowedError(ProblemError):
    """`method_not_allowed`: the path exists for other methods."""

    CODE = "method_not_allowed"


class RequestTimeoutError(ProblemError):
    """`request_timeout`: the request did not arrive in time."""

    CODE = "request_timeout"


class CursorExpiredError(ProblemError):
    """`cursor_expired`: events below `after` were deleted; start again from `after=0`."""

    CODE = "cursor_expired"


class HoldNotActiveError(ProblemError):
    """`hold_not_active`: the hold was captured, released or expired (`hold_status`)."""

    CODE = "hold_not_active"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hold_status: str | None = _text(self.body, "hold_status")


class AmountExceedsHoldError(ProblemError):
    """`amount_exceeds_hold`: a capture of more than the hold (`held_amount`)."""

    CODE = "amount_exceeds_hold"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.held_amount: int | None = _integer(self.body, "held_amount")


class InsufficientFundsError(ProblemError):
    """`insufficient_funds`: the available balance is below the amount (`balance`, `available`)."""

    CODE = "insufficient_funds"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.balance: int | None = _integer(self.body, "balance")
        self.available: int | None = _integer(self.body, "available")


class FlowNoConflictError(ProblemError):
    """`flow_no_conflict`: the flowNO is credited to another user, product or quantity."""

    CODE = "flow_no_conflict"


class MalformedNotificationError(ProblemError):
    """`malformed_notification`: a Google Play push that is not a developer notification."""

    CODE = "malformed_notification"


class PurchasePendingError(ProblemError):
    """`purchase_pending`: Google Play says the purchase is not paid yet; ask again after `retry_after`."""

    CODE = "purchase_pending"


class PayloadTooLargeError(ProblemError):
    """`payload_too_large`: the body exceeds `limit_bytes`."""

    CODE = "payload_too_large"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.limit_bytes: int | None = _integer(self.body, "limit_bytes")


class UnsupportedMediaTypeError(ProblemError):
    """`unsupported_media_type`: the body is not `application/json`."""

    CODE = "unsupported_media_type"


class ValidationFailedError(ProblemError):
    """`validation_failed`: each invalid, missing or unknown field is in `errors`."""

    CODE = "validation_failed"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.errors: tuple[FieldError, ...] | None = None
        items = self.body.get("errors")
        if isinstance(items, list):
            try:
                self.errors = tuple(FieldError.decode(Obj(item, "errors[]")) for item in items)
            except DecodeError:
                self.errors = None


class UnknownCurrencyError(ProblemError):
    """`unknown_currency`: the currency is not one of the catalog's."""

    CODE = "unknown_currency"


class PaidCurrencyNotGrantableError(ProblemError):
    """`paid_currency_not_grantable`: a grant of a currency only purchases make."""

    CODE = "paid_currency_not_grantable"


class GrantLimitExceededError(ProblemError):
    """`grant_limit_exceeded`: more than one grant may give (`max_amount`)."""

    CODE = "grant_limit_exceeded"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_amount: int | None = _integer(self.body, "max_amount")


class UnknownProductError(ProblemError):
    """`unknown_product`: the product is not in the catalog, or not active."""

    CODE = "unknown_product"


class AmountMismatchError(ProblemError):
    """`amount_mismatch`: the stated amount is not catalog x quantity (`expected_amount`)."""

    CODE = "amount_mismatch"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.expected_amount: int | None = _integer(self.body, "expected_amount")


class IdempotencyKeyReusedError(ProblemError):
    """`idempotency_key_reused`: the key was used before for a different request."""

    CODE = "idempotency_key_reused"


class VerificationFailedError(ProblemError):
    """`verification_failed`: the store's evidence did not hold; `reason` says why."""

    CODE = "verification_failed"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reason: str | None = _text(self.body, "reason")


class HeadersTooLargeError(ProblemError):
    """`headers_too_large`: the headers exceed `limit_bytes`."""

    CODE = "headers_too_large"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.limit_bytes: int | None = _integer(self.body, "limit_bytes")


class InternalError(ProblemError):
    """`internal`: a fault of the service; the detail is in its log under `instance`."""

    CODE = "internal"


class UnsupportedTransferEncodingError(ProblemError):
    """`unsupported_transfer_encoding`: a transfer coding other than chunked."""

    CODE = "unsupported_transfer_encoding"


class DatabaseUnavailableError(ProblemError):
    """`database_unavailable`: nothing was written; retried after `Retry-After`."""

    CODE = "database_unavailable"


class OutcomeUnknownError(ProblemError):
    """`outcome_unknown`: the write may have committed; retried with the same key or flowNO."""

    CODE = "outcome_unknown"


class WalletBusyError(ProblemError):
    """`wallet_busy`: another transaction holds the wallet; nothing was written."""

    CODE = "wallet_busy"


class OverloadedError(ProblemError):
    """`overloaded`: too many writes queued; nothing was written."""

    CODE = "overloaded"


class RateLimitedError(ProblemError):
    """`rate_limited`: too many lookups of unknown flowNOs for this user; ask again after `retry_after`."""

    CODE = "rate_limited"


class VerificationUnavailableError(ProblemError):
    """`verification_unavailable`: the store could not be reached; nothing was written."""

    CODE = "verification_unavailable"


class VoidNotConfirmedError(ProblemError):
    """`void_not_confirmed`: a Google Play void that Google does not show; nothing was recorded."""

    CODE = "void_not_confirmed"


class ShuttingDownError(ProblemError):
    """`shutting_down`: the service stopped before it could answer."""

    CODE = "shutting_down"


PROBLEM_TYPES: Mapping[str, type[ProblemError]] = {
    cls.CODE: cls
    for cls in (
        BadRequestError,
        MalformedJsonError,
        IdempotencyKeyRequiredError,
        UnauthorizedError,
        ForbiddenError,
        NotFoundError,
        MethodNotAllowedError,
        RequestTimeoutError,
        CursorExpiredError,
        HoldNotActiveError,
        AmountExceedsHoldError,
        InsufficientFundsError,
        FlowNoConflictError,
        MalformedNotificationError,
        PurchasePendingError,
        PayloadTooLargeError,
        UnsupportedMediaTypeError,
        ValidationFailedError,
        UnknownCurrencyError,
        PaidCurrencyNotGrantableError,
        GrantLimitExceededError,
        UnknownProductError,
        AmountMismatchError,
        IdempotencyKeyReusedError,
        VerificationFailedError,
        HeadersTooLargeError,
        InternalError,
        UnsupportedTransferEncodingError,
        DatabaseUnavailableError,
        OutcomeUnknownError,
        WalletBusyError,
        OverloadedError,
        RateLimitedError,
        VerificationUnavailableError,
        VoidNotConfirmedError,
        ShuttingDownError,
    )
    if cls.CODE is not None
}
"""Every problem code this client knows, with the class it raises."""


def problem_from_answer(
    status: int,
    headers: Mapping[str, str],
    raw: bytes,
    *,
    attempts: int,
    idempotency_key: str | None,
) -> ProblemError:
    """The typed error for an error answer (status 400 and above)."""
    body: dict[str, Any]
    try:
        parsed = json.loads(raw.decode("utf-8")) if raw else None
    except (UnicodeDecodeError, ValueError):
        parsed = None
    if isinstance(parsed, dict):
        body = parsed
    else:
        text = raw.decode("utf-8", errors="replace")
        body = {"status": status, "detail": text[:2000]} if text else {"status": status}
    code = body.get("code")
    cls = PROBLEM_TYPES.get(code, UnknownProblemError) if isinstance(code, str) else UnknownProblemError
    return cls(status=status, body=body, headers=headers, attempts=attempts, idempotency_key=idempotency_key)
