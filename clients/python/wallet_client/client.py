"""The synchronous wallet client."""

from __future__ import annotations

import http.client
import json
import random
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, urlencode, urlsplit

from ._base import DecodeError
from ._decode import Obj
from .errors import (
    OutcomeUnknownError,
    ProblemError,
    TransportError,
    parse_retry_after,
    problem_from_answer,
)
from .models import (
    AccountTokens,
    CreditLookupResponse,
    CreditRecord,
    CreditResponse,
    CreditsPage,
    DebitResponse,
    EntriesPage,
    Entry,
    Event,
    EventsPage,
    GrantResponse,
    HealthStatus,
    Hold,
    HoldActionResponse,
    HoldLookupResponse,
    HoldReleaseResponse,
    HoldResponse,
    HoldsPage,
    ReadyStatus,
    Wallet,
)

__all__ = ["WalletClient", "ClientStats"]

__version__ = "0.1.0"

T = TypeVar("T")

# Backoff between attempts that got no Retry-After: 100 ms doubling to 2 s.
BACKOFF_FIRST = 0.1
BACKOFF_MAX = 2.0


@dataclass(frozen=True, slots=True)
class ClientStats:
    """Counters of one client since it was made."""

    calls: int
    attempts: int
    retries: int


@dataclass(frozen=True, slots=True)
class _Answer:
    status: int
    headers: dict[str, str]
    body: Any
    attempts: int

    @property
    def replayed(self) -> bool:
        return self.headers.get("idempotent-replayed", "").strip().lower() == "true"

    @property
    def request_id(self) -> str | None:
        return self.headers.get("x-request-id")


class _Retryable(Exception):
    """A connection failure before any of the answer was read."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(repr(cause))
        self.cause = cause


class _Fatal(Exception):
    """A failure that no retry may follow (the answer was partly read, or garbled)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(repr(cause))
        self.cause = cause


class _Pool:
    """Idle keep-alive connections to one origin, shared by threads."""

    def __init__(self, scheme: str, host: str, port: int | None, max_idle: int) -> None:
        self._scheme = scheme
        self._host = host
        self._port = port
        self._max_idle = max_idle
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def acquire(self, timeout: float) -> http.client.HTTPConnection:
        with self._lock:
            connection = self._idle.pop() if self._idle else None
        if connection is None:
            if self._scheme == "https":
                connection = http.client.HTTPSConnection(self._host, self._port, timeout=timeout)
            else:
                connection = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        else:
            connection.timeout = timeout
            if connection.sock is not None:
                connection.sock.settimeout(timeout)
        return connection

    def release(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self._max_idle:
                self._idle.append(connection)
                return
        connection.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


class WalletClient:
    """A client of the wallet service.

    One client per API key; it is safe to share between threads. Every call
    is retried by default (see the README's retry rule): on `outcome_unknown`,
    on a 503 with `Retry-After`, and on a connection failure before any of the
    answer was read. Writes that take an idempotency key send the same key on
    every attempt (a UUID v4 made once per call when none is given). A call
    makes at most `max_attempts` attempts within `max_total_time` seconds,
    each attempt bounded by `request_timeout` seconds of socket inactivity.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        max_attempts: int = 8,
        max_total_time: float = 30.0,
        request_timeout: float = 10.0,
        user_agent: str | None = None,
        max_idle_connections: int = 16,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if max_total_time <= 0 or request_timeout <= 0:
            raise ValueError("max_total_time and request_timeout must be positive")
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be an absolute http or https URL, not {base_url!r}")
        self.base_url = base_url
        self.max_attempts = max_attempts
        self.max_total_time = max_total_time
        self.request_timeout = request_timeout
        self._prefix = parts.path.rstrip("/")
        self._pool = _Pool(parts.scheme, parts.hostname, parts.port, max_idle_connections)
        self._headers = {
            "Authorization": f"Bearer {api_key}",
            "Accept": "application/json, application/problem+json",
            "User-Agent": user_agent or f"wallet-client-python/{__version__}",
        }
        self._lock = threading.Lock()
        self._calls = 0
        self._attempts = 0
        self._retries = 0

    # Housekeeping.

    def close(self) -> None:
        """Closes idle connections. The client stays usable."""
        self._pool.close()

    def __enter__(self) -> WalletClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def retry_count(self) -> int:
        """Retries made by every call of this client so far (attempts beyond each call's first)."""
        with self._lock:
            return self._retries

    def stats(self) -> ClientStats:
        with self._lock:
            return ClientStats(calls=self._calls, attempts=self._attempts, retries=self._retries)

    # Credits (scope `credit`).

    def create_credit(
        self,
        user_id: str,
        flow_no: str | None,
        product_id: str,
        *,
        quantity: int | None = None,
        amount: int | None = None,
        signed_transaction: str | None = None,
        receipt_data: str | None = None,
        google_purchase_token: str | None = None,
    ) -> CreditResponse:
        """`createCredit`: credits a product bundle for a flowNO, once.

        Retried like every call: a credit is idempotent by its flowNO, so a
        retry replays the stored credit (`replayed`). `flow_no` may be None
        only with a `google_purchase_token`.
        """
        body = _body(
            user_id=user_id,
            flow_no=flow_no,
            product_id=product_id,
            quantity=quantity,
            amount=amount,
            signed_transaction=signed_transaction,
            receipt_data=receipt_data,
            google_purchase_token=google_purchase_token,
        )
        answer = self._call("POST", "/v1/credits", body=body)
        return _decode(answer, lambda o: CreditResponse.decode(o, replayed=answer.replayed, request_id=answer.request_id))

    def get_account_tokens(self, user_id: str) -> AccountTokens:
        """`getAccountTokens`: the tokens to set on the player's store purchases."""
        answer = self._call("GET", f"/v1/wallets/{_segment(user_id)}/account-tokens")
        return _decode(answer, AccountTokens.decode)

    # Debits and grants (scopes `debit`, `grant`).

    def create_debit(
        self,
        user_id: str,
        amount: int,
        *,
        currency: str | None = None,
        reason: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> DebitResponse:
        """`createDebit`: spends `amount`, at most once per idempotency key."""
        key = idempotency_key or _new_key()
        body = _body(user_id=user_id, amount=amount, currency=currency, reason=reason, metadata=metadata)
        answer = self._call("POST", "/v1/debits", body=body, idempotency_key=key)
        return _decode(answer, lambda o: DebitResponse.decode(
            o, idempotency_key=key, replayed=answer.replayed, request_id=answer.request_id))

    def create_grant(
        self,
        user_id: str,
        amount: int,
        reason: str,
        *,
        currency: str | None = None,
        expires_in_days: int | None = None,
        idempotency_key: str | None = None,
    ) -> GrantResponse:
        """`createGrant`: gives free coins, at most once per idempotency key."""
        key = idempotency_key or _new_key()
        body = _body(user_id=user_id, amount=amount, reason=reason, currency=currency, expires_in_days=expires_in_days)
        answer = self._call("POST", "/v1/grants", body=body, idempotency_key=key)
        return _decode(answer, lambda o: GrantResponse.decode(
            o, idempotency_key=key, replayed=answer.replayed, request_id=answer.request_id))

    # Holds (scope `debit`; reads `read`).

    def create_hold(
        self,
        user_id: str,
        amount: int,
        *,
        currency: str | None = None,
        reason: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        expires_in_seconds: int | None = None,
        idempotency_key: str | None = None,
    ) -> HoldResponse:
        """`createHold`: reserves `amount` of the available balance."""
        key = idempotency_key or _new_key()
        body = _body(
            user_id=user_id,
            amount=amount,
            currency=currency,
            reason=reason,
            metadata=metadata,
            expires_in_seconds=expires_in_seconds,
        )
        answer = self._call("POST", "/v1/holds", body=body, idempotency_key=key)
        return _decode(answer, lambda o: HoldResponse.decode(
            o, idempotency_key=key, replayed=answer.replayed, request_id=answer.request_id))

    def capture_hold(
        self, hold_id: int, *, amount: int | None = None, idempotency_key: str | None = None
    ) -> HoldActionResponse:
        """`captureHold`: debits up to the held amount (all of it by default); the rest is released."""
        key = idempotency_key or _new_key()
        answer = self._call(
            "POST", f"/v1/holds/{_hold_id(hold_id)}/capture", body=_body(amount=amount), idempotency_key=key
        )
        return _decode(answer, lambda o: HoldActionResponse.decode(
            o, idempotency_key=key, replayed=answer.replayed, request_id=answer.request_id))

    def release_hold(self, hold_id: int, *, idempotency_key: str | None = None) -> HoldReleaseResponse:
        """`releaseHold`: gives the held coins back."""
        key = idempotency_key or _new_key()
        answer = self._call("POST", f"/v1/holds/{_hold_id(hold_id)}/release", body={}, idempotency_key=key)
        return _decode(answer, lambda o: HoldReleaseResponse.decode(
            o, idempotency_key=key, replayed=answer.replayed, request_id=answer.request_id))

    def get_hold(self, hold_id: int) -> HoldLookupResponse:
        """`getHold`: one hold as it is now."""
        answer = self._call("GET", f"/v1/holds/{_hold_id(hold_id)}")
        return _decode(answer, HoldLookupResponse.decode)

    # Reads (scope `read`).

    def get_wallet(self, user_id: str, *, currency: str | None = None) -> Wallet:
        """`getWallet`: balances, with `paid`, `free`, `debt` and `next_expiry`."""
        answer = self._call("GET", f"/v1/wallets/{_segment(user_id)}", query={"currency": currency})
        return _decode(answer, Wallet.decode)

    def list_entries(
        self, user_id: str, *, currency: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> EntriesPage:
        """`listEntries`: one page of ledger entries, newest first."""
        answer = self._call(
            "GET",
            f"/v1/wallets/{_segment(user_id)}/entries",
            query={"currency": currency, "limit": limit, "cursor": cursor},
        )
        return _decode(answer, EntriesPage.decode)

    def list_holds(
        self, user_id: str, *, status: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> HoldsPage:
        """`listHolds`: one page of the holds this API key placed, newest first.

        `status` is `active`, `captured`, `released` or `expired`.
        """
        answer = self._call(
            "GET",
            f"/v1/wallets/{_segment(user_id)}/holds",
            query={"status": status, "limit": limit, "cursor": cursor},
        )
        return _decode(answer, HoldsPage.decode)

    def list_credits(self, user_id: str, *, limit: int | None = None, cursor: str | None = None) -> CreditsPage:
        """`listCredits`: one page of the player's credits, newest first."""
        answer = self._call(
            "GET", f"/v1/wallets/{_segment(user_id)}/credits", query={"limit": limit, "cursor": cursor}
        )
        return _decode(answer, CreditsPage.decode)

    def get_credit(self, flow_no: str) -> CreditLookupResponse:
        """`getCredit`: one credit as it is now."""
        answer = self._call("GET", f"/v1/credits/{_segment(flow_no)}")
        return _decode(answer, CreditLookupResponse.decode)

    # The event feed (scope `events`).

    def list_events(
        self,
        *,
        after: int | None = None,
        limit: int | None = None,
        user_id: str | None = None,
        event_type: str | None = None,
    ) -> EventsPage:
        """`listEvents`: events after `after`, in id order; `event_type` is the `type` filter."""
        answer = self._call(
            "GET",
            "/v1/events",
            query={"after": after, "limit": limit, "user_id": user_id, "type": event_type},
        )
        return _decode(answer, EventsPage.decode)

    # Operations endpoints (no key needed).

    def get_health(self) -> HealthStatus:
        """`getHealth`: liveness."""
        return _decode(self._call("GET", "/healthz"), HealthStatus.decode)

    def get_readiness(self) -> ReadyStatus:
        """`getReadiness`: readiness; not ready is `DatabaseUnavailableError` (after the retries)."""
        return _decode(self._call("GET", "/readyz"), ReadyStatus.decode)

    def get_openapi_document(self) -> dict[str, Any]:
        """`getOpenAPIDocument`: the service's OpenAPI document, parsed."""
        answer = self._call("GET", "/openapi.json")
        if not isinstance(answer.body, dict):
            raise DecodeError("the OpenAPI document is not a JSON object", status=answer.status, body=answer.body)
        return answer.body

    # Paging helpers.

    def iter_entries(self, user_id: str, *, currency: str | None = None, page_size: int | None = None) -> Iterator[Entry]:
        """Every ledger entry of the player, newest first, page by page."""
        cursor: str | None = None
        while True:
            page = self.list_entries(user_id, currency=currency, limit=page_size, cursor=cursor)
            yield from page.entries
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def iter_holds(self, user_id: str, *, status: str | None = None, page_size: int | None = None) -> Iterator[Hold]:
        """Every hold of the player this API key placed, newest first, page by page."""
        cursor: str | None = None
        while True:
            page = self.list_holds(user_id, status=status, limit=page_size, cursor=cursor)
            yield from page.holds
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def iter_credits(self, user_id: str, *, page_size: int | None = None) -> Iterator[CreditRecord]:
        """Every credit of the player, newest first, page by page."""
        cursor: str | None = None
        while True:
            page = self.list_credits(user_id, limit=page_size, cursor=cursor)
            yield from page.credits
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def iter_events(
        self,
        *,
        after: int = 0,
        page_size: int | None = None,
        user_id: str | None = None,
        event_type: str | None = None,
    ) -> Iterator[Event]:
        """Every event after `after`, in id order, until the feed is caught up.

        Follows each page's `next_after` (the last event's id on a full page)
        and stops at the first empty page. Keep the last event's id to resume.
        """
        while True:
            page = self.list_events(after=after, limit=page_size, user_id=user_id, event_type=event_type)
            if not page.events:
                return
            yield from page.events
            after = max(page.next_after, page.events[-1].id)

    # The exchange and its retries.

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> _Answer:
        target = self._prefix + path
        if query:
            pairs = [(name, str(value)) for name, value in query.items() if value is not None]
            if pairs:
                target += "?" + urlencode(pairs)
        headers = dict(self._headers)
        payload: bytes | None = None
        if body is not None:
            payload = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key

        with self._lock:
            self._calls += 1
        deadline = time.monotonic() + self.max_total_time
        attempt = 0
        while True:
            attempt += 1
            with self._lock:
                self._attempts += 1
            remaining = deadline - time.monotonic()
            timeout = max(0.05, min(self.request_timeout, remaining))
            last: Exception
            try:
                status, answer_headers, raw = self._exchange(method, target, payload, headers, timeout)
            except _Retryable as failure:
                last = TransportError(
                    "connection failed", cause=failure.cause, attempts=attempt, method=method, path=path
                )
                last.__cause__ = failure.cause
                pause = _backoff(attempt)
            except _Fatal as failure:
                error = TransportError(
                    "the answer could not be read", cause=failure.cause, attempts=attempt, method=method, path=path
                )
                raise error from failure.cause
            else:
                if 200 <= status < 300:
                    return _Answer(status, answer_headers, _parse_json(status, raw), attempt)
                if status < 400:
                    raise DecodeError(f"unexpected status {status} for {method} {path}", status=status,
                                      text=raw.decode("utf-8", errors="replace"))
                problem = problem_from_answer(
                    status, answer_headers, raw, attempts=attempt, idempotency_key=idempotency_key
                )
                retry_after = parse_retry_after(answer_headers.get("retry-after"))
                if isinstance(problem, OutcomeUnknownError):
                    pause = retry_after if retry_after is not None else _backoff(attempt)
                elif status == 503 and retry_after is not None:
                    pause = retry_after
                else:
                    raise problem
                last = problem
            # Retry only within both bounds: another attempt must fit, and
            # the pause must leave time for it.
            if attempt >= self.max_attempts:
                raise last
            remaining = deadline - time.monotonic()
            if pause >= remaining:
                raise last
            with self._lock:
                self._retries += 1
            time.sleep(pause)

    def _exchange(
        self, method: str, target: str, payload: bytes | None, headers: dict[str, str], timeout: float
    ) -> tuple[int, dict[str, str], bytes]:
        connection = self._pool.acquire(timeout)
        try:
            connection.request(method, target, body=payload, headers=headers)
            response = connection.getresponse()
        except ssl.SSLCertVerificationError as failure:  # no retry makes a certificate good
            connection.close()
            raise _Fatal(failure) from failure
        except OSError as failure:  # refused, reset, closed before the status line, timed out
            connection.close()
            raise _Retryable(failure) from failure
        except http.client.HTTPException as failure:  # a garbled status line or headers
            connection.close()
            raise _Fatal(failure) from failure
        try:
            raw = response.read()
        except (OSError, http.client.HTTPException) as failure:
            connection.close()
            raise _Fatal(failure) from failure
        answer_headers = {name.lower(): value for name, value in response.getheaders()}
        if response.will_close:
            connection.close()
        else:
            self._pool.release(connection)
        return response.status, answer_headers, raw


def _backoff(attempt: int) -> float:
    """The pause after failed attempt number `attempt`: 100 ms doubling to 2 s, less up to half as jitter."""
    ceiling = min(BACKOFF_MAX, BACKOFF_FIRST * 2.0 ** min(attempt - 1, 30))
    return ceiling * random.uniform(0.5, 1.0)


def _new_key() -> str:
    return str(uuid.uuid4())


def _body(**members: Any) -> dict[str, Any]:
    """A request body without its absent (None) members."""
    return {name: (dict(value) if isinstance(value, Mapping) else value)
            for name, value in members.items() if value is not None}


def _segment(value: str) -> str:
    if not value:
        raise ValueError("a path parameter may not be empty")
    return quote(value, safe=":@")


def _hold_id(value: int) -> str:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"a hold id is a positive integer, not {value!r}")
    return str(value)


def _parse_json(status: int, raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise DecodeError(
            f"the answer ({status}) is not JSON", status=status, text=raw.decode("utf-8", errors="replace")
        ) from None


def _decode(answer: _Answer, reader: Callable[[Obj], T]) -> T:
    try:
        return reader(Obj(answer.body, "body"))
    except DecodeError as error:
        error.status = answer.status
        error.body = answer.body
        raise
