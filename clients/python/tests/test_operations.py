"""Every operation through the real service."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from datetime import datetime, timezone

import pytest

import wallet_client as wc
from walletsvc import WalletService
from wallet_client import WalletClient

NewId = Callable[[str], str]


def fund(app: WalletClient, user: str, new_id: NewId, *, product: str = "guodong600", quantity: int = 1) -> int:
    return app.create_credit(user, new_id("flow"), product, quantity=quantity).credit.amount


def test_operations_endpoints(app: WalletClient) -> None:
    assert app.get_health().status == "ok"
    assert app.get_readiness().status == "ready"
    document = app.get_openapi_document()
    assert document["openapi"].startswith("3.1")


def test_credit_and_its_replay(app: WalletClient, new_id: NewId) -> None:
    user, flow = new_id("buyer"), new_id("2000")
    first = app.create_credit(user, flow, "guodong600")
    assert not first.replayed
    assert first.credit.flow_no == flow and first.credit.user_id == user
    assert first.credit.amount == 600 and first.credit.quantity == 1 and first.credit.status == "credited"
    assert first.balance.balance == 600 and first.balance.available == 600
    assert isinstance(first.credit.created_at, datetime) and first.credit.created_at.tzinfo is not None
    assert first.request_id

    again = app.create_credit(user, flow, "guodong600")
    assert again.replayed
    assert again.credit == first.credit

    record = app.get_credit(flow).credit
    assert record.flow_no == flow and record.amount == 600
    assert record.source == "caller" and record.environment is None and record.refunded_amount is None
    assert record.lines == ()


def test_credit_quantity_and_amount_check(app: WalletClient, new_id: NewId) -> None:
    user = new_id("buyer")
    credit = app.create_credit(user, new_id("flow"), "guodong1200", quantity=3, amount=3600)
    assert credit.credit.amount == 3600 and credit.credit.quantity == 3


def test_credit_refused_amount_mismatch(app: WalletClient, new_id: NewId) -> None:
    with pytest.raises(wc.AmountMismatchError) as caught:
        app.create_credit(new_id("buyer"), new_id("flow"), "guodong600", amount=60000)
    error = caught.value
    assert error.status == 422 and error.code == "amount_mismatch"
    assert error.expected_amount == 600
    assert error.instance and error.title and error.detail
    assert error.body["expected_amount"] == 600
    assert error.attempts == 1


def test_credit_refused_verification_failed(app: WalletClient, new_id: NewId) -> None:
    # The development database vouches for the caller only, so any signed
    # transaction is refused; a malformed one is refused either way.
    with pytest.raises(wc.VerificationFailedError) as caught:
        app.create_credit(new_id("buyer"), new_id("flow"), "guodong600", signed_transaction="aaa.bbb.ccc")
    assert caught.value.reason in ("mode_not_enabled", "malformed")


def test_unknown_product(app: WalletClient, new_id: NewId) -> None:
    with pytest.raises(wc.UnknownProductError):
        app.create_credit(new_id("buyer"), new_id("flow"), "no-such-product")


def test_flow_no_conflict_by_name(app: WalletClient, new_id: NewId) -> None:
    flow = new_id("flow")
    app.create_credit(new_id("buyer"), flow, "guodong600")
    with pytest.raises(wc.FlowNoConflictError) as caught:
        app.create_credit(new_id("someone-else"), flow, "guodong600")
    assert caught.value.status == 409


def test_debits_and_replay(app: WalletClient, game: WalletClient, new_id: NewId) -> None:
    user = new_id("player")
    fund(app, user, new_id)

    generated = game.create_debit(user, 100, reason="sword", metadata={"item": "sword", "level": 3})
    assert str(uuid.UUID(generated.idempotency_key, version=4)) == generated.idempotency_key
    assert not generated.replayed
    assert generated.debit.amount == 100 and generated.debit.reason == "sword"
    assert generated.debit.id == generated.debit.entry_id
    assert generated.balance.balance == 500

    key = new_id("order")
    first = game.create_debit(user, 50, idempotency_key=key)
    assert first.idempotency_key == key and not first.replayed and first.debit.reason is None
    replay = game.create_debit(user, 50, idempotency_key=key)
    assert replay.replayed
    assert replay.debit == first.debit and replay.balance == first.balance
    assert game.get_wallet(user).balances[0].balance == 450


def test_insufficient_funds_by_name(app: WalletClient, game: WalletClient, new_id: NewId) -> None:
    user = new_id("player")
    fund(app, user, new_id)
    key = new_id("too-much")
    with pytest.raises(wc.InsufficientFundsError) as caught:
        game.create_debit(user, 601, idempotency_key=key)
    error = caught.value
    assert (error.status, error.balance, error.available) == (409, 600, 600)
    assert error.idempotency_key == key and not error.replayed
    # Stored under the key: the retry replays it.
    with pytest.raises(wc.InsufficientFundsError) as again:
        game.create_debit(user, 601, idempotency_key=key)
    assert again.value.replayed and again.value.instance == error.instance


def test_idempotency_key_reused_by_name(app: WalletClient, game: WalletClient, new_id: NewId) -> None:
    user = new_id("player")
    fund(app, user, new_id)
    key = new_id("order")
    game.create_debit(user, 10, idempotency_key=key)
    with pytest.raises(wc.IdempotencyKeyReusedError) as caught:
        game.create_debit(user, 11, idempotency_key=key)
    assert caught.value.status == 422 and caught.value.idempotency_key == key


def test_validation_failed_lists_fields(game: WalletClient, new_id: NewId) -> None:
    with pytest.raises(wc.ValidationFailedError) as caught:
        game.create_debit(new_id("player"), 0)
    assert caught.value.errors is not None
    assert "amount" in {error.field for error in caught.value.errors}


def test_scopes_and_keys(app: WalletClient, service: WalletService, new_id: NewId) -> None:
    with pytest.raises(wc.ForbiddenError):
        app.create_debit(new_id("player"), 1)
    with WalletClient(service.url, "wk_" + "A" * 43) as stranger:
        with pytest.raises(wc.UnauthorizedError) as caught:
            stranger.get_wallet(new_id("player"))
    assert caught.value.status == 401


def test_not_found(app: WalletClient, game: WalletClient, new_id: NewId) -> None:
    with pytest.raises(wc.NotFoundError):
        app.get_credit(new_id("never-credited"))
    with pytest.raises(wc.NotFoundError):
        game.get_hold(987654321)


def test_grant(game: WalletClient, new_id: NewId) -> None:
    user, key = new_id("player"), new_id("login-reward")
    granted = game.create_grant(user, 50, "daily login", expires_in_days=7, idempotency_key=key)
    assert not granted.replayed and granted.idempotency_key == key
    assert granted.grant.amount == 50 and granted.grant.reason == "daily login"
    assert granted.grant.expires_at is not None and granted.grant.expires_at > datetime.now(timezone.utc)
    assert granted.balance.balance == 50
    replay = game.create_grant(user, 50, "daily login", expires_in_days=7, idempotency_key=key)
    assert replay.replayed and replay.grant == granted.grant

    forever = game.create_grant(user, 5, "welcome")
    assert forever.grant.expires_at is None and forever.balance.balance == 55

    wallet = game.get_wallet(user)
    coin = wallet.currency("coin")
    assert coin is not None
    assert (coin.balance, coin.free, coin.paid, coin.debt) == (55, 55, 0, 0)
    assert coin.next_expiry is not None and coin.next_expiry.amount == 50

    with pytest.raises(wc.GrantLimitExceededError) as caught:
        game.create_grant(user, 10**9, "too generous")
    assert caught.value.max_amount is not None and caught.value.max_amount < 10**9


def test_balances(app: WalletClient, game: WalletClient, new_id: NewId) -> None:
    user = new_id("player")
    unseen = game.get_wallet(user)
    assert unseen.user_id == user
    assert [(b.currency, b.balance, b.next_expiry) for b in unseen.balances] == [("coin", 0, None)]
    fund(app, user, new_id, product="guodong5000")
    only_coin = game.get_wallet(user, currency="coin")
    assert len(only_coin.balances) == 1
    coin = only_coin.balances[0]
    assert (coin.balance, coin.held, coin.available, coin.paid, coin.free, coin.debt) == (5000, 0, 5000, 5000, 0, 0)
    with pytest.raises(wc.UnknownCurrencyError):
        game.get_wallet(user, currency="no_such_currency")


def test_holds(app: WalletClient, game: WalletClient, new_id: NewId) -> None:
    user = new_id("player")
    fund(app, user, new_id)

    placed = game.create_hold(user, 100, reason="match entry", metadata={"match": 77}, expires_in_seconds=600)
    hold = placed.hold
    assert hold.status == "held" and hold.amount == 100 and hold.reason == "match entry"
    assert hold.metadata == {"match": 77}
    assert (placed.balance.balance, placed.balance.held, placed.balance.available) == (600, 100, 500)
    assert game.create_hold(user, 100, reason="match entry", metadata={"match": 77}, expires_in_seconds=600,
                            idempotency_key=placed.idempotency_key).replayed

    assert game.get_hold(hold.id).hold == hold
    assert [h.id for h in game.list_holds(user, status="active").holds] == [hold.id]

    with pytest.raises(wc.AmountExceedsHoldError) as exceeds:
        game.capture_hold(hold.id, amount=101)
    assert exceeds.value.held_amount == 100

    captured = game.capture_hold(hold.id, amount=60)
    assert captured.hold.status == "captured" and captured.hold.captured_amount == 60
    assert captured.hold.captured_at is not None
    assert captured.debit.amount == 60 and captured.debit.reason == "match entry"
    assert (captured.balance.balance, captured.balance.held, captured.balance.available) == (540, 0, 540)
    replay = game.capture_hold(hold.id, amount=60, idempotency_key=captured.idempotency_key)
    assert replay.replayed and replay.debit == captured.debit

    with pytest.raises(wc.HoldNotActiveError) as not_active:
        game.release_hold(hold.id)
    assert not_active.value.hold_status == "captured"

    other = game.create_hold(user, 40).hold
    released = game.release_hold(other.id)
    assert released.hold.status == "released" and released.hold.released_at is not None
    assert released.balance.available == 540
    assert game.release_hold(other.id, idempotency_key=released.idempotency_key).replayed

    big = game.create_hold(user, 540).hold
    with pytest.raises(wc.InsufficientFundsError):
        game.create_hold(user, 1)
    game.capture_hold(big.id)

    listed = list(game.iter_holds(user, page_size=1))
    assert [h.id for h in listed] == [big.id, other.id, hold.id]
    assert [h.status for h in listed] == ["captured", "released", "captured"]
    assert [h.id for h in game.iter_holds(user, status="released")] == [other.id]

    entries = list(game.iter_entries(user))
    assert [(e.kind, e.amount, e.reference) for e in entries[:2]] == [
        ("debit", -540, f"hold:{big.id}"),
        ("debit", -60, f"hold:{hold.id}"),
    ]


def test_history_paging(app: WalletClient, game: WalletClient, new_id: NewId) -> None:
    user = new_id("player")
    fund(app, user, new_id, product="guodong5000")
    keys = [new_id("buy") for _ in range(6)]
    for amount, key in enumerate(keys, start=1):
        game.create_debit(user, amount, idempotency_key=key)

    first = game.list_entries(user, limit=3)
    assert len(first.entries) == 3 and first.next_cursor is not None
    paged = list(game.iter_entries(user, page_size=2))
    assert len(paged) == 7  # four pages of two at most
    assert [e.reference for e in paged[:6]] == list(reversed(keys))
    assert paged[-1].kind == "credit" and paged[-1].amount == 5000
    assert [e.id for e in paged] == sorted((e.id for e in paged), reverse=True)
    assert paged[0].balance_after == 5000 - sum(range(1, 7))
    whole = game.list_entries(user, currency="coin", limit=500)
    assert whole.next_cursor is None and list(whole.entries) == paged


def test_credits_listing(app: WalletClient, game: WalletClient, new_id: NewId) -> None:
    user = new_id("buyer")
    flows = [new_id("flow") for _ in range(3)]
    for flow in flows:
        app.create_credit(user, flow, "guodong600")
    page = game.list_credits(user, limit=2)
    assert len(page.credits) == 2 and page.next_cursor is not None
    listed = list(game.iter_credits(user, page_size=2))
    assert [c.flow_no for c in listed] == list(reversed(flows))
    assert all(c.source == "caller" and c.status == "credited" for c in listed)


def test_account_tokens(app: WalletClient, new_id: NewId) -> None:
    user = new_id("player")
    tokens = app.get_account_tokens(user)
    assert tokens.user_id == user
    assert tokens.google_obfuscated_account_id == hashlib.sha256(user.encode()).hexdigest()
    assert tokens.apple_app_account_token is None  # no namespace configured


def test_events_feed(app: WalletClient, game: WalletClient, feed: WalletClient, new_id: NewId) -> None:
    user = new_id("player")
    flow = new_id("flow")
    app.create_credit(user, flow, "guodong600")
    debit = game.create_debit(user, 25, reason="potion")
    hold = game.create_hold(user, 10).hold
    game.capture_hold(hold.id)
    game.create_grant(user, 7, "quest")

    events = list(feed.iter_events(user_id=user, page_size=2))
    assert [e.type for e in events] == [
        "credit.created", "debit.created", "hold.placed", "hold.captured", "grant.created",
    ]
    assert [e.id for e in events] == sorted(e.id for e in events)
    assert events[0].flow_no == flow and events[0].data["product_id"] == "guodong600"
    assert events[1].entry_id == debit.debit.entry_id and events[1].data["reason"] == "potion"
    assert events[2].hold_id == hold.id and events[2].entry_id is None and events[2].amount == 0
    assert sum(e.amount for e in events) == events[-1].balance_after == 600 - 25 - 10 + 7
    assert all(e.user_id == user and e.data["client"] for e in events)

    # Resuming after the last one: caught up.
    assert list(feed.iter_events(after=events[-1].id, user_id=user)) == []
    only_debits = list(feed.iter_events(user_id=user, event_type="debit.created"))
    assert [e.id for e in only_debits] == [events[1].id]

    page = feed.list_events(after=0, limit=1)
    assert len(page.events) == 1 and page.next_after == page.events[0].id
