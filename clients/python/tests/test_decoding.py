"""Decoding is strict about required members and tolerant of new ones (no service needed)."""

from __future__ import annotations

import json
from typing import Any

import pytest

import wallet_client as wc
from wallet_client._decode import Obj
from wallet_client.errors import problem_from_answer
from wallet_client.models import Debit, EventsPage, Hold, Wallet

DEBIT: dict[str, Any] = {
    "id": 2, "user_id": "player-1", "currency": "coin", "amount": 100, "reason": None,
    "entry_id": 2, "created_at": "2026-12-02T12:45:46.213920Z",
}


def test_required_member_missing_is_an_error() -> None:
    body = dict(DEBIT)
    del body["reason"]  # required, though it may be null
    with pytest.raises(wc.DecodeError, match=r"body\.reason: required member is missing"):
        Debit.decode(Obj(body, "body"))
    assert Debit.decode(Obj(DEBIT, "body")).reason is None


def test_unknown_members_are_tolerated() -> None:
    debit = Debit.decode(Obj({**DEBIT, "added_later": {"x": 1}}, "body"))
    assert debit.amount == 100 and debit.created_at.microsecond == 213920


@pytest.mark.parametrize("value", [True, "100", 1.5, None])
def test_wrong_types_are_errors(value: Any) -> None:
    with pytest.raises(wc.DecodeError, match="amount"):
        Debit.decode(Obj({**DEBIT, "amount": value}, "body"))


def test_bad_timestamp_is_an_error() -> None:
    with pytest.raises(wc.DecodeError, match="created_at"):
        Debit.decode(Obj({**DEBIT, "created_at": "yesterday"}, "body"))


def test_optional_members_may_be_absent() -> None:
    hold = Hold.decode(Obj({
        "id": 1, "user_id": "p", "currency": "coin", "amount": 5, "status": "held",
        "expires_at": "2026-12-03T06:10:00.120000Z", "created_at": "2026-12-03T06:00:00.120000Z",
    }, "body"))
    assert hold.reason is None and hold.captured_amount is None and hold.metadata is None


def test_nested_errors_name_their_path() -> None:
    with pytest.raises(wc.DecodeError, match=r"body\.balances\[0\]\.debt"):
        Wallet.decode(Obj({"user_id": "p", "balances": [{
            "currency": "coin", "balance": 0, "held": 0, "available": 0, "paid": 0, "free": 0, "next_expiry": None,
        }]}, "body"))
    with pytest.raises(wc.DecodeError, match="next_after"):
        EventsPage.decode(Obj({"events": []}, "body"))


def answer(status: int, body: Any, headers: dict[str, str] | None = None) -> wc.ProblemError:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return problem_from_answer(status, headers or {}, raw, attempts=1, idempotency_key=None)


def test_problems_map_to_their_classes() -> None:
    error = answer(409, {"type": "urn:problem:insufficient_funds", "title": "Insufficient funds", "status": 409,
                         "detail": "short", "code": "insufficient_funds", "instance": "abc",
                         "balance": 5, "available": 3},
                   {"Idempotent-Replayed": "true", "X-Request-Id": "def"})
    assert isinstance(error, wc.InsufficientFundsError)
    assert (error.balance, error.available, error.replayed, error.instance) == (5, 3, True, "abc")

    failed = answer(422, {"code": "validation_failed", "status": 422, "title": "t", "detail": "d", "instance": "i",
                          "errors": [{"field": "amount", "message": "too small"}]})
    assert isinstance(failed, wc.ValidationFailedError)
    assert failed.errors == (wc.FieldError(field="amount", message="too small"),)

    busy = answer(503, {"code": "wallet_busy", "status": 503}, {"Retry-After": "2"})
    assert isinstance(busy, wc.WalletBusyError) and busy.retry_after == 2.0


def test_unknown_codes_and_non_problems_keep_the_body() -> None:
    unknown = answer(409, {"code": "brand_new_code", "status": 409, "extra": [1, 2]})
    assert type(unknown) is wc.UnknownProblemError
    assert unknown.code == "brand_new_code" and unknown.body["extra"] == [1, 2]

    html = answer(502, b"<html>bad gateway</html>")
    assert type(html) is wc.UnknownProblemError and html.code is None
    assert html.status == 502 and "bad gateway" in html.body["detail"]
