"""500 debits through the client while `wallet serve` is SIGKILLed and restarted.

Eight worker threads share one client with its default retries. A killer
thread SIGKILLs the service at fixed points of progress and starts it again
on the same port and data directory. Afterwards the ledger, read through the
API, must hold exactly one debit per call, and the balances must have
fallen by exactly the sum of the amounts. It runs last, on the suite's
service, and ends by stopping it.
"""

from __future__ import annotations

import os
import random
import subprocess
import threading
import time
import uuid
from collections import Counter

import pytest

from walletsvc import WalletService
from wallet_client import DebitResponse, WalletClient

DEBITS = 500
WORKERS = 8
PLAYERS = 5
KILL_AT = (60, 200, 340)  # debits completed when the service is killed
DEADLINE_SECONDS = 45.0


@pytest.mark.chaos
def test_chaos_debits_survive_kills(
    service: WalletService, wallet_binary: str, capsys: pytest.CaptureFixture[str]
) -> None:
    svc = service
    run = uuid.uuid4().hex[:8]
    players = [f"chaos-{run}-{index}" for index in range(PLAYERS)]
    with WalletClient(svc.url, svc.keys["app-backend"]) as app:
        for index, player in enumerate(players):
            app.create_credit(player, f"chaos-{run}-flow-{index}", "guodong5000", quantity=2)

    rng = random.Random(20261207)
    jobs = [(players[index % PLAYERS], rng.randint(1, 40)) for index in range(DEBITS)]
    client = WalletClient(svc.url, svc.keys["game-server"])
    before = {player: client.get_wallet(player).balances[0].balance for player in players}
    retries_before = client.retry_count

    lock = threading.Condition()
    next_job = 0
    done: list[tuple[str, int, DebitResponse]] = []
    failures: list[BaseException] = []
    stop = threading.Event()

    def worker() -> None:
        nonlocal next_job
        while not stop.is_set():
            with lock:
                if next_job >= len(jobs):
                    return
                player, amount = jobs[next_job]
                next_job += 1
            try:
                result = client.create_debit(player, amount, reason="chaos")
            except BaseException as error:  # noqa: BLE001 - every failure fails the test
                with lock:
                    failures.append(error)
                    lock.notify_all()
                return
            with lock:
                done.append((player, amount, result))
                lock.notify_all()

    killer_errors: list[BaseException] = []

    def killer() -> None:
        try:
            for threshold in KILL_AT:
                with lock:
                    if not lock.wait_for(lambda: len(done) >= threshold or failures or stop.is_set(),
                                         timeout=DEADLINE_SECONDS):
                        return
                    if failures or stop.is_set():
                        return
                svc.kill()
                svc.restart()
        except BaseException as error:  # noqa: BLE001
            killer_errors.append(error)

    started = time.monotonic()
    threads = [threading.Thread(target=worker, name=f"debit-{n}") for n in range(WORKERS)]
    chaos = threading.Thread(target=killer, name="killer")
    for thread in threads + [chaos]:
        thread.start()
    for thread in threads + [chaos]:
        thread.join(timeout=max(0.0, DEADLINE_SECONDS - (time.monotonic() - started)))
    stop.set()
    hung = [thread.name for thread in threads + [chaos] if thread.is_alive()]
    elapsed = time.monotonic() - started

    assert not hung, f"threads still running after {DEADLINE_SECONDS} s: {hung}"
    assert not killer_errors, killer_errors
    assert not failures, failures
    assert len(done) == DEBITS

    retries = client.retry_count - retries_before
    keys = [result.idempotency_key for _, _, result in done]
    assert len(set(keys)) == DEBITS
    requested = {result.idempotency_key: amount for _, amount, result in done}

    # The ledger, through the API.
    references: Counter[str] = Counter()
    amounts: dict[str, int] = {}
    for player in players:
        for entry in client.iter_entries(player, page_size=500):
            if entry.kind == "debit":
                references[entry.reference] += 1
                amounts[entry.reference] = -entry.amount
    applied = sum(1 for key in keys if references[key] >= 1)
    doubled = sum(count - 1 for count in references.values() if count > 1)
    strangers = [reference for reference in references if reference not in requested]
    line = (f"chaos: debits={DEBITS} applied={applied} doubled={doubled} "
            f"retries={retries} kills={svc.kills}")
    with capsys.disabled():
        print(f"\n{line} ({elapsed:.1f} s)")
    report = os.environ.get("WALLET_CLIENT_CHAOS_REPORT")
    if report:
        with open(report, "w") as out:
            out.write(line + "\n")

    assert svc.kills == len(KILL_AT)
    assert applied == DEBITS and doubled == 0 and not strangers
    assert sum(references.values()) == DEBITS
    assert amounts == requested
    after = {player: client.get_wallet(player).balances[0].balance for player in players}
    for player in players:
        spent = sum(amount for owner, amount, _ in done if owner == player)
        assert before[player] - after[player] == spent, player
    assert sum(before.values()) - sum(after.values()) == sum(amount for _, amount in jobs)
    assert retries > 0
    client.close()

    # The books still balance, by the service's own check.
    check = subprocess.run([wallet_binary, "check"], env=svc.env(), capture_output=True, timeout=60,
                           stdin=subprocess.DEVNULL, cwd=svc.workdir)
    assert check.returncode == 0, check.stdout.decode() + check.stderr.decode()

    # The restarted service reused the cluster the first one made, and
    # leaves it running when it stops: stop it ourselves.
    svc.terminate()
    assert svc.cluster_running()
    svc.stop_cluster()
    assert not svc.cluster_running()
