#!/usr/bin/python3
"""Failover drill: kills the PostgreSQL primary under load and counts what
clients were told against what the ledger holds.

Run: deploy/ha/drill.py --wallet .build/release/wallet [--rounds N] [--switchover]
     (or `make failover`; `make test` runs `--switchover --rounds 1 --clients 4 --pace-ms 100`)

It brings the local layout up (deploy/ha/local.sh), starts two `wallet serve`
instances through PgBouncer and HAProxy, and runs client threads that credit
and debit as a careful client does: every operation has its own flowNO or
idempotency key, and a 503, a timeout or a broken connection is retried with
the same one, on the other instance, until it is acknowledged (2xx). Each
round takes the primary away, by `kill -9` of its postmaster or by stopping
its Patroni (alternately), or by `patronictl switchover` with --switchover,
and waits until a new primary and a synchronous standby serve again.

Then it checks every acknowledged operation against the new primary: present
exactly once (none lost, none doubled), that unacknowledged ones are at most
once, runs `wallet check`, and `pgbackrest check` on the new primary (its WAL
reaches the backup repository). It prints a report (Markdown) and exits 1 if
anything is lost, doubled or unchecked, or a round does not recover.

Settings: WALLET_FAILOVER_ROUNDS (5) when --rounds is not given;
WALLET_HA_DIR as for local.sh.
"""
import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCAL_SH = HERE / "local.sh"
PSQL = "/usr/lib/postgresql/15/bin/psql"
REST_PORTS = (8008, 8009)
USERS = 16
SEED_COINS = 1_000_000
# Longest a round may take to get a new primary, then a synchronous standby.
PROMOTION_SECONDS_MAX = 60
HEALTHY_SECONDS_MAX = 120
# Longest one operation is retried before the drill calls it unacknowledged.
OPERATION_SECONDS_MAX = 90


class DrillError(Exception):
    pass


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- the layout --------------------------------------------------------------

def run(command, env=None, timeout=300, check=True):
    result = subprocess.run(command, env=env, timeout=timeout, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise DrillError(f"{' '.join(map(str, command))} exited {result.returncode}:\n{result.stdout}{result.stderr}")
    return result


def ha_environment(ha_dir):
    values = {}
    for line in (Path(ha_dir) / "env").read_text().splitlines():
        if line.startswith("export "):
            name, _, value = line[len("export "):].partition("=")
            values[name] = value.strip('"')
    return values


def cluster():
    for port in REST_PORTS:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/cluster", timeout=2) as response:
                return json.load(response).get("members", [])
        except (OSError, ValueError):
            continue
    return []


def leader():
    names = [m["name"] for m in cluster() if m.get("role") == "leader" and m.get("state") == "running"]
    return names[0] if len(names) == 1 else None


def healthy():
    """A running leader and a streaming synchronous standby."""
    members = cluster()
    leaders = [m for m in members if m.get("role") == "leader" and m.get("state") == "running"]
    standbys = [m for m in members if m.get("role") == "sync_standby" and m.get("state") in ("running", "streaming")]
    return len(leaders) == 1 and len(standbys) == 1


def wait_until(condition, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise DrillError(f"{what}: not after {seconds} s")


def postmaster_pid(ha_dir, node):
    return int((Path(ha_dir) / "data" / node / "postmaster.pid").read_text().split("\n")[0])


def patroni_pid(ha_dir, node):
    return int((Path(ha_dir) / "run" / f"{node}.pid").read_text().strip())


def pid_alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (OSError, IndexError):
        return False


# --- the service -------------------------------------------------------------

def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Instance:
    def __init__(self, wallet, environment, log_path):
        self.port = free_port()
        env = dict(os.environ)
        env.update(environment)
        env.update({"WALLET_LISTEN": f"127.0.0.1:{self.port}", "WALLET_CREDIT_VERIFICATION": "caller",
                    "WALLET_REQUEST_TIMEOUT_SECONDS": "5", "WALLET_LOG_LEVEL": "warning"})
        self.log = open(log_path, "ab")
        self.process = subprocess.Popen([wallet, "serve"], env=env, stdout=self.log, stderr=self.log,
                                        stdin=subprocess.DEVNULL)

    def ready(self):
        try:
            status, _, _ = request(self.port, "GET", "/readyz", None, {}, timeout=2)
            return status == 200
        except OSError:
            return False

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.log.close()


def request(port, method, path, body, headers, timeout=15):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        all_headers = dict(headers)
        if data is not None:
            all_headers["Content-Type"] = "application/json"
        connection.request(method, path, body=data, headers=all_headers)
        response = connection.getresponse()
        payload = response.read()
        return response.status, dict(response.getheaders()), payload
    finally:
        connection.close()


# --- the clients -------------------------------------------------------------

class Ledger:
    """What the clients were told, and every attempt's time and fate."""

    def __init__(self):
        self.lock = threading.Lock()
        self.acknowledged = {}       # reference -> (kind, user, amount)
        self.unacknowledged = {}     # reference -> (kind, user, amount)
        # reference -> (first sent, acknowledged or None), wall-clock seconds:
        # the restore drill compares them with a recovery target time.
        self.times = {}
        self.retries = {}            # kind -> count
        self.attempts = []           # (started, finished, ok)
        self.refused = []            # unexpected answers

    def attempt(self, started, finished, ok, retry_kind=None):
        with self.lock:
            self.attempts.append((started, finished, ok))
            if retry_kind:
                self.retries[retry_kind] = self.retries.get(retry_kind, 0) + 1


class Client(threading.Thread):
    def __init__(self, index, run_id, ports, keys, ledger, stop, pace_seconds):
        super().__init__(daemon=True)
        self.index, self.run_id, self.ports, self.keys = index, run_id, ports, keys
        self.ledger, self.stop, self.pace_seconds = ledger, stop, pace_seconds
        self.sequence = 0

    def run(self):
        while not self.stop.wait(self.pace_seconds):
            self.sequence += 1
            reference = f"drill-{self.run_id}-{self.index}-{self.sequence}"
            user = f"drill-{self.run_id}-u{(self.index * 7 + self.sequence) % USERS}"
            if self.sequence % 2:
                self.operate("credit", reference, user, 600, "/v1/credits",
                             {"user_id": user, "flow_no": reference, "product_id": "guodong600"},
                             {"Authorization": f"Bearer {self.keys['credit']}"})
            else:
                self.operate("debit", reference, user, 1, "/v1/debits", {"user_id": user, "amount": 1, "reason": "drill"},
                             {"Authorization": f"Bearer {self.keys['debit']}", "Idempotency-Key": reference})

    def operate(self, kind, reference, user, amount, path, body, headers):
        sent = time.time()
        deadline = time.monotonic() + OPERATION_SECONDS_MAX
        attempt = 0
        while time.monotonic() < deadline:
            port = self.ports[(self.index + attempt) % len(self.ports)]
            attempt += 1
            started = time.monotonic()
            try:
                status, _, payload = request(port, "POST", path, body, headers)
            except (OSError, http.client.HTTPException) as error:
                kind_of_retry = "timeout" if isinstance(error, socket.timeout) else "connection_error"
                self.ledger.attempt(started, time.monotonic(), False, kind_of_retry)
                time.sleep(0.1)
                continue
            finished = time.monotonic()
            if 200 <= status < 300:
                self.ledger.attempt(started, finished, True)
                with self.ledger.lock:
                    self.ledger.acknowledged[reference] = (kind, user, amount)
                    self.ledger.times[reference] = (sent, time.time())
                return
            code = "?"
            try:
                code = json.loads(payload).get("code", "?")
            except ValueError:
                pass
            if status == 503:
                self.ledger.attempt(started, finished, False, code)
                time.sleep(0.1)
                continue
            self.ledger.attempt(started, finished, False)
            with self.ledger.lock:
                self.ledger.refused.append(f"{kind} {reference}: {status} {code}")
                self.ledger.unacknowledged[reference] = (kind, user, amount)
                self.ledger.times[reference] = (sent, None)
            return
        with self.ledger.lock:
            self.ledger.unacknowledged[reference] = (kind, user, amount)
            self.ledger.times[reference] = (sent, None)


# --- measuring ---------------------------------------------------------------

def outage(attempts, since):
    """(first failure after `since` → first success started after it, longest
    gap between acknowledgements finishing after `since`), in seconds."""
    failures = sorted(finished for _, finished, ok in attempts if not ok and finished >= since)
    client_outage = 0.0
    if failures:
        first_failure = failures[0]
        recovered = sorted(finished for started, finished, ok in attempts if ok and started >= first_failure)
        client_outage = (recovered[0] - first_failure) if recovered else float("nan")
    successes = sorted(finished for _, finished, ok in attempts if ok and finished >= since - 1)
    gap = max((b - a for a, b in zip(successes, successes[1:])), default=float("nan"))
    return client_outage, gap


def psql(url, sql):
    return run([PSQL, url, "--no-psqlrc", "-v", "ON_ERROR_STOP=1", "-tAF", "\t", "-c", sql]).stdout


def verify(url, run_id, ledger):
    rows = psql(url, f"""
        SELECT reference, kind, count(*) FROM wallet.entries
        WHERE reference LIKE 'drill-{run_id}-%' AND kind IN ('credit', 'debit') GROUP BY 1, 2""")
    applied = {}
    for line in rows.splitlines():
        if line.strip():
            reference, kind, count = line.split("\t")
            applied[reference] = (kind, int(count))
    lost = [r for r, (kind, _, _) in ledger.acknowledged.items() if applied.get(r, (kind, 0))[1] == 0]
    wrong_kind = [r for r, (kind, _, _) in ledger.acknowledged.items() if r in applied and applied[r][0] != kind]
    doubled = [r for r, (_, count) in applied.items() if count > 1]
    unknown = [r for r in applied if r not in ledger.acknowledged and r not in ledger.unacknowledged]
    credits = int(psql(url, f"SELECT count(*) FROM wallet.credits WHERE flow_no LIKE 'drill-{run_id}-%'").strip())
    return {"lost": lost + wrong_kind, "doubled": doubled, "applied": len(applied), "credit_rows": credits,
            "unacknowledged_applied": sum(1 for r in ledger.unacknowledged if r in applied),
            "applied_by_no_client": unknown}


# --- the drill ---------------------------------------------------------------

def take_primary_away(method, ha_dir, environment, old):
    if method == "kill -9 postmaster":
        os.kill(postmaster_pid(ha_dir, old), signal.SIGKILL)
    elif method == "stop Patroni":
        pid = patroni_pid(ha_dir, old)
        os.kill(pid, signal.SIGTERM)
    elif method == "patronictl switchover":
        candidate = next(m["name"] for m in cluster() if m["name"] != old)
        patronictl = environment["WALLET_HA_PATRONICTL"].split()
        run(patronictl + ["switchover", "--leader", old, "--candidate", candidate, "--force"], timeout=120)
    else:
        raise DrillError(f"unknown method {method}")


def drill(arguments):
    ha_dir = os.environ.get("WALLET_HA_DIR", "/tmp/wallet-ha")
    wallet = str(Path(arguments.wallet).resolve())
    if not os.access(wallet, os.X_OK):
        raise DrillError(f"{wallet} is not an executable; build it first")
    report = {"rounds": []}
    started = time.monotonic()
    log("bringing the layout up")
    up = run([str(LOCAL_SH), "up"], timeout=300)
    report["up_seconds"] = round(time.monotonic() - started, 1)
    environment = ha_environment(ha_dir)
    session_url = environment["WALLET_DATABASE_SESSION_URL"]
    print(up.stdout.strip().splitlines()[-6] if up.stdout.strip() else "", flush=True)

    run_id = f"{int(time.time())}{os.getpid() % 1000:03d}"
    wallet_env = dict(os.environ)
    wallet_env.update(environment)
    log("migrating and making keys through the session URL")
    run([wallet, "migrate"], env=wallet_env)
    keys = {}
    for scope in ("credit", "debit"):
        output = run([wallet, "keys", "create", "--name", f"drill-{run_id}-{scope}", "--scopes", scope], env=wallet_env)
        keys[scope] = output.stdout.strip().splitlines()[-1]
    psql(session_url, "; ".join(
        f"SELECT * FROM wallet.grant_coins('drill-{run_id}-u{u}', {SEED_COINS}, 'coin', 'drill-{run_id}-seed-{u}', 'drill')"
        for u in range(USERS)))

    log_dir = Path(ha_dir) / "log"
    instances = [Instance(wallet, environment, log_dir / f"wallet-{n}.log") for n in (1, 2)]
    stop = threading.Event()
    ledger = Ledger()
    clients = []
    try:
        wait_until(lambda: all(i.ready() for i in instances), 60, "both wallet instances ready")
        log(f"instances on ports {[i.port for i in instances]}; {arguments.clients} clients")
        clients = [Client(n, run_id, [i.port for i in instances], keys, ledger, stop, arguments.pace_ms / 1000)
                   for n in range(arguments.clients)]
        for client in clients:
            client.start()
        time.sleep(arguments.settle_seconds)
        methods = ["patronictl switchover"] if arguments.switchover else ["kill -9 postmaster", "stop Patroni"]
        for number in range(1, arguments.rounds + 1):
            wait_until(healthy, HEALTHY_SECONDS_MAX, "a primary and a synchronous standby before the round")
            method = methods[(number - 1) % len(methods)]
            old = leader()
            with ledger.lock:
                acknowledged_before = len(ledger.acknowledged)
            log(f"round {number}: {method} on {old}")
            since = time.monotonic()
            take_primary_away(method, ha_dir, environment, old)
            wait_until(lambda: leader() not in (None, old), PROMOTION_SECONDS_MAX, f"round {number}: a new primary")
            promoted = time.monotonic() - since
            new = leader()
            if method == "stop Patroni":
                # The stopped node comes back as a replica, once its Patroni
                # has finished stopping.
                pid = patroni_pid(ha_dir, old)
                wait_until(lambda: not pid_alive(pid), HEALTHY_SECONDS_MAX, f"round {number}: Patroni on {old} to stop")
                run([str(LOCAL_SH), "up"], timeout=300)
            wait_until(healthy, HEALTHY_SECONDS_MAX, f"round {number}: the old primary back as synchronous standby")
            time.sleep(arguments.settle_seconds)
            with ledger.lock:
                attempts = list(ledger.attempts)
                acknowledged_during = len(ledger.acknowledged) - acknowledged_before
            client_outage, gap = outage(attempts, since)
            report["rounds"].append({"round": number, "method": method, "old": old, "new": new,
                                     "promoted": promoted, "outage": client_outage, "gap": gap,
                                     "acknowledged": acknowledged_during})
            log(f"round {number}: {old} -> {new}, new primary after {promoted:.1f} s, "
                f"write outage {client_outage:.1f} s, longest gap between acknowledgements {gap:.1f} s")
    finally:
        stop.set()
        for client in clients:
            client.join(timeout=OPERATION_SECONDS_MAX + 30)
        for instance in instances:
            instance.stop()

    log("checking every acknowledged operation against the new primary")
    report.update(verify(session_url, run_id, ledger))
    check = run([wallet, "check"], env=wallet_env, check=False)
    report["check"] = (check.returncode, (check.stdout + check.stderr).strip())
    # The new primary archives to the same repository: a forced WAL switch
    # must reach it.
    archive = run([str(LOCAL_SH), "backup", "check"], env={**os.environ, "WALLET_HA_DIR": ha_dir}, timeout=180,
                  check=False)
    report["archive_check"] = (archive.returncode, (archive.stdout + archive.stderr).strip())
    report["acknowledged"] = len(ledger.acknowledged)
    report["acknowledged_by_kind"] = {
        kind: sum(1 for k, _, _ in ledger.acknowledged.values() if k == kind) for kind in ("credit", "debit")}
    report["retries"] = dict(sorted(ledger.retries.items()))
    report["unacknowledged"] = len(ledger.unacknowledged)
    report["refused"] = ledger.refused
    report["seconds"] = round(time.monotonic() - started, 1)
    return report


def markdown(report):
    lines = ["| Round | How | Primary | New primary after | Write outage | Longest gap | Acknowledged |",
             "| ---: | --- | --- | ---: | ---: | ---: | ---: |"]
    for r in report["rounds"]:
        lines.append(f"| {r['round']} | {r['method']} | {r['old']} → {r['new']} | {r['promoted']:.1f} s | "
                     f"{r['outage']:.1f} s | {r['gap']:.1f} s | {r['acknowledged']} |")
    retries = ", ".join(f"{k} {v}" for k, v in report["retries"].items()) or "none"
    by_kind = report["acknowledged_by_kind"]
    lines += [
        "",
        f"- Acknowledged operations: {report['acknowledged']} ({by_kind['credit']} credits, {by_kind['debit']} debits); "
        f"unacknowledged when the drill ended: {report['unacknowledged']} "
        f"({report['unacknowledged_applied']} of them applied, once)",
        f"- Client retries by kind: {retries}",
        f"- Acknowledged operations lost: {len(report['lost'])}; doubled: {len(report['doubled'])}; "
        f"applied without any client's request: {len(report['applied_by_no_client'])}",
        f"- `wallet check` against the new primary: "
        f"{'clean' if report['check'][0] == 0 else 'FAILED: ' + report['check'][1]}",
        f"- `pgbackrest check` (WAL archiving) on the new primary: "
        f"{'ok' if report['archive_check'][0] == 0 else 'FAILED: ' + report['archive_check'][1]}",
        f"- Layout up in {report['up_seconds']} s; the whole drill {report['seconds']} s",
    ]
    if report["refused"]:
        lines.append(f"- Unexpected answers: {report['refused'][:10]}")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wallet", default=".build/release/wallet", help="the wallet binary")
    parser.add_argument("--rounds", type=int, default=int(os.environ.get("WALLET_FAILOVER_ROUNDS", "5")))
    parser.add_argument("--switchover", action="store_true", help="planned switchovers instead of kills")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--pace-ms", type=float, default=0, help="pause between a client's operations")
    parser.add_argument("--settle-seconds", type=float, default=3.0)
    parser.add_argument("--keep", action="store_true", help="leave the layout running")
    parser.add_argument("--report", help="also write the report (Markdown) to this file")
    arguments = parser.parse_args()
    if arguments.rounds < 1:
        sys.exit("--rounds: at least 1")
    failed = True
    try:
        report = drill(arguments)
        text = markdown(report)
        print("\n" + text)
        if arguments.report:
            Path(arguments.report).write_text(text + "\n")
        failed = bool(report["lost"] or report["doubled"] or report["applied_by_no_client"] or report["check"][0] != 0
                      or report["archive_check"][0] != 0 or report["refused"] or report["acknowledged"] == 0)
    except DrillError as error:
        print(f"drill: {error}", file=sys.stderr)
    finally:
        if not arguments.keep:
            log("taking the layout down")
            down = run([str(LOCAL_SH), "down"], timeout=300, check=False)
            if down.returncode != 0:
                print(down.stdout + down.stderr, file=sys.stderr)
                failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
