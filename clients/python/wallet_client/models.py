"""Typed values for the wallet API's response bodies.

Each class carries the members the API document gives its schema, under the
same names. Required members are always set (a body without one raises
`DecodeError`); members the document marks optional are None when absent.
Timestamps are timezone-aware `datetime`s; free-form objects (`metadata`,
an event's `data`) are plain dicts. Members the document does not name are
ignored.

The write results also say how the answer came: `replayed` is True when the
service answered a retry with its stored answer (`Idempotent-Replayed: true`),
`idempotency_key` is the key sent on every attempt of the call, and
`request_id` is the `X-Request-Id` of the answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ._decode import Obj

__all__ = [
    "AccountTokens",
    "Balance",
    "Credit",
    "CreditLookupResponse",
    "CreditRecord",
    "CreditResponse",
    "CreditsPage",
    "Debit",
    "DebitResponse",
    "EntriesPage",
    "Entry",
    "Event",
    "EventsPage",
    "FieldError",
    "Grant",
    "GrantResponse",
    "HealthStatus",
    "Hold",
    "HoldActionResponse",
    "HoldCaptureDebit",
    "HoldLookupResponse",
    "HoldReleaseResponse",
    "HoldResponse",
    "HoldsPage",
    "NextExpiry",
    "ReadyStatus",
    "Wallet",
    "WalletBalance",
]


@dataclass(frozen=True, slots=True)
class Balance:
    """A wallet's balance in one currency, right after a write."""

    user_id: str
    currency: str
    balance: int
    held: int
    available: int

    @classmethod
    def decode(cls, o: Obj) -> Balance:
        return cls(
            user_id=o.string("user_id"),
            currency=o.string("currency"),
            balance=o.integer("balance"),
            held=o.integer("held"),
            available=o.integer("available"),
        )


@dataclass(frozen=True, slots=True)
class Credit:
    """The credit of one store transaction (one flowNO)."""

    flow_no: str
    user_id: str
    product_id: str
    quantity: int
    currency: str
    amount: int
    status: str
    """`credited`, `partially_refunded` or `refunded`."""
    entry_id: int
    created_at: datetime

    @classmethod
    def decode(cls, o: Obj) -> Credit:
        return cls(**_credit_fields(o))


def _credit_fields(o: Obj) -> dict[str, Any]:
    return {
        "flow_no": o.string("flow_no"),
        "user_id": o.string("user_id"),
        "product_id": o.string("product_id"),
        "quantity": o.integer("quantity"),
        "currency": o.string("currency"),
        "amount": o.integer("amount"),
        "status": o.string("status"),
        "entry_id": o.integer("entry_id"),
        "created_at": o.timestamp("created_at"),
    }


@dataclass(frozen=True, slots=True)
class CreditLine:
    """One of the product's other lines a credit got: coins of another currency."""

    currency: str
    amount: int
    refunded_amount: int
    """What refunds took back of this line so far."""

    @classmethod
    def decode(cls, o: Obj) -> CreditLine:
        return cls(currency=o.string("currency"), amount=o.integer("amount"),
                   refunded_amount=o.integer("refunded_amount"))


@dataclass(frozen=True, slots=True)
class CreditRecord:
    """A credit as it is now, with how it was verified."""

    flow_no: str
    user_id: str
    product_id: str
    quantity: int
    currency: str
    amount: int
    status: str
    entry_id: int
    created_at: datetime
    source: str
    """`caller`, `appstore-jws`, `appstore-receipt`, `appstore-api`, `appstore-notification` or `googleplay`."""
    environment: str | None
    refunded_amount: int | None
    lines: tuple[CreditLine, ...]
    """The product's other lines this credit got, in currency order; empty for a one-currency product."""

    @classmethod
    def decode(cls, o: Obj) -> CreditRecord:
        return cls(
            **_credit_fields(o),
            source=o.string("source"),
            environment=o.string_or_none("environment"),
            refunded_amount=o.integer_or_none("refunded_amount"),
            lines=tuple(CreditLine.decode(item) for item in o.objs("lines")),
        )


@dataclass(frozen=True, slots=True)
class CreditResponse:
    """`POST /v1/credits`: the credit and the balance (current, on a replay)."""

    credit: Credit
    balance: Balance
    replayed: bool
    request_id: str | None

    @classmethod
    def decode(cls, o: Obj, *, replayed: bool, request_id: str | None) -> CreditResponse:
        return cls(
            credit=Credit.decode(o.obj("credit")),
            balance=Balance.decode(o.obj("balance")),
            replayed=replayed,
            request_id=request_id,
        )


@dataclass(frozen=True, slots=True)
class CreditLookupResponse:
    """`GET /v1/credits/{flow_no}`."""

    credit: CreditRecord

    @classmethod
    def decode(cls, o: Obj) -> CreditLookupResponse:
        return cls(credit=CreditRecord.decode(o.obj("credit")))


@dataclass(frozen=True, slots=True)
class CreditsPage:
    """One page of a player's credits, newest first."""

    credits: tuple[CreditRecord, ...]
    next_cursor: str | None

    @classmethod
    def decode(cls, o: Obj) -> CreditsPage:
        return cls(
            credits=tuple(CreditRecord.decode(item) for item in o.objs("credits")),
            next_cursor=o.string_or_none("next_cursor"),
        )


@dataclass(frozen=True, slots=True)
class Debit:
    """One debit; `id` is its ledger entry's id."""

    id: int
    user_id: str
    currency: str
    amount: int
    reason: str | None
    entry_id: int
    created_at: datetime

    @classmethod
    def decode(cls, o: Obj) -> Debit:
        return cls(
            id=o.integer("id"),
            user_id=o.string("user_id"),
            currency=o.string("currency"),
            amount=o.integer("amount"),
            reason=o.string_or_none("reason"),
            entry_id=o.integer("entry_id"),
            created_at=o.timestamp("created_at"),
        )


@dataclass(frozen=True, slots=True)
class DebitResponse:
    """`POST /v1/debits`: the debit and the balance right after it."""

    debit: Debit
    balance: Balance
    idempotency_key: str
    replayed: bool
    request_id: str | None

    @classmethod
    def decode(cls, o: Obj, *, idempotency_key: str, replayed: bool, request_id: str | None) -> DebitResponse:
        return cls(
            debit=Debit.decode(o.obj("debit")),
            balance=Balance.decode(o.obj("balance")),
            idempotency_key=idempotency_key,
            replayed=replayed,
            request_id=request_id,
        )


@dataclass(frozen=True, slots=True)
class Grant:
    """One grant of free coins; `id` is its ledger entry's id."""

    id: int
    user_id: str
    currency: str
    amount: int
    reason: str
    expires_at: datetime | None
    entry_id: int
    created_at: datetime

    @classmethod
    def decode(cls, o: Obj) -> Grant:
        return cls(
            id=o.integer("id"),
            user_id=o.string("user_id"),
            currency=o.string("currency"),
            amount=o.integer("amount"),
            reason=o.string("reason"),
            expires_at=o.timestamp_or_none("expires_at"),
            entry_id=o.integer("entry_id"),
            created_at=o.timestamp("created_at"),
        )


@dataclass(frozen=True, slots=True)
class GrantResponse:
    """`POST /v1/grants`: the grant and the balance right after it."""

    grant: Grant
    balance: Balance
    idempotency_key: str
    replayed: bool
    request_id: str | None

    @classmethod
    def decode(cls, o: Obj, *, idempotency_key: str, replayed: bool, request_id: str | None) -> GrantResponse:
        return cls(
            grant=Grant.decode(o.obj("grant")),
            balance=Balance.decode(o.obj("balance")),
            idempotency_key=idempotency_key,
            replayed=replayed,
            request_id=request_id,
        )


@dataclass(frozen=True, slots=True)
class NextExpiry:
    """The coins that expire next, and when."""

    amount: int
    at: datetime

    @classmethod
    def decode(cls, o: Obj) -> NextExpiry:
        return cls(amount=o.integer("amount"), at=o.timestamp("at"))


@dataclass(frozen=True, slots=True)
class WalletBalance:
    """One currency of `GET /v1/wallets/{user_id}`."""

    currency: str
    balance: int
    held: int
    available: int
    paid: int
    free: int
    debt: int
    next_expiry: NextExpiry | None

    @classmethod
    def decode(cls, o: Obj) -> WalletBalance:
        return cls(
            currency=o.string("currency"),
            balance=o.integer("balance"),
            held=o.integer("held"),
            available=o.integer("available"),
            paid=o.integer("paid"),
            free=o.integer("free"),
            debt=o.integer("debt"),
            next_expiry=_next_expiry(o.obj_or_none("next_expiry")),
        )


def _next_expiry(o: Obj | None) -> NextExpiry | None:
    return None if o is None else NextExpiry.decode(o)


@dataclass(frozen=True, slots=True)
class Wallet:
    """`GET /v1/wallets/{user_id}`: balances sorted by currency."""

    user_id: str
    balances: tuple[WalletBalance, ...]

    @classmethod
    def decode(cls, o: Obj) -> Wallet:
        return cls(
            user_id=o.string("user_id"),
            balances=tuple(WalletBalance.decode(item) for item in o.objs("balances")),
        )

    def currency(self, code: str) -> WalletBalance | None:
        """The balance in `code`, or None when the answer has none."""
        for balance in self.balances:
            if balance.currency == code:
                return balance
        return None


@dataclass(frozen=True, slots=True)
class Entry:
    """One ledger entry; `amount` is signed."""

    id: int
    currency: str
    amount: int
    balance_after: int
    kind: str
    """`credit`, `debit`, `refund`, `refund_reversal`, `grant`, `revoke`, `expire` or `bonus`."""
    reference: str
    created_at: datetime

    @classmethod
    def decode(cls, o: Obj) -> Entry:
        return cls(
            id=o.integer("id"),
            currency=o.string("currency"),
            amount=o.integer("amount"),
            balance_after=o.integer("balance_after"),
            kind=o.string("kind"),
            reference=o.string("reference"),
            created_at=o.timestamp("created_at"),
        )


@dataclass(frozen=True, slots=True)
class EntriesPage:
    """One page of a player's ledger entries, newest first."""

    entries: tuple[Entry, ...]
    next_cursor: str | None

    @classmethod
    def decode(cls, o: Obj) -> EntriesPage:
        return cls(
            entries=tuple(Entry.decode(item) for item in o.objs("entries")),
            next_cursor=o.string_or_none("next_cursor"),
        )


@dataclass(frozen=True, slots=True)
class AccountTokens:
    """The tokens to set on a player's store purchases."""

    user_id: str
    apple_app_account_token: str | None
    google_obfuscated_account_id: str

    @classmethod
    def decode(cls, o: Obj) -> AccountTokens:
        return cls(
            user_id=o.string("user_id"),
            apple_app_account_token=o.string_or_none("apple_app_account_token"),
            google_obfuscated_account_id=o.string("google_obfuscated_account_id"),
        )


@dataclass(frozen=True, slots=True)
class Hold:
    """A reservation of coins, as it is now."""

    id: int
    user_id: str
    currency: str
    amount: int
    status: str
    """`held`, `captured`, `released` or `expired`."""
    expires_at: datetime
    created_at: datetime
    reason: str | None = None
    metadata: dict[str, Any] | None = None
    captured_amount: int | None = None
    captured_at: datetime | None = None
    released_at: datetime | None = None
    expired_at: datetime | None = None

    @classmethod
    def decode(cls, o: Obj) -> Hold:
        return cls(
            id=o.integer("id"),
            user_id=o.string("user_id"),
            currency=o.string("currency"),
            amount=o.integer("amount"),
            status=o.string("status"),
            expires_at=o.timestamp("expires_at"),
            created_at=o.timestamp("created_at"),
            reason=o.opt_string("reason"),
            metadata=o.opt_mapping("metadata"),
            captured_amount=o.opt_integer("captured_amount"),
            captured_at=o.opt_timestamp("captured_at"),
            released_at=o.opt_timestamp("released_at"),
            expired_at=o.opt_timestamp("expired_at"),
        )


@dataclass(frozen=True, slots=True)
class HoldResponse:
    """`POST /v1/holds`: the hold and the balance right after it."""

    hold: Hold
    balance: Balance
    idempotency_key: str
    replayed: bool
    request_id: str | None

    @classmethod
    def decode(cls, o: Obj, *, idempotency_key: str, replayed: bool, request_id: str | None) -> HoldResponse:
        return cls(
            hold=Hold.decode(o.obj("hold")),
            balance=Balance.decode(o.obj("balance")),
            idempotency_key=idempotency_key,
            replayed=replayed,
            request_id=request_id,
        )


@dataclass(frozen=True, slots=True)
class HoldCaptureDebit:
    """The debit a capture made (reference `hold:{id}`)."""

    id: int
    entry_id: int
    user_id: str
    currency: str
    amount: int
    created_at: datetime
    reason: str | None = None

    @classmethod
    def decode(cls, o: Obj) -> HoldCaptureDebit:
        return cls(
            id=o.integer("id"),
            entry_id=o.integer("entry_id"),
            user_id=o.string("user_id"),
            currency=o.string("currency"),
            amount=o.integer("amount"),
            created_at=o.timestamp("created_at"),
            reason=o.opt_string("reason"),
        )


@dataclass(frozen=True, slots=True)
class HoldActionResponse:
    """`POST /v1/holds/{id}/capture`: the hold, its debit and the balance after."""

    hold: Hold
    debit: HoldCaptureDebit
    balance: Balance
    idempotency_key: str
    replayed: bool
    request_id: str | None

    @classmethod
    def decode(cls, o: Obj, *, idempotency_key: str, replayed: bool, request_id: str | None) -> HoldActionResponse:
        return cls(
            hold=Hold.decode(o.obj("hold")),
            debit=HoldCaptureDebit.decode(o.obj("debit")),
            balance=Balance.decode(o.obj("balance")),
            idempotency_key=idempotency_key,
            replayed=replayed,
            request_id=request_id,
        )


@dataclass(frozen=True, slots=True)
class HoldReleaseResponse:
    """`POST /v1/holds/{id}/release`: the hold and the balance after."""

    hold: Hold
    balance: Balance
    idempotency_key: str
    replayed: bool
    request_id: str | None

    @classmethod
    def decode(cls, o: Obj, *, idempotency_key: str, replayed: bool, request_id: str | None) -> HoldReleaseResponse:
        return cls(
            hold=Hold.decode(o.obj("hold")),
            balance=Balance.decode(o.obj("balance")),
            idempotency_key=idempotency_key,
            replayed=replayed,
            request_id=request_id,
        )


@dataclass(frozen=True, slots=True)
class HoldLookupResponse:
    """`GET /v1/holds/{id}`."""

    hold: Hold

    @classmethod
    def decode(cls, o: Obj) -> HoldLookupResponse:
        return cls(hold=Hold.decode(o.obj("hold")))


@dataclass(frozen=True, slots=True)
class HoldsPage:
    """One page of a player's holds, newest first."""

    holds: tuple[Hold, ...]
    next_cursor: str | None

    @classmethod
    def decode(cls, o: Obj) -> HoldsPage:
        return cls(
            holds=tuple(Hold.decode(item) for item in o.objs("holds")),
            next_cursor=o.string_or_none("next_cursor"),
        )


@dataclass(frozen=True, slots=True)
class Event:
    """One change to one wallet, from the event feed."""

    id: int
    type: str
    user_id: str
    currency: str
    amount: int
    balance_after: int
    held: int
    available: int
    entry_id: int | None
    hold_id: int | None
    flow_no: str | None
    created_at: datetime
    data: dict[str, Any]

    @classmethod
    def decode(cls, o: Obj) -> Event:
        return cls(
            id=o.integer("id"),
            type=o.string("type"),
            user_id=o.string("user_id"),
            currency=o.string("currency"),
            amount=o.integer("amount"),
            balance_after=o.integer("balance_after"),
            held=o.integer("held"),
            available=o.integer("available"),
            entry_id=o.integer_or_none("entry_id"),
            hold_id=o.integer_or_none("hold_id"),
            flow_no=o.string_or_none("flow_no"),
            created_at=o.timestamp("created_at"),
            data=o.mapping("data"),
        )


@dataclass(frozen=True, slots=True)
class EventsPage:
    """One page of the event feed, in id order; pass `next_after` back as `after`."""

    events: tuple[Event, ...]
    next_after: int

    @classmethod
    def decode(cls, o: Obj) -> EventsPage:
        return cls(
            events=tuple(Event.decode(item) for item in o.objs("events")),
            next_after=o.integer("next_after"),
        )


@dataclass(frozen=True, slots=True)
class HealthStatus:
    """`GET /healthz`: `status` is `ok`."""

    status: str

    @classmethod
    def decode(cls, o: Obj) -> HealthStatus:
        return cls(status=o.string("status"))


@dataclass(frozen=True, slots=True)
class ReadyStatus:
    """`GET /readyz`: `status` is `ready`."""

    status: str

    @classmethod
    def decode(cls, o: Obj) -> ReadyStatus:
        return cls(status=o.string("status"))


@dataclass(frozen=True, slots=True)
class FieldError:
    """One invalid field of a `validation_failed` problem."""

    field: str
    message: str

    @classmethod
    def decode(cls, o: Obj) -> FieldError:
        return cls(field=o.string("field"), message=o.string("message"))
