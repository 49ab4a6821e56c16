#!/usr/bin/python3
"""Failover drill: takes parts of the high-availability layout away under
load and counts what clients were told against what the ledger holds.

Run: deploy/ha/drill.py --wallet .build/release/wallet [--kinds leader,etcd,haproxy,pgbouncer]
         [--rounds N] [--switchover]
     (or `make failover`; `make test` runs
      `--switchover --kinds haproxy,pgbouncer --rounds 1 --clients 4 --pace-ms 100 --degraded-seconds 3`)

It brings the local layout up (deploy/ha/local.sh), starts two `wallet serve`
instances, each on its own PgBouncer first, and runs client threads that
credit and debit as a careful client does: every operation has its own
flowNO or idempotency key, and a 503, a timeout or a broken connection is
retried with the same one, on the other instance, until it is acknowledged
(2xx). Each round runs one fault of each kind chosen, in this order:

  leader     kill -9 of the primary's postmaster, then (a second fault)
             SIGTERM to its Patroni
  etcd       kill -9 of the primary's own etcd member, made Raft leader
             first
  haproxy    kill -9 of one HAProxy (haproxy1 in odd rounds, haproxy2 in even)
  pgbouncer  kill -9 of one PgBouncer (likewise)

and with --switchover a `patronictl switchover` before them. After each
fault the clients run on the degraded layout for --degraded-seconds, then
`local.sh up` starts what was killed and the drill waits until every node
streams again. For each fault it measures the longest a client waited for
an acknowledgement (from its last one before the fault; its own pause
between operations not counted) and the longest time no client got one.

Then it checks every acknowledged operation against the primary: present
exactly once (none lost, none doubled), that unacknowledged ones are at most
once, runs `wallet check`, and `pgbackrest check` on the primary (its WAL
reaches the backup repository). It prints a report (Markdown) per fault and
per kind, and exits 1 if anything is lost, doubled or unchecked, or a fault
is not recovered from in time. A write outage over the 5 s goal is printed
as missed, not failed.

Settings: WALLET_FAILOVER_ROUNDS (2) when --rounds is not given;
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
REST_PORTS = (8008, 8009, 8010)
ETCD_PORTS = {"etcd1": 2379, "etcd2": 22379, "etcd3": 32379}
# The etcd member each node talks to first (local.sh).
NODE_MEMBER = {"pg1": "etcd1", "pg2": "etcd2", "pg3": "etcd3"}
PROXIES = ("haproxy1", "haproxy2")
BOUNCERS = ("pgbouncer1", "pgbouncer2")
# The write outage each kind of fault should stay under.
OUTAGE_GOAL_SECONDS = 5
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
    """A running leader, and every other node running as a standby, one of
    them synchronous."""
    members = cluster()
    leaders = [m for m in members if m.get("role") == "leader" and m.get("state") == "running"]
    standbys = [m for m in members if m.get("role") in ("replica", "sync_standby")
                and m.get("state") in ("running", "streaming")]
    synchronous = [m for m in standbys if m.get("role") == "sync_standby"]
    return len(leaders) == 1 and len(standbys) == len(REST_PORTS) - 1 and len(synchronous) == 1


def wait_until(condition, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise DrillError(f"{what}: not after {seconds} s")


def postmaster_pid(ha_dir, node):
    return int((Path(ha_dir) / "data" / node / "postmaster.pid").read_text().split("\n")[0])


def component_pid(ha_dir, name):
    """The pid local.sh recorded for component NAME (pg1, etcd2, haproxy1…)."""
    return int((Path(ha_dir) / "run" / f"{name}.pid").read_text().strip())


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
        # When each of this client's operations was acknowledged (monotonic).
        self.acknowledgements = []
        self.acknowledgements_lock = threading.Lock()

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
                with self.acknowledgements_lock:
                    self.acknowledgements.append(finished)
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


# --- the faults --------------------------------------------------------------

# What each kind of fault does, in the order a round runs them.
KINDS = {
    "leader": ("kill -9 postmaster", "stop Patroni"),
    "etcd": ("kill -9 etcd member",),
    "haproxy": ("kill -9 HAProxy",),
    "pgbouncer": ("kill -9 PgBouncer",),
}
SWITCHOVER = ("switchover", "patronictl switchover")


def etcd_status(port):
    """The member's id and the Raft leader's id it knows, or None."""
    try:
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v3/maintenance/status", data=b"{}", method="POST")
        with urllib.request.urlopen(req, timeout=2) as response:
            status = json.load(response)
        return status["header"]["member_id"], status.get("leader")
    except (OSError, ValueError, KeyError):
        return None


def etcd_members():
    """name -> (member id, the leader id it knows) for every member that answers."""
    answers = {}
    for name, port in ETCD_PORTS.items():
        status = etcd_status(port)
        if status:
            answers[name] = status
    return answers


def etcd_leader(exclude=None):
    """The name of the Raft leader that the answering members agree on."""
    answers = {n: s for n, s in etcd_members().items() if n != exclude}
    names = {member_id: name for name, (member_id, _) in answers.items()}
    leaders = {leader for _, leader in answers.values()}
    if len(leaders) != 1:
        return None
    return names.get(leaders.pop())


def make_etcd_leader(name):
    """Moves Raft leadership to member NAME (etcd's MoveLeader), so that the
    member killed is both the primary's own and the Raft leader."""
    current = etcd_leader()
    if current == name:
        return
    if current is None:
        raise DrillError("etcd: no agreed Raft leader")
    target_id = etcd_members()[name][0]
    body = json.dumps({"targetID": target_id}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{ETCD_PORTS[current]}/v3/maintenance/transfer-leadership",
                                 data=body, method="POST")
    with urllib.request.urlopen(req, timeout=5) as response:
        response.read()
    wait_until(lambda: etcd_leader() == name, 15, f"etcd leadership moved to {name}")


class Fault:
    """One fault: what it hit, and when the layout had routed around it."""

    def __init__(self, kind, method, round_number, ha_dir, environment):
        self.kind, self.method, self.round_number = kind, method, round_number
        self.ha_dir, self.environment = ha_dir, environment
        self.primary = leader()
        self.target = None
        self.stopped_pid = None

    def inject(self):
        """Takes the component away; returns a condition that tells when the
        layout has a new leader where one was lost (or None)."""
        ha_dir, old = self.ha_dir, self.primary
        if self.method == "kill -9 postmaster":
            self.target = old
            os.kill(postmaster_pid(ha_dir, old), signal.SIGKILL)
            return lambda: leader() not in (None, old)
        if self.method == "stop Patroni":
            self.target = old
            self.stopped_pid = component_pid(ha_dir, old)
            os.kill(self.stopped_pid, signal.SIGTERM)
            return lambda: leader() not in (None, old)
        if self.method == "patronictl switchover":
            self.target = old
            candidate = next(m["name"] for m in cluster() if m.get("role") == "sync_standby")
            patronictl = self.environment["WALLET_HA_PATRONICTL"].split()
            run(patronictl + ["switchover", "--leader", old, "--candidate", candidate, "--force"], timeout=120)
            return lambda: leader() not in (None, old)
        if self.method == "kill -9 etcd member":
            # The member beside the primary, made Raft leader first: the
            # primary's Patroni loses the member it talks to, and etcd its
            # leader, at once.
            self.target = NODE_MEMBER[old]
            make_etcd_leader(self.target)
            os.kill(component_pid(ha_dir, self.target), signal.SIGKILL)
            target = self.target
            return lambda: etcd_leader(exclude=target) not in (None, target)
        if self.method == "kill -9 HAProxy":
            self.target = PROXIES[(self.round_number - 1) % len(PROXIES)]
            os.kill(component_pid(ha_dir, self.target), signal.SIGKILL)
            return None
        if self.method == "kill -9 PgBouncer":
            self.target = BOUNCERS[(self.round_number - 1) % len(BOUNCERS)]
            os.kill(component_pid(ha_dir, self.target), signal.SIGKILL)
            return None
        raise DrillError(f"unknown fault {self.method}")

    def restore(self):
        """Brings the layout whole again: what was killed is started anew
        (a killed postmaster Patroni restarts itself, as a standby)."""
        if self.stopped_pid is not None:
            pid = self.stopped_pid
            wait_until(lambda: not pid_alive(pid), HEALTHY_SECONDS_MAX, f"Patroni on {self.target} to stop")
        run([str(LOCAL_SH), "up"], env={**os.environ, "WALLET_HA_DIR": self.ha_dir}, timeout=300)
        wait_until(healthy, HEALTHY_SECONDS_MAX, "every node back, streaming, one of them synchronously")


# --- measuring ---------------------------------------------------------------

def waits_around(times, since, until):
    """The gaps between the last of `times` (ascending) before `since`, each
    one up to `until`, and `until`."""
    before = [t for t in times if t < since]
    points = ([before[-1]] if before else [since]) + [t for t in times if since <= t <= until] + [until]
    return [b - a for a, b in zip(points, points[1:])]


def longest_waits(clients, since, until, pace_seconds):
    """(longest a client waited for an acknowledgement, longest no client
    got one), in seconds, for a fault at `since` observed until `until`.

    Each client's waits run from its last acknowledgement before the fault
    to each next one, and to `until` if it is still waiting then; its own
    pause between operations is taken off. The second figure merges every
    client's acknowledgements: the time the whole service took no write."""
    client_wait = 0.0
    every = []
    for client in clients:
        with client.acknowledgements_lock:
            times = list(client.acknowledgements)
        every += times
        client_wait = max(client_wait, max(waits_around(times, since, until)) - pace_seconds)
    nothing = max(waits_around(sorted(every), since, until))
    return max(client_wait, 0.0), nothing


def failed_attempts(ledger, since, until):
    with ledger.lock:
        return sum(1 for started, finished, ok in ledger.attempts if not ok and since <= finished <= until)


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


def attribute(references, ledger, faults):
    """How many of `references` were first sent in each fault's window (from
    its start to the next fault's); index -1 is before the first fault."""
    counts = [0] * len(faults)
    for reference in references:
        sent = ledger.times.get(reference, (0, None))[0]
        index = max((i for i, f in enumerate(faults) if f["wall_since"] <= sent), default=-1)
        if index >= 0:
            counts[index] += 1
    return counts


# --- the drill ---------------------------------------------------------------

def drill(arguments, kinds):
    ha_dir = os.environ.get("WALLET_HA_DIR", "/tmp/wallet-ha")
    wallet = str(Path(arguments.wallet).resolve())
    if not os.access(wallet, os.X_OK):
        raise DrillError(f"{wallet} is not an executable; build it first")
    report = {"faults": []}
    started = time.monotonic()
    log("bringing the layout up")
    up = run([str(LOCAL_SH), "up"], timeout=300)
    report["up_seconds"] = round(time.monotonic() - started, 1)
    environment = ha_environment(ha_dir)
    session_url = environment["WALLET_DATABASE_SESSION_URL"]

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
    # Each instance lists its own PgBouncer first.
    instances = [Instance(wallet, environment, log_dir / "wallet-1.log"),
                 Instance(wallet, {**environment, "WALLET_DATABASE_URL": environment["WALLET_HA_DATABASE_URL_2"]},
                          log_dir / "wallet-2.log")]
    stop = threading.Event()
    ledger = Ledger()
    clients = []
    plan = ([SWITCHOVER] if arguments.switchover else []) + [(k, m) for k in kinds for m in KINDS[k]]
    pace_seconds = arguments.pace_ms / 1000
    try:
        wait_until(lambda: all(i.ready() for i in instances), 60, "both wallet instances ready")
        log(f"instances on ports {[i.port for i in instances]}; {arguments.clients} clients; "
            f"faults per round: {', '.join(m for _, m in plan)}")
        clients = [Client(n, run_id, [i.port for i in instances], keys, ledger, stop, pace_seconds)
                   for n in range(arguments.clients)]
        for client in clients:
            client.start()
        time.sleep(arguments.settle_seconds)
        number = 0
        for round_number in range(1, arguments.rounds + 1):
            for kind, method in plan:
                number += 1
                wait_until(healthy, HEALTHY_SECONDS_MAX, "every node streaming before the fault")
                fault = Fault(kind, method, round_number, ha_dir, environment)
                with ledger.lock:
                    acknowledged_before = len(ledger.acknowledged)
                since, wall_since = time.monotonic(), time.time()
                routed_around = fault.inject()
                log(f"fault {number} (round {round_number}): {method} on {fault.target} (primary {fault.primary})")
                changed_after = None
                if routed_around is not None:
                    wait_until(routed_around, PROMOTION_SECONDS_MAX, f"fault {number}: a new leader")
                    changed_after = time.monotonic() - since
                # The clients run on the degraded layout for a while, then
                # it is made whole again under them.
                time.sleep(arguments.degraded_seconds)
                restore_started = time.monotonic()
                fault.restore()
                restored_after = time.monotonic() - restore_started
                time.sleep(arguments.settle_seconds)
                until = time.monotonic()
                client_wait, nothing = longest_waits(clients, since, until, pace_seconds)
                with ledger.lock:
                    acknowledged_during = len(ledger.acknowledged) - acknowledged_before
                new_primary = leader()
                if method.startswith("kill -9 etcd"):
                    changed = f"etcd leader {fault.target} → {etcd_leader()} in {changed_after:.1f} s"
                elif changed_after is not None:
                    changed = f"{fault.primary} → {new_primary} in {changed_after:.1f} s"
                else:
                    changed = "none"
                report["faults"].append({
                    "number": number, "round": round_number, "kind": kind, "method": method,
                    "target": fault.target, "primary": fault.primary, "new_primary": new_primary,
                    "changed": changed, "client_wait": client_wait, "nothing": nothing,
                    "failed_attempts": failed_attempts(ledger, since, until), "acknowledged": acknowledged_during,
                    "restored_after": restored_after, "wall_since": wall_since})
                log(f"fault {number}: leader change {changed}; longest client wait {client_wait:.1f} s; "
                    f"no write anywhere for {nothing:.1f} s at most; made whole in {restored_after:.1f} s")
    finally:
        stop.set()
        for client in clients:
            client.join(timeout=OPERATION_SECONDS_MAX + 30)
        for instance in instances:
            instance.stop()

    log("checking every acknowledged operation against the primary")
    report.update(verify(session_url, run_id, ledger))
    for name, counts in (("lost", attribute(report["lost"], ledger, report["faults"])),
                         ("doubled", attribute(report["doubled"], ledger, report["faults"]))):
        for fault, count in zip(report["faults"], counts):
            fault[name] = count
    check = run([wallet, "check", "--full"], env=wallet_env, check=False)
    report["check"] = (check.returncode, (check.stdout + check.stderr).strip())
    # The primary archives to the same repository: a forced WAL switch must
    # reach it.
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
    lines = ["| # | Fault | On | Leader change | Longest client wait | No write anywhere | Failed attempts | "
             "Acknowledged | Lost | Doubled |",
             "| ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for f in report["faults"]:
        lines.append(f"| {f['number']} | {f['method']} | {f['target']} | {f['changed']} | {f['client_wait']:.1f} s | "
                     f"{f['nothing']:.1f} s | {f['failed_attempts']} | {f['acknowledged']} | {f.get('lost', 0)} | "
                     f"{f.get('doubled', 0)} |")
    lines += ["", "| Failure kind | Faults | Lost | Doubled | Longest write outage (client wait) | Goal (< 5 s) |",
              "| --- | ---: | ---: | ---: | ---: | --- |"]
    for kind in dict.fromkeys(f["kind"] for f in report["faults"]):
        faults = [f for f in report["faults"] if f["kind"] == kind]
        worst = max(f["client_wait"] for f in faults)
        lines.append(f"| {kind} | {len(faults)} | {sum(f.get('lost', 0) for f in faults)} | "
                     f"{sum(f.get('doubled', 0) for f in faults)} | {worst:.1f} s | "
                     f"{'met' if worst < OUTAGE_GOAL_SECONDS else 'MISSED'} |")
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
        f"- `wallet check` against the primary: "
        f"{'clean' if report['check'][0] == 0 else 'FAILED: ' + report['check'][1]}",
        f"- `pgbackrest check` (WAL archiving) on the primary: "
        f"{'ok' if report['archive_check'][0] == 0 else 'FAILED: ' + report['archive_check'][1]}",
        f"- Layout up in {report['up_seconds']} s; the whole drill {report['seconds']} s",
    ]
    if report["refused"]:
        lines.append(f"- Unexpected answers: {report['refused'][:10]}")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wallet", default=".build/release/wallet", help="the wallet binary")
    parser.add_argument("--rounds", type=int, default=int(os.environ.get("WALLET_FAILOVER_ROUNDS", "2")))
    parser.add_argument("--kinds", help=f"comma-separated failure kinds of {','.join(KINDS)} "
                                        "(default: all of them, or none with --switchover)")
    parser.add_argument("--switchover", action="store_true", help="a planned switchover first in each round")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--pace-ms", type=float, default=0, help="pause between a client's operations")
    parser.add_argument("--settle-seconds", type=float, default=3.0, help="load before and after each fault")
    parser.add_argument("--degraded-seconds", type=float, default=10.0,
                        help="how long the layout runs without the lost component before it is started again")
    parser.add_argument("--keep", action="store_true", help="leave the layout running")
    parser.add_argument("--report", help="also write the report (Markdown) to this file")
    arguments = parser.parse_args()
    if arguments.rounds < 1:
        sys.exit("--rounds: at least 1")
    if arguments.kinds is None:
        kinds = [] if arguments.switchover else list(KINDS)
    else:
        kinds = [k.strip() for k in arguments.kinds.split(",") if k.strip()]
        unknown = [k for k in kinds if k not in KINDS]
        if unknown:
            sys.exit(f"--kinds: unknown {unknown}; choose from {','.join(KINDS)}")
    if not kinds and not arguments.switchover:
        sys.exit("--kinds: name at least one kind, or use --switchover")
    failed = True
    try:
        report = drill(arguments, kinds)
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
