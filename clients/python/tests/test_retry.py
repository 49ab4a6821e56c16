"""The retry rule, with faults injected by a loopback proxy in front of the real service."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

import wallet_client as wc
from faultproxy import DROP, DROP_AFTER_FORWARD, STALL, Fault, FaultProxy, Respond, problem
from walletsvc import WalletService, free_port
from wallet_client import WalletClient

NewId = Callable[[str], str]


def debits_with_reference(game: WalletClient, user: str, reference: str) -> int:
    return sum(1 for e in game.iter_entries(user) if e.kind == "debit" and e.reference == reference)


def test_503_retry_after_then_dropped_connection(
    service: WalletService, app: WalletClient, game: WalletClient, new_id: NewId
) -> None:
    user = new_id("player")
    app.create_credit(user, new_id("flow"), "guodong600")
    faults: list[Fault] = [problem(503, "overloaded", retry_after="1"), DROP_AFTER_FORWARD]
    with FaultProxy(service.port, faults) as proxy, WalletClient(proxy.url, service.keys["game-server"]) as client:
        started = time.monotonic()
        result = client.create_debit(user, 70, reason="through the proxy")
        elapsed = time.monotonic() - started
        seen = list(proxy.seen)

    # Three attempts: the 503, the one the service applied but whose answer
    # was dropped, and the one that got the stored answer back.
    assert [s.fault for s in seen] == ["respond 503", DROP_AFTER_FORWARD, "forward"]
    assert all(s.idempotency_key == result.idempotency_key for s in seen)
    assert result.replayed
    assert client.retry_count == 2 and client.stats().attempts == 3
    # Retry-After: 1 was honoured (a generous bound, not a tight timing).
    assert 0.95 <= seen[1].at - seen[0].at < 10
    assert elapsed < 20
    # Applied exactly once.
    assert result.balance.balance == 530
    assert debits_with_reference(game, user, result.idempotency_key) == 1
    assert game.get_wallet(user).balances[0].balance == 530


def test_credit_after_dropped_connection_and_timeout(
    service: WalletService, game: WalletClient, new_id: NewId
) -> None:
    user, flow = new_id("buyer"), new_id("flow")
    with FaultProxy(service.port, [DROP, STALL]) as proxy, \
            WalletClient(proxy.url, service.keys["app-backend"], request_timeout=1.0) as client:
        result = client.create_credit(user, flow, "guodong600")
        seen = list(proxy.seen)
    assert [s.fault for s in seen[:2]] == [DROP, STALL]
    # Normally one forward; a loaded machine may time out a forwarded one
    # too, and the next attempt then replays the credit.
    assert len(seen) >= 3 and all(s.fault == "forward" for s in seen[2:])
    assert result.replayed == (len(seen) > 3) and result.credit.flow_no == flow
    assert client.retry_count == len(seen) - 1
    assert [e.kind for e in game.iter_entries(user)] == ["credit"]


def test_outcome_unknown_is_retried_with_the_same_key(
    service: WalletService, app: WalletClient, new_id: NewId
) -> None:
    user = new_id("player")
    app.create_credit(user, new_id("flow"), "guodong600")
    with FaultProxy(service.port, [problem(503, "outcome_unknown")]) as proxy, \
            WalletClient(proxy.url, service.keys["game-server"]) as client:
        result = client.create_hold(user, 10)
        keys = proxy.keys()
    assert keys == [result.idempotency_key] * 2 and not result.replayed


def test_bounded_by_attempts(service: WalletService, new_id: NewId) -> None:
    with FaultProxy(service.port, repeat=problem(503, "overloaded", retry_after="0")) as proxy, \
            WalletClient(proxy.url, service.keys["game-server"], max_attempts=3) as client:
        with pytest.raises(wc.OverloadedError) as caught:
            client.create_debit(new_id("player"), 1)
        keys = proxy.keys()
    assert caught.value.attempts == 3 and caught.value.retry_after == 0
    assert len(keys) == 3 and len(set(keys)) == 1 and keys[0] == caught.value.idempotency_key
    assert client.retry_count == 2


def test_bounded_by_total_time(service: WalletService, new_id: NewId) -> None:
    # A pause that would outlast the budget is not taken: the last error is raised at once.
    with FaultProxy(service.port, repeat=problem(503, "wallet_busy", retry_after="5")) as proxy, \
            WalletClient(proxy.url, service.keys["game-server"], max_total_time=2.0) as client:
        started = time.monotonic()
        with pytest.raises(wc.WalletBusyError) as caught:
            client.get_wallet(new_id("player"))
        elapsed = time.monotonic() - started
        assert len(proxy.seen) == 1
    assert caught.value.attempts == 1 and caught.value.retry_after == 5
    assert elapsed < 4.0  # it did not sleep the 5 s


def test_no_retry_without_the_rule(service: WalletService, new_id: NewId) -> None:
    # A 503 without Retry-After that is not outcome_unknown, and any other problem, is raised at once.
    faults = [problem(503, "shutting_down"), problem(429, "rate_limited", retry_after="1")]
    with FaultProxy(service.port, faults) as proxy, \
            WalletClient(proxy.url, service.keys["app-backend"]) as client:
        with pytest.raises(wc.ShuttingDownError):
            client.get_wallet(new_id("player"))
        with pytest.raises(wc.RateLimitedError) as limited:
            client.get_wallet(new_id("player"))
        assert len(proxy.seen) == 2
    assert limited.value.retry_after == 1 and client.retry_count == 0


def test_transport_error_after_the_attempts() -> None:
    port = free_port()  # nothing listens there
    with WalletClient(f"http://127.0.0.1:{port}", "wk_unused", max_attempts=3, max_total_time=10) as client:
        with pytest.raises(wc.TransportError) as caught:
            client.get_health()
    assert caught.value.attempts == 3
    assert isinstance(caught.value.cause, ConnectionRefusedError)
    assert client.retry_count == 2


def test_unknown_problem_and_bad_body(service: WalletService, new_id: NewId) -> None:
    odd = problem(418, "teapot_overheated", temperature=451)
    missing_member = Respond(200, {"Content-Type": "application/json"},
                             json.dumps({"user_id": "x", "balances": [{"currency": "coin", "balance": 1}]}).encode())
    with FaultProxy(service.port, [odd, missing_member]) as proxy, \
            WalletClient(proxy.url, service.keys["game-server"]) as client:
        with pytest.raises(wc.UnknownProblemError) as caught:
            client.get_wallet(new_id("player"))
        with pytest.raises(wc.DecodeError) as bad:
            client.get_wallet(new_id("player"))
        assert len(proxy.seen) == 2
    assert caught.value.code == "teapot_overheated" and caught.value.body["temperature"] == 451
    assert caught.value.status == 418
    assert "balances[0].held: required member is missing" in str(bad.value)
