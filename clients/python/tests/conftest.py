"""Fixtures: one real `wallet serve` for the suite, its keys, and clients.

The binary is `WALLET_BINARY`, else `<repo>/.build/debug/wallet`. The chaos
test, which kills and restarts the service, runs last.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from walletsvc import WalletService
from wallet_client import WalletClient

REPO = Path(__file__).resolve().parents[3]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos: kills and restarts the shared service; runs last")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("chaos") is not None)


@pytest.fixture(scope="session")
def wallet_binary() -> str:
    binary = os.environ.get("WALLET_BINARY") or str(REPO / ".build" / "debug" / "wallet")
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        pytest.fail(f"no wallet binary at {binary}: pass one as WALLET_BINARY (test.sh takes it as its argument)")
    return binary


@pytest.fixture(scope="session")
def service(wallet_binary: str) -> Iterator[WalletService]:
    svc = WalletService(wallet_binary, "suite")
    try:
        svc.start()
        svc.keys["events"] = svc.create_key("client-events", "events,read")
        yield svc
    finally:
        svc.stop()


@pytest.fixture(scope="session")
def app(service: WalletService) -> Iterator[WalletClient]:
    """The app backend's client (scopes credit, read)."""
    with WalletClient(service.url, service.keys["app-backend"]) as client:
        yield client


@pytest.fixture(scope="session")
def game(service: WalletService) -> Iterator[WalletClient]:
    """The game server's client (scopes debit, grant, read)."""
    with WalletClient(service.url, service.keys["game-server"]) as client:
        yield client


@pytest.fixture(scope="session")
def feed(service: WalletService) -> Iterator[WalletClient]:
    """A client with a key of scopes events and read."""
    with WalletClient(service.url, service.keys["events"]) as client:
        yield client


@pytest.fixture
def new_id() -> Callable[[str], str]:
    """Ids unique to this run, so tests never share a player or a flowNO."""
    return lambda prefix: f"{prefix}-{uuid.uuid4().hex[:12]}"
