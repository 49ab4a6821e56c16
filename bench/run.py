#!/usr/bin/env python3
"""Load benchmark of the wallet service against its PostgreSQL reference.

Run from the repository root:  make bench   (or bench/run.sh)

Starts a fresh PostgreSQL 15 cluster with default settings, builds and starts
the release service, seeds wallets, then for each scenario runs wrk against
the service and pgbench with two references for the same operation, on the
same cluster: the floor (the minimal correct one-transaction SQL on minimal
tables of its own, bench/sql/floor-*.sql) and the one-transaction SQL on the
service's own tables (bench/sql/<scenario>.sql). Prints a Markdown table and
writes it to bench/results/latest.md; raw outputs and logs go to
bench/results/last-run/.
See bench/README.md for the method and how to read the table.

Settings (environment):
  BENCH_SECONDS          length of each measured run (10)
  BENCH_CONNECTIONS      wrk connections (64)
  BENCH_WRK_THREADS      wrk threads (2)
  BENCH_PGBENCH_CLIENTS  pgbench client counts to try for each reference, best one wins (8,32)
  BENCH_WARMUP_SECONDS   unmeasured load before the first scenario (3)
  BENCH_SCENARIOS        subset to run, e.g. debit-spread,read-spread (all);
                         read-unanalyzed, never part of all, reads balances on
                         a freshly loaded database before and after ANALYZE
  BENCH_UNANALYZED_WALLETS  wallets of that database (200000)
  BENCH_KEEP             1 keeps the temporary cluster directory
  BENCH_PG_BIN           PostgreSQL binaries (/usr/lib/postgresql/15/bin)
  BENCH_PREVIOUS         a git revision or a wallet binary: measure that release
                         too, in the same run, on its own database (unset)
  BENCH_ROUNDS           rounds of every scenario, figures averaged over them (1)
  BENCH_EVENTS           0 skips the events measurement: spread debits with a
                         webhook endpoint (a loopback receiver answering 204)
                         against none, and the feed read by one reader (1)
  SWIFT                  the swift driver (swift)
  WALLET_*               passed to the service (e.g. WALLET_WRITERS)

Uses the Python 3 standard library only.
"""

import asyncio
import http.client
import json
import os
import pwd
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
RAW_DIR = RESULTS_DIR / "last-run"

WALLETS = 2000
HOT_WALLET = "hot"
# Where pgbench runs: a database of its own (see Bench.seed_reference).
REFERENCE_DATABASE = "wallet_reference"
PGBENCH_HOT_WALLET = "pg-hot"
# Where the floor runs: its own minimal tables (bench/sql/floor-schema.sql).
FLOOR_DATABASE = "wallet_floor"
# What one guodong600 bundle credits (Migrations/0001_wallet_schema.sql).
CREDIT_AMOUNT = 600
# Enough that no run can spend a wallet down: a debit takes 1 coin.
SEED_COINS_SPREAD = 1_000_000_000
SEED_COINS_HOT = 100_000_000_000

CLOCK_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def env_int(name, default, low, high):
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        sys.exit(f"{name} must be an integer from {low} to {high}, got {text!r}")
    return value


def env_int_list(name, default, low, high):
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    values = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or not low <= int(part) <= high:
            sys.exit(f"{name} must be a comma-separated list of integers from {low} to {high}, got {text!r}")
        values.append(int(part))
    return values


@dataclass
class Scenario:
    name: str
    title: str
    lua: str
    sql: str
    # pgbench -D variables for the reference SQL.
    pgbench_variables: dict
    # The wallet.* table where each of the service's operations leaves one
    # row under its reference, to count what was committed.
    counted_table: str = ""
    # HTTP requests per operation: the service's ops/s is requests/s over this.
    requests_per_op: int = 1
    # The floor: the same operation's minimal correct SQL on the floor's own
    # tables (bench/sql/floor-*.sql), and pgbench -D variables it adds.
    floor_sql: str = ""
    floor_variables: dict = field(default_factory=dict)


# Run only when named in BENCH_SCENARIOS (see Bench.measure_unanalyzed).
READ_UNANALYZED = "read-unanalyzed"

SCENARIOS = [
    Scenario("debit-spread", "debit, 2,000 wallets", "debit_spread.lua", "debit_spread.sql",
             {"wallets": str(WALLETS)}, "idempotency_keys", floor_sql="floor-debit-spread.sql"),
    Scenario("debit-hot", "debit, one hot wallet", "debit_hot.lua", "debit_hot.sql",
             {"hot": PGBENCH_HOT_WALLET}, "idempotency_keys", floor_sql="floor-debit-hot.sql"),
    Scenario("hold-capture", "hold + capture, 2,000 wallets", "hold_capture.lua", "hold_capture.sql",
             {"wallets": str(WALLETS)}, "idempotency_keys", requests_per_op=2, floor_sql="floor-hold-capture.sql"),
    Scenario("credit-spread", "credit, 2,000 wallets", "credit_spread.lua", "credit_spread.sql",
             {"wallets": str(WALLETS)}, "credits", floor_sql="floor-credit-spread.sql",
             floor_variables={"amount": str(CREDIT_AMOUNT)}),
    Scenario("read-spread", "GET /v1/wallets/{id}", "read_spread.lua", "read_spread.sql",
             {"wallets": str(WALLETS)}),
]


@dataclass
class CPU:
    """Cores used on average over one measured run, by who used them."""
    wallet: float = 0.0
    postgres: float = 0.0
    load: float = 0.0
    other: float = 0.0


@dataclass
class Measurement:
    ops: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    requests: int = 0
    failures: int = 0          # non-2xx for wrk, failed transactions for pgbench
    socket_errors: int = 0
    aborted: bool = False
    cpu: CPU = field(default_factory=CPU)
    note: str = ""


def combined(measurements):
    """One measurement from runs of the same thing: rates, latencies and
    CPU averaged, counts added."""
    if len(measurements) == 1:
        return measurements[0]
    share = 1.0 / len(measurements)
    result = Measurement()
    for m in measurements:
        result.ops += m.ops * share
        result.p50_ms += m.p50_ms * share
        result.p99_ms += m.p99_ms * share
        result.requests += m.requests
        result.failures += m.failures
        result.socket_errors += m.socket_errors
        result.aborted = result.aborted or m.aborted
        for name in ("wallet", "postgres", "load", "other"):
            setattr(result.cpu, name, getattr(result.cpu, name) + getattr(m.cpu, name) * share)
    return result


@dataclass
class ServiceUnderTest:
    """One wallet binary, serving its own database of the bench cluster."""
    label: str
    binary: Path = None
    database: str = "wallet"
    port: int = None
    process: subprocess.Popen = None
    log_path: Path = None
    keys: dict = field(default_factory=dict)
    status: int = None
    check_status: int = None
    check_output: str = ""


@dataclass
class ScenarioResult:
    scenario: Scenario
    service: Measurement = None
    # The previous release's runs of the same scenario, when BENCH_PREVIOUS is set,
    # and the change of each of this build's runs against the previous run paired
    # with it (in ABBA order: the first with the first, the second with the last).
    previous: Measurement = None
    changes: list = field(default_factory=list)
    # The reference on the service's own tables, and the floor on minimal
    # tables of its own (empty when the scenario has none): clients -> Measurement.
    pgbench: dict = field(default_factory=dict)
    floor: dict = field(default_factory=dict)
    batch_mean: float = 0.0
    committed: int = -1

    @staticmethod
    def best(runs):
        """The client count with the most ops/s among runs that were not aborted, and its measurement."""
        usable = [(m.ops, clients) for clients, m in runs.items() if not m.aborted]
        if not usable:
            return None, None
        ops, clients = max(usable)
        return clients, runs[clients]

    def ratio_to(self, runs):
        _, best = self.best(runs)
        if best is None or best.ops <= 0 or self.service is None:
            return None
        return self.service.ops / best.ops

    @property
    def best_pgbench(self):
        return self.best(self.pgbench)

    @property
    def best_floor(self):
        return self.best(self.floor)

    @property
    def ratio(self):
        """The service's ops/s over the reference's on its own tables."""
        return self.ratio_to(self.pgbench)

    @property
    def floor_ratio(self):
        """The service's ops/s over the floor's: what the targets are about."""
        return self.ratio_to(self.floor)

    @property
    def change(self):
        """This build's ops/s against the previous release's, as a fraction (+0.05 is 5% more)."""
        if self.previous is None or self.previous.ops <= 0 or self.service is None:
            return None
        return self.service.ops / self.previous.ops - 1.0


class BenchError(Exception):
    pass


class Interrupted(Exception):
    pass


def log(message):
    print(f"bench: {message}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# MARK: CPU accounting from /proc


def process_ticks(pid, with_children=False):
    """utime + stime of a process (all threads); with its reaped children too."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    fields = text[text.rindex(")") + 2:].split()
    # fields[0] is field 3 (state): utime is field 14, cutime 16.
    ticks = int(fields[11]) + int(fields[12])
    if with_children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks


def children_of(parent_pid):
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        if int(fields[1]) == parent_pid:
            pids.append(int(entry.name))
    return pids


def machine_busy_ticks():
    with open("/proc/stat") as stat:
        parts = stat.readline().split()
    user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in parts[1:9])
    return user + nice + system + irq + softirq + steal


class CPUMeter:
    """Samples CPU time of the service, of PostgreSQL (the postmaster, its
    live backends and the ones it reaped), of our load generator (reaped
    children of this process) and of the whole machine."""

    def __init__(self, wallet_pid, postmaster_pid):
        self.wallet_pid = wallet_pid
        self.postmaster_pid = postmaster_pid

    def sample(self):
        postgres = process_ticks(self.postmaster_pid, with_children=True)
        postgres += sum(process_ticks(pid) for pid in children_of(self.postmaster_pid))
        load = resource.getrusage(resource.RUSAGE_CHILDREN)
        return {
            "time": time.monotonic(),
            "wallet": process_ticks(self.wallet_pid) if self.wallet_pid else 0,
            "postgres": postgres,
            "load": (load.ru_utime + load.ru_stime) * CLOCK_TICKS_PER_SECOND,
            "machine": machine_busy_ticks(),
        }

    @staticmethod
    def between(before, after):
        seconds = max(after["time"] - before["time"], 1e-6)

        def cores(key):
            return (after[key] - before[key]) / CLOCK_TICKS_PER_SECOND / seconds

        cpu = CPU(wallet=cores("wallet"), postgres=cores("postgres"), load=cores("load"))
        cpu.other = max(0.0, cores("machine") - cpu.wallet - cpu.postgres - cpu.load)
        return cpu


# MARK: output parsing

WRK_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}


def parse_wrk(text):
    measurement = Measurement()
    match = re.search(r"^Requests/sec:\s+([\d.]+)", text, re.M)
    if not match:
        raise BenchError("wrk printed no Requests/sec line")
    measurement.ops = float(match.group(1))
    for percent, attribute in (("50", "p50_ms"), ("99", "p99_ms")):
        match = re.search(rf"^\s+{percent}%\s+([\d.]+)(us|ms|s|m|h)\s*$", text, re.M)
        if not match:
            raise BenchError(f"wrk printed no {percent}% latency line (was --latency given?)")
        setattr(measurement, attribute, float(match.group(1)) * WRK_UNITS_MS[match.group(2)])
    match = re.search(r"^bench-result (.*)$", text, re.M)
    if not match:
        raise BenchError("the scenario script printed no bench-result line")
    values = dict(pair.split("=", 1) for pair in match.group(1).split())
    measurement.requests = int(values["requests"])
    measurement.failures = int(values["non2xx"])
    measurement.socket_errors = sum(int(values[k]) for k in ("connect", "read", "write", "timeout"))
    return measurement


def parse_pgbench(text, log_prefix):
    measurement = Measurement()
    match = re.search(r"^tps = ([\d.]+) \(without initial connection time\)", text, re.M)
    if not match:
        raise BenchError("pgbench printed no tps line")
    measurement.ops = float(match.group(1))
    match = re.search(r"^number of transactions actually processed: (\d+)", text, re.M)
    measurement.requests = int(match.group(1)) if match else 0
    match = re.search(r"^number of failed transactions: (\d+)", text, re.M)
    measurement.failures = int(match.group(1)) if match else 0
    measurement.aborted = "Run was aborted" in text
    # Per-transaction log lines: client_id transaction_no latency_us script_no epoch us
    latencies = []
    for path in sorted(log_prefix.parent.glob(log_prefix.name + ".*")):
        with open(path) as lines:
            for line in lines:
                parts = line.split(maxsplit=3)
                if len(parts) >= 3 and parts[2].isdigit():
                    latencies.append(int(parts[2]))
        path.unlink()
    if latencies:
        latencies.sort()
        measurement.p50_ms = latencies[(len(latencies) - 1) * 50 // 100] / 1000.0
        measurement.p99_ms = latencies[(len(latencies) - 1) * 99 // 100] / 1000.0
    return measurement


def parse_batch_histogram(text):
    """operation -> (sum, count) of wallet_batch_operations."""
    totals = {}
    for match in re.finditer(r'^wallet_batch_operations_(sum|count)\{operation="(\w+)"\} ([\d.e+]+)$', text, re.M):
        kind, operation, value = match.groups()
        entry = totals.setdefault(operation, [0.0, 0.0])
        entry[0 if kind == "sum" else 1] = float(value)
    return totals


# MARK: the run


class ReceiverServer:
    """A webhook endpoint on loopback that answers every POST 204 and checks
    nothing: the bench measures the service's cost of sending, so the
    receiver is an event loop that frames requests by Content-Length and
    little else (a game server's own cost is its own). Runs on a thread of
    the bench, outside the CPU the bench meters."""

    def __init__(self):
        self.received = 0
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        receiver = self

        class Connection(asyncio.Protocol):
            def connection_made(self, transport):
                self.transport, self.buffer = transport, b""

            def data_received(self, data):
                self.buffer += data
                while True:
                    end = self.buffer.find(b"\r\n\r\n")
                    if end < 0:
                        return
                    length = 0
                    for line in self.buffer[:end].split(b"\r\n")[1:]:
                        name, _, value = line.partition(b":")
                        if name.strip().lower() == b"content-length":
                            length = int(value)
                    if len(self.buffer) < end + 4 + length:
                        return
                    self.buffer = self.buffer[end + 4 + length:]
                    receiver.received += 1
                    self.transport.write(b"HTTP/1.1 204 No Content\r\n\r\n")

        def serve():
            self.native_id = threading.get_native_id()
            asyncio.set_event_loop(self.loop)
            self.server = self.loop.run_until_complete(
                self.loop.create_server(Connection, "127.0.0.1", 0, backlog=128))
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        if not ready.wait(30):
            raise BenchError("the webhook receiver did not start")

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/hooks"

    @property
    def count(self):
        return self.received

    def ticks(self):
        """The receiver thread's CPU time so far, in clock ticks."""
        fields = Path(f"/proc/self/task/{self.native_id}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])

    def stop(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


class Bench:
    def __init__(self):
        self.seconds = env_int("BENCH_SECONDS", 10, 1, 3600)
        self.connections = env_int("BENCH_CONNECTIONS", 64, 1, 10_000)
        self.wrk_threads = env_int("BENCH_WRK_THREADS", 2, 1, 64)
        self.pgbench_clients = env_int_list("BENCH_PGBENCH_CLIENTS", [8, 32], 1, 500)
        self.warmup_seconds = env_int("BENCH_WARMUP_SECONDS", 3, 0, 600)
        self.rounds = env_int("BENCH_ROUNDS", 1, 1, 20)
        self.keep = os.environ.get("BENCH_KEEP", "") == "1"
        self.pg_bin = Path(os.environ.get("BENCH_PG_BIN", "/usr/lib/postgresql/15/bin"))
        self.swift = os.environ.get("SWIFT", "swift")
        wanted = [s.strip() for s in os.environ.get("BENCH_SCENARIOS", "").split(",") if s.strip()]
        known = {s.name for s in SCENARIOS} | {READ_UNANALYZED}
        for name in wanted:
            if name not in known:
                sys.exit(f"BENCH_SCENARIOS: unknown scenario {name}; known: {', '.join(sorted(known))}")
        self.scenarios = [s for s in SCENARIOS if not wanted or s.name in wanted]
        self.unanalyzed_wallets = env_int("BENCH_UNANALYZED_WALLETS", 200_000, 1_000, 10_000_000)
        self.measure_unanalyzed_too = READ_UNANALYZED in wanted
        # Per service measured: (label, never analyzed, analyzed), and the
        # services started for it, stopped by cleanup.
        self.unanalyzed = []
        self.unanalyzed_services = []

        self.run_tag = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
        self.as_root = os.geteuid() == 0
        self.temp_dir = None
        self.pg_port = None
        self.postmaster_pid = None
        self.pg_version = ""
        self.pg_settings = ""
        self.current = ServiceUnderTest("this build")
        previous = os.environ.get("BENCH_PREVIOUS", "").strip()
        self.previous_source = previous
        self.previous = ServiceUnderTest(f"previous ({previous})", database="wallet_previous") if previous else None
        self.load_process = None
        self.results = []
        self.rss_peak_kb = None
        self.slow_client_ms = None
        self.service_settings = {}
        self.measure_events_too = os.environ.get("BENCH_EVENTS", "1") != "0"
        self.events = None
        self.with_floor = any(s.floor_sql for s in self.scenarios)
        # The floor's own ledger check after the run: (violations, text), or None before it ran.
        self.floor_check = None
        self.floor_seed_last_entry = 0

    @property
    def services(self):
        return [self.current] + ([self.previous] if self.previous else [])

    @property
    def check_status(self):
        statuses = [s.check_status for s in self.services]
        if any(status is None for status in statuses):
            return None
        return max(statuses, key=abs)

    # Every external program runs with a time limit and its own session, so a
    # Ctrl-C reaches only this runner, which then stops things in order.

    def run(self, arguments, timeout_seconds, as_postgres=False, env=None, cwd=None, check=True):
        if as_postgres and self.as_root:
            arguments = ["runuser", "-u", "postgres", "--"] + arguments
        try:
            completed = subprocess.run(arguments, capture_output=True, text=True, timeout=timeout_seconds,
                                       env=env, cwd=cwd, start_new_session=True)
        except subprocess.TimeoutExpired as error:
            raise BenchError(f"{arguments[0]} did not finish within {timeout_seconds} s: {' '.join(arguments)}") from error
        if check and completed.returncode != 0:
            raise BenchError(f"{' '.join(arguments)} exited {completed.returncode}:\n"
                             f"{completed.stdout[-2000:]}{completed.stderr[-2000:]}")
        return completed

    def psql(self, sql, timeout_seconds=300, database="wallet"):
        return self.run([str(self.pg_bin / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                         "-h", "127.0.0.1", "-p", str(self.pg_port), "-U", "postgres", "-d", database,
                         "-c", sql], timeout_seconds).stdout.strip()

    def conninfo(self, database="wallet"):
        return f"host=127.0.0.1 port={self.pg_port} user=postgres dbname={database}"

    def check_tools(self):
        for tool in ("wrk",):
            if shutil.which(tool) is None:
                raise BenchError(f"{tool} is not installed (make bench installs it as root: apt-get install {tool})")
        for tool in ("initdb", "pg_ctl", "pgbench", "psql"):
            if not (self.pg_bin / tool).exists():
                raise BenchError(f"{self.pg_bin / tool} is missing; set BENCH_PG_BIN")
        if self.as_root:
            try:
                pwd.getpwnam("postgres")
            except KeyError as error:
                raise BenchError("running as root needs the postgres system user to run PostgreSQL") from error

    def build_release(self, directory):
        log(f"building the release service in {directory} (swift build -c release --product wallet)")
        self.run([self.swift, "build", "-c", "release", "--product", "wallet"], 3600, cwd=directory)
        bin_path = self.run([self.swift, "build", "-c", "release", "--show-bin-path"], 300, cwd=directory).stdout.strip()
        binary = Path(bin_path) / "wallet"
        if not binary.exists():
            raise BenchError(f"no binary at {binary}")
        return binary

    def build(self):
        self.current.binary = self.build_release(REPO_DIR)
        if self.previous is not None:
            self.previous.binary = self.previous_binary()

    def previous_binary(self):
        """BENCH_PREVIOUS names a binary, or a revision built once into
        bench/results/previous-<commit>/ and kept for later runs."""
        source = Path(self.previous_source)
        if source.is_file() and os.access(source, os.X_OK):
            return source.resolve()
        completed = self.run(["git", "rev-parse", "--verify", "--quiet", f"{self.previous_source}^{{commit}}"], 60,
                             cwd=REPO_DIR, check=False)
        if completed.returncode != 0:
            raise BenchError(f"BENCH_PREVIOUS={self.previous_source} is neither an executable nor a revision")
        commit = completed.stdout.strip()
        self.previous.label = f"previous ({commit[:9]})"
        checkout = RESULTS_DIR / f"previous-{commit[:12]}"
        if not (checkout / "Package.swift").exists():
            shutil.rmtree(checkout, ignore_errors=True)
            log(f"checking out {commit[:12]} into {checkout}")
            self.run(["git", "clone", "--quiet", "--no-checkout", str(REPO_DIR), str(checkout)], 600)
            self.run(["git", "checkout", "--quiet", "--detach", commit], 300, cwd=checkout)
        return self.build_release(checkout)

    def start_postgres(self):
        # Under /tmp so the postgres user can reach it whatever the checkout's path.
        self.temp_dir = Path(tempfile.mkdtemp(prefix="wallet-bench-", dir="/tmp"))
        os.chmod(self.temp_dir, 0o755)
        data = self.temp_dir / "data"
        sockets = self.temp_dir / "socket"
        sockets.mkdir()
        if self.as_root:
            # PostgreSQL runs as postgres: it owns the data, the socket
            # directory and the directory its log goes to.
            postgres_user = pwd.getpwnam("postgres")
            data.mkdir(mode=0o700)
            for path in (self.temp_dir, sockets, data):
                os.chown(path, postgres_user.pw_uid, postgres_user.pw_gid)
        log(f"initdb in {data}")
        self.run([str(self.pg_bin / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                  "--encoding=UTF8", "--no-instructions"], 300, as_postgres=True)
        self.pg_port = free_port()
        # Only where to listen; everything else stays at PostgreSQL's defaults
        # (fsync on, synchronous_commit on, shared_buffers 128MB, ...).
        config = (f"\n# wallet bench: where to listen; all else default\n"
                  f"listen_addresses = '127.0.0.1'\nport = {self.pg_port}\n"
                  f"unix_socket_directories = '{sockets}'\n")
        conf_path = data / "postgresql.conf"
        with open(conf_path, "a") as conf:
            conf.write(config)
        log(f"starting PostgreSQL on 127.0.0.1:{self.pg_port}")
        self.run([str(self.pg_bin / "pg_ctl"), "-D", str(data), "-l", str(self.temp_dir / "postgres.log"),
                  "-w", "-t", "60", "start"], 90, as_postgres=True)
        for database in ([service.database for service in self.services] + [REFERENCE_DATABASE]
                         + ([FLOOR_DATABASE] if self.with_floor else [])):
            self.psql(f"CREATE DATABASE {database}", database="postgres")
        self.postmaster_pid = int((data / "postmaster.pid").read_text().split("\n", 1)[0])
        self.pg_version = self.psql("SHOW server_version")
        self.pg_settings = self.psql(
            "SELECT string_agg(name || '=' || setting, ' ' ORDER BY name) FROM pg_settings "
            "WHERE name IN ('fsync', 'synchronous_commit', 'shared_buffers', 'max_connections', 'wal_level')")

    def start_service(self, service):
        service.port = free_port()
        env = dict(os.environ)
        env.update({
            "WALLET_DATABASE_URL": self.conninfo(service.database),
            "WALLET_CREDIT_VERIFICATION": "caller",
            "WALLET_LISTEN": f"127.0.0.1:{service.port}",
            # The events measurement's receiver is on loopback.
            "WALLET_WEBHOOKS_ALLOW_HTTP": "true",
        })
        env.setdefault("WALLET_LOG_LEVEL", "warning")
        # wrk stands in for many clients from one address: let that address
        # have every connection the service takes.
        env.setdefault("WALLET_MAX_CONNECTIONS_PER_IP", env.get("WALLET_MAX_CONNECTIONS", "1024"))
        self.service_settings = {name: env.get(name, default) for name, default in (
            ("WALLET_WRITERS", "2"), ("WALLET_BATCH_MAX", "256"), ("WALLET_DB_POOL_SIZE", "6"),
            ("WALLET_HTTP_THREADS", "4"))}
        service.log_path = self.temp_dir / f"service-{service.database}.log"
        log(f"starting {service.label} on 127.0.0.1:{service.port}, database {service.database}")
        with open(service.log_path, "w") as output:
            service.process = subprocess.Popen([str(service.binary), "serve"], stdout=output,
                                               stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + 60
        while "listening on http://" not in service.log_path.read_text(errors="replace"):
            if service.process.poll() is not None:
                raise BenchError(f"{service.label} exited {service.process.returncode} at start:\n"
                                 f"{self.tail(service.log_path)}")
            if time.monotonic() > deadline:
                raise BenchError(f"{service.label} did not start within 60 s:\n{self.tail(service.log_path)}")
            time.sleep(0.1)
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{service.port}/readyz", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise BenchError(f"{service.label} was not ready within 30 s")
            time.sleep(0.2)

    def wallet_command(self, service, arguments, timeout_seconds, check=True, env_extra=None):
        env = dict(os.environ)
        env["WALLET_DATABASE_URL"] = self.conninfo(service.database)
        env.setdefault("WALLET_LOG_LEVEL", "warning")
        env.update(env_extra or {})
        return self.run([str(service.binary)] + arguments, timeout_seconds, env=env, check=check)

    def make_keys(self, service):
        for name, scopes in (("bench-credit", "credit,read"), ("bench-debit", "debit,read")):
            output = self.wallet_command(service, ["keys", "create", "--name", name, "--scopes", scopes], 60).stdout
            service.keys[name] = output.strip().splitlines()[-1].strip()

    def make_keys_and_seed(self, service):
        self.make_keys(service)
        self.seed(service.database)

    def seed_reference(self):
        """The reference's database: this build's schema and the same seed.
        pgbench writes there, so its rows weigh on neither service's tables
        (with BENCH_PREVIOUS, on this build's alone they would)."""
        env = dict(os.environ)
        env["WALLET_DATABASE_URL"] = self.conninfo(REFERENCE_DATABASE)
        env.setdefault("WALLET_LOG_LEVEL", "warning")
        self.run([str(self.current.binary), "migrate"], 120, env=env)
        self.seed(REFERENCE_DATABASE)

    def seed_floor(self):
        """The floor's database: bench/sql/floor-schema.sql and the same
        wallets with the same starting balances as the other seeds (one to
        three grants there, one row and one entry each here), so it writes
        tables of the same size."""
        log(f"seeding {WALLETS} wallets and a hot wallet in {FLOOR_DATABASE}, for the floor")
        self.run([str(self.pg_bin / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1",
                  "-p", str(self.pg_port), "-U", "postgres", "-d", FLOOR_DATABASE,
                  "-f", str(BENCH_DIR / "sql" / "floor-schema.sql")], 120)
        self.psql(f"""
            WITH seeded AS (
                SELECT 'pg-u' || g AS user_id,
                       {SEED_COINS_SPREAD} + 1000 * (g % 3) AS balance
                FROM generate_series(0, {WALLETS - 1}) AS g
                UNION ALL SELECT '{PGBENCH_HOT_WALLET}', {SEED_COINS_HOT}
            ), made AS (
                INSERT INTO floor.wallets (user_id, balance) SELECT user_id, balance FROM seeded
                RETURNING user_id, balance
            )
            INSERT INTO floor.entries (user_id, amount, balance_after) SELECT user_id, balance, balance FROM made;
            ANALYZE floor.wallets, floor.entries;
            """, database=FLOOR_DATABASE)
        self.floor_seed_last_entry = int(self.psql("SELECT max(id) FROM floor.entries", database=FLOOR_DATABASE))

    def check_floor(self):
        """The floor's books after its runs: every wallet's balance is the sum
        of its entries, its held the sum of its open holds, and every entry
        after the seed is named by exactly one key, credit or captured hold."""
        log("checking the floor's books")
        text = self.psql(f"""
            SELECT 'wallets whose balance is not the sum of their entries: ' || count(*)
                FROM floor.wallets w LEFT JOIN (SELECT user_id, sum(amount) AS total FROM floor.entries GROUP BY 1) e
                    USING (user_id)
                WHERE e.total IS DISTINCT FROM w.balance
            UNION ALL
            SELECT 'wallets whose held is not their open holds: ' || count(*)
                FROM floor.wallets w LEFT JOIN (SELECT user_id, sum(amount) AS total FROM floor.holds
                                                WHERE entry_id IS NULL GROUP BY 1) h USING (user_id)
                WHERE coalesce(h.total, 0) <> w.held
            UNION ALL
            SELECT 'entries not named by exactly one key, credit or captured hold: ' || count(*)
                FROM (SELECT coalesce(moved.id, named.entry_id), count(moved.id) AS entries,
                             count(named.entry_id) AS names
                      FROM (SELECT entry_id FROM floor.debit_keys UNION ALL SELECT entry_id FROM floor.credits
                            UNION ALL SELECT entry_id FROM floor.holds WHERE entry_id IS NOT NULL) named
                          FULL JOIN (SELECT id FROM floor.entries WHERE id > {self.floor_seed_last_entry}) moved
                          ON moved.id = named.entry_id
                      GROUP BY 1) per_entry
                WHERE entries <> 1 OR names <> 1
            """, timeout_seconds=900, database=FLOOR_DATABASE)
        violations = sum(int(line.rsplit(": ", 1)[1]) for line in text.splitlines())
        self.floor_check = (violations, text)

    def seed(self, database):
        # The same seed in every database, so each service, and pgbench,
        # writes tables of the same size.
        log(f"seeding {WALLETS} wallets and a hot wallet in {database}, for the service and for pgbench")
        # One to three grants per wallet (so, where lots exist, one to three
        # lots, the first holding nearly everything), through the admin
        # function, so the seed is ordinary ledger entries that `wallet
        # check` accounts for.
        self.psql(f"""
            CREATE SCHEMA bench;
            CREATE SEQUENCE bench.reference_seq;
            SELECT count(*) FROM generate_series(0, {WALLETS - 1}) AS g, generate_series(0, g % 3) AS lot,
                LATERAL wallet.grant_coins('u' || g, CASE lot WHEN 0 THEN {SEED_COINS_SPREAD} ELSE 1000 END,
                                           'coin', 'bench', 'bench');
            SELECT count(*) FROM generate_series(0, {WALLETS - 1}) AS g, generate_series(0, g % 3) AS lot,
                LATERAL wallet.grant_coins('pg-u' || g, CASE lot WHEN 0 THEN {SEED_COINS_SPREAD} ELSE 1000 END,
                                           'coin', 'bench', 'bench');
            SELECT * FROM wallet.grant_coins('{HOT_WALLET}', {SEED_COINS_HOT}, 'coin', 'bench', 'bench');
            SELECT * FROM wallet.grant_coins('{PGBENCH_HOT_WALLET}', {SEED_COINS_HOT}, 'coin', 'bench', 'bench');
            """, database=database)
        # Statistics for the seeded tables only. Analyzing the still-empty
        # idempotency_keys and credits would record them as empty, and the
        # generic plans the service's functions cache would then scan them
        # sequentially on every operation until autovacuum analyzes again.
        self.psql("ANALYZE wallet.wallets, wallet.entries", database=database)
        self.psql("""
            DO $$ BEGIN
                IF to_regclass('wallet.lots') IS NOT NULL THEN ANALYZE wallet.lots, wallet.entry_lots; END IF;
            END $$""", database=database)

    def metrics(self, service):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{service.port}/metrics", timeout=5) as answer:
                return answer.read().decode()
        except (urllib.error.URLError, OSError):
            return ""

    def run_load(self, arguments, env, timeout_seconds, output_path):
        """Runs wrk or pgbench, tracked so cleanup can stop it; returns its output."""
        with open(output_path, "w") as output:
            self.load_process = subprocess.Popen(arguments, stdout=output, stderr=subprocess.STDOUT, env=env,
                                                 cwd=REPO_DIR, start_new_session=True)
            try:
                status = self.load_process.wait(timeout=timeout_seconds)
            except subprocess.TimeoutExpired as error:
                raise BenchError(f"{arguments[0]} did not finish within {timeout_seconds} s") from error
            finally:
                if self.load_process.poll() is None:
                    self.load_process.kill()
                    self.load_process.wait(timeout=10)
                self.load_process = None
        text = Path(output_path).read_text(errors="replace")
        if status != 0:
            raise BenchError(f"{' '.join(arguments)} exited {status}:\n{text[-3000:]}")
        return text

    def wrk(self, service, scenario, seconds, tag, meter, wallets=WALLETS):
        env = dict(os.environ)
        env.update({
            "BENCH_CREDIT_KEY": service.keys["bench-credit"],
            "BENCH_DEBIT_KEY": service.keys["bench-debit"],
            "BENCH_RUN_TAG": tag,
            "BENCH_WALLETS": str(wallets),
            "BENCH_HOT_WALLET": HOT_WALLET,
        })
        arguments = ["wrk", f"-t{self.wrk_threads}", f"-c{self.connections}", f"-d{seconds}s", "--latency",
                     "-s", str(BENCH_DIR / scenario.lua), f"http://127.0.0.1:{service.port}"]
        before = meter.sample()
        text = self.run_load(arguments, env, seconds + 60, RAW_DIR / f"wrk-{tag}.txt")
        after = meter.sample()
        measurement = parse_wrk(text)
        measurement.ops /= scenario.requests_per_op
        measurement.cpu = CPUMeter.between(before, after)
        return measurement

    def pgbench(self, scenario, clients, meter, floor=False):
        """One pgbench run of the scenario's reference on the service's own
        tables, or with floor=True of its floor on the floor's tables."""
        kind = "floor" if floor else "reference"
        log_prefix = self.temp_dir / f"pgbench-{kind}-{scenario.name}-{clients}"
        sql, database = (scenario.floor_sql, FLOOR_DATABASE) if floor else (scenario.sql, REFERENCE_DATABASE)
        variables = dict(scenario.pgbench_variables, **(scenario.floor_variables if floor else {}))
        arguments = [str(self.pg_bin / "pgbench"), "-M", "prepared", "-n", "-T", str(self.seconds),
                     "-c", str(clients), "-j", str(min(2, clients)), "-h", "127.0.0.1", "-p", str(self.pg_port),
                     "-U", "postgres", "-l", f"--log-prefix={log_prefix}", "-f", str(BENCH_DIR / "sql" / sql)]
        for name, value in variables.items():
            arguments += ["-D", f"{name}={value}"]
        arguments.append(database)
        before = meter.sample()
        # Output files are named as before for the reference, so earlier runs' raw files compare.
        text = self.run_load(arguments, None, self.seconds + 120,
                             RAW_DIR / (f"pgbench-floor-{scenario.name}-c{clients}.txt" if floor
                                        else f"pgbench-{scenario.name}-c{clients}.txt"))
        after = meter.sample()
        measurement = parse_pgbench(text, log_prefix)
        measurement.cpu = CPUMeter.between(before, after)
        return measurement

    def committed_rows(self, scenario, tag):
        """Rows the service committed under this run's references."""
        if not scenario.counted_table:
            return -1
        column = "key" if scenario.counted_table == "idempotency_keys" else "flow_no"
        return int(self.psql(f"SELECT count(*) FROM wallet.{scenario.counted_table} "
                             f"WHERE {column} LIKE '{tag}-%'"))

    def measure(self):
        if not self.scenarios:
            return
        meters = {service.database: CPUMeter(service.process.pid, self.postmaster_pid) for service in self.services}
        if self.warmup_seconds > 0:
            warmup = next((s for s in self.scenarios if s.name == "debit-spread"), self.scenarios[0])
            for service in self.services:
                log(f"warming up {service.label} for {self.warmup_seconds} s (not measured)")
                self.wrk(service, warmup, self.warmup_seconds, f"warmup-{self.run_tag}", meters[service.database])
        # With a previous release, each scenario runs previous, this, this,
        # previous (an ABBA order), so a drift over the minute (autovacuum,
        # checkpoints, the machine's other work) weighs on both alike.
        order = [self.previous, self.current, self.current, self.previous] if self.previous else [self.current]
        for scenario in self.scenarios:
            result = ScenarioResult(scenario)
            tag = f"{scenario.name}-{self.run_tag}"
            runs = {service.database: [] for service in self.services}
            references = {clients: [] for clients in self.pgbench_clients}
            floors = {clients: [] for clients in self.pgbench_clients} if scenario.floor_sql else {}
            batch_sum = batch_count = 0.0
            for round_index in range(self.rounds):
                for index, service in enumerate(order):
                    self.psql("CHECKPOINT")
                    if service is self.current:
                        batches_before = parse_batch_histogram(self.metrics(service))
                    log(f"{scenario.name}: {service.label}: wrk -t{self.wrk_threads} -c{self.connections} "
                        f"-d{self.seconds}s" + (f" (round {round_index + 1} of {self.rounds})" if self.rounds > 1 else ""))
                    runs[service.database].append(self.wrk(service, scenario, self.seconds,
                                                           f"{tag}-{round_index}-{index}", meters[service.database]))
                    if service is self.current:
                        batches_after = parse_batch_histogram(self.metrics(service))
                        for operation, (after_sum, after_count) in batches_after.items():
                            before_sum, before_count = batches_before.get(operation, (0.0, 0.0))
                            batch_sum += after_sum - before_sum
                            batch_count += after_count - before_count
                # Both references at each client count, the floor first, each
                # after a CHECKPOINT of its own like every run.
                for clients in self.pgbench_clients:
                    for floor in ([True, False] if scenario.floor_sql else [False]):
                        self.psql("CHECKPOINT")
                        log(f"{scenario.name}: pgbench -M prepared -c {clients} -T {self.seconds}, "
                            + ("the floor" if floor else "the service's tables"))
                        measured = self.pgbench(scenario, clients, meters[self.current.database], floor=floor)
                        (floors if floor else references)[clients].append(measured)
            result.service = combined(runs[self.current.database])
            if self.previous:
                result.previous = combined(runs[self.previous.database])
                result.changes = [this.ops / before.ops - 1.0 for this, before in
                                  zip(runs[self.current.database], runs[self.previous.database]) if before.ops > 0]
            result.pgbench = {clients: combined(measured) for clients, measured in references.items()}
            result.floor = {clients: combined(measured) for clients, measured in floors.items()}
            result.batch_mean = batch_sum / batch_count if batch_count else 0.0
            result.committed = self.committed_rows(scenario, tag)
            self.results.append(result)
            self.print_progress(result)

    def print_progress(self, result):
        service = result.service
        clients, best = result.best_pgbench
        line = (f"{result.scenario.name}: service {service.ops:,.0f}/s p50 {service.p50_ms:.2f} ms "
                f"p99 {service.p99_ms:.2f} ms non-2xx {service.failures}")
        floor_clients, floor = result.best_floor
        if floor is not None:
            line += f"; floor {floor.ops:,.0f}/s at {floor_clients} clients; ratio {result.floor_ratio:.2f}x"
        if best is not None:
            line += f"; pgbench {best.ops:,.0f}/s at {clients} clients; ratio {result.ratio:.2f}x"
        if result.change is not None:
            line += f"; previous {result.previous.ops:,.0f}/s p99 {result.previous.p99_ms:.2f} ms ({result.change:+.1%})"
        log(line)

    def measure_events(self):
        """Spread debits with one webhook endpoint against none, in an ABBA
        order of `rounds` pairs (each run with a new endpoint, disabled after
        it, so it carries no backlog into the next), then one reader
        following the feed from cursor 0 for up to `seconds`."""
        service = self.current
        scenario = next(s for s in SCENARIOS if s.name == "debit-spread")
        meter = CPUMeter(service.process.pid, self.postmaster_pid)
        receiver = ReceiverServer()
        secret = self.temp_dir / "webhook.secret"
        secret.write_text("bench-webhook-secret-0123456789abcdef\n")
        runs = {"none": [], "webhook": []}
        delivered, receiver_cores = [], []
        try:
            for round_index in range(self.rounds):
                for mode in ("none", "webhook", "webhook", "none"):
                    endpoint = None
                    if mode == "webhook":
                        added = self.wallet_command(service, ["webhooks", "add", "--url", receiver.url, "--events", "*",
                                                              "--secret-file", str(secret)], 60,
                                                    env_extra={"WALLET_WEBHOOKS_ALLOW_HTTP": "true"})
                        endpoint = added.stdout.strip().splitlines()[-1].split("=", 1)[1]
                    self.psql("CHECKPOINT")
                    received_before, receiver_ticks = receiver.count, receiver.ticks()
                    log(f"events: debit-spread, {'one webhook endpoint' if endpoint else 'no webhook'} "
                        f"(round {round_index + 1} of {self.rounds})")
                    runs[mode].append(self.wrk(service, scenario, self.seconds,
                                               f"events-{mode}-{self.run_tag}-{round_index}-{len(runs[mode])}", meter))
                    if endpoint:
                        delivered.append((receiver.count - received_before) / self.seconds)
                        receiver_cores.append((receiver.ticks() - receiver_ticks) / CLOCK_TICKS_PER_SECOND / self.seconds)
                        self.wallet_command(service, ["webhooks", "disable", endpoint], 60)
            feed = self.read_feed(service)
        finally:
            receiver.stop()
        none, webhook = combined(runs["none"]), combined(runs["webhook"])
        self.events = {
            "none": none, "webhook": webhook,
            "change": webhook.ops / none.ops - 1.0 if none.ops else None,
            "delivered_per_second": sum(delivered) / len(delivered) if delivered else 0.0,
            "receiver_cores": sum(receiver_cores) / len(receiver_cores) if receiver_cores else 0.0,
            "feed": feed,
        }
        log(f"events: debit-spread {none.ops:,.0f}/s without a webhook, {webhook.ops:,.0f}/s with one "
            f"({self.events['change']:+.1%}); {self.events['delivered_per_second']:,.0f} deliveries/s "
            f"(the receiver on {self.events['receiver_cores']:.2f} cores); "
            f"feed {feed['events_per_second']:,.0f} events/s")

    def read_feed(self, service):
        """One reader from cursor 0, a thousand events a page on one kept-alive
        connection, for up to `seconds` or until caught up."""
        key = self.wallet_command(service, ["keys", "create", "--name", f"bench-events-{self.run_tag}", "--scopes",
                                            "events"], 60).stdout.strip().splitlines()[-1].strip()
        connection = http.client.HTTPConnection("127.0.0.1", service.port, timeout=30)
        after, events, pages = 0, 0, 0
        started = time.monotonic()
        try:
            while time.monotonic() - started < self.seconds:
                connection.request("GET", f"/v1/events?after={after}&limit=1000",
                                   headers={"Authorization": f"Bearer {key}"})
                answer = connection.getresponse()
                body = answer.read()
                if answer.status != 200:
                    raise BenchError(f"GET /v1/events: {answer.status} {body[:300]!r}")
                page = json.loads(body)
                pages += 1
                events += len(page["events"])
                if not page["events"]:
                    break
                after = page["next_after"]
        finally:
            connection.close()
        seconds = time.monotonic() - started
        return {"events": events, "pages": pages, "seconds": seconds,
                "events_per_second": events / seconds if seconds > 0 else 0.0}

    def measure_unanalyzed(self):
        """Balance reads over `unanalyzed_wallets` wallets loaded a moment
        ago, whose tables were never analyzed, then the same after ANALYZE,
        for each release measured, each on a database of its own."""
        scenario = next(s for s in SCENARIOS if s.name == "read-spread")
        for source in ([self.previous] if self.previous else []) + [self.current]:
            service = ServiceUnderTest(f"{source.label}, {self.unanalyzed_wallets:,} wallets",
                                       binary=source.binary, database=f"{source.database}_unanalyzed")
            self.unanalyzed_services.append(service)
            self.psql(f"CREATE DATABASE {service.database}", database="postgres")
            self.start_service(service)
            self.make_keys(service)
            self.seed_unanalyzed(service.database)
            meter = CPUMeter(service.process.pid, self.postmaster_pid)
            measured = []
            for state in ("never analyzed", "analyzed"):
                if state == "analyzed":
                    self.psql("ANALYZE wallet.wallets, wallet.lots, wallet.holds, wallet.entries",
                              database=service.database)
                statistics = int(self.psql("SELECT count(*) FROM pg_stats WHERE schemaname = 'wallet' AND "
                                           "tablename IN ('wallets', 'lots', 'holds', 'entries')",
                                           database=service.database))
                if (statistics == 0) != (state == "never analyzed"):
                    raise BenchError(f"{service.database}: {statistics} rows of statistics while {state}")
                tag = f"{READ_UNANALYZED}-{self.run_tag}-{len(self.unanalyzed)}-{len(measured)}"
                if self.warmup_seconds > 0:
                    log(f"{READ_UNANALYZED}: {service.label}, {state}: {self.warmup_seconds} s unmeasured")
                    self.wrk(service, scenario, self.warmup_seconds, f"{tag}-warmup", meter,
                             wallets=self.unanalyzed_wallets)
                self.psql("CHECKPOINT")
                log(f"{READ_UNANALYZED}: {service.label}, {state}: wrk -t{self.wrk_threads} "
                    f"-c{self.connections} -d{self.seconds}s")
                measured.append(self.wrk(service, scenario, self.seconds, tag, meter,
                                         wallets=self.unanalyzed_wallets))
            self.stop_service(service)
            before, after = measured
            self.unanalyzed.append((service.label, before, after))
            log(f"{READ_UNANALYZED}: {service.label}: never analyzed {before.ops:,.0f}/s "
                f"(p99 {before.p99_ms:.2f} ms), analyzed {after.ops:,.0f}/s (p99 {after.p99_ms:.2f} ms), "
                f"never analyzed ÷ analyzed {before.ops / after.ops if after.ops else 0:.2f}")

    def seed_unanalyzed(self, database):
        """u0 … u<N-1>, each with 1,000 coins in one lot after one grant,
        written set-based the way a bulk load or a restore writes them:
        nothing analyzes the tables, and autovacuum is kept off them so that
        nothing does until the runner does. Triggers and foreign-key checks
        are off while loading (the rows keep every constraint); as nothing
        tells the events, this database is not given to `wallet check`."""
        wallets = self.unanalyzed_wallets
        log(f"{READ_UNANALYZED}: loading {wallets:,} wallets into {database}, autovacuum off for them")
        tables = ("wallets", "entries", "lots", "holds", "idempotency_keys")
        self.psql("".join(f"ALTER TABLE wallet.{table} SET (autovacuum_enabled = off); " for table in tables)
                  + f"""
            SET session_replication_role = replica;
            INSERT INTO wallet.wallets (user_id, currency, balance)
                SELECT 'u' || g, 'coin', 1000 FROM generate_series(0, {wallets - 1}) g;
            INSERT INTO wallet.entries (user_id, currency, amount, balance_after, kind, reference, client)
                SELECT 'u' || g, 'coin', 1000, 1000, 'grant', 'bench-' || g, 'bench'
                FROM generate_series(0, {wallets - 1}) g;
            INSERT INTO wallet.lots (user_id, currency, source, paid, amount, remaining)
                SELECT 'u' || g, 'coin', 'grant', FALSE, 1000, 1000 FROM generate_series(0, {wallets - 1}) g;
            """, timeout_seconds=1800, database=database)
        # Reading every row once sets its hint bits, a cost of the first
        # reads after any load that is not what is measured here.
        self.psql("SELECT count(*) FROM wallet.wallets; SELECT count(*) FROM wallet.lots", database=database)

    def measure_slow_clients(self, stalled_count=50):
        """Opens connections that each send half a request and stall, then
        times one normal read beside them (the service must not wait on them)."""
        log(f"slow clients: {stalled_count} half-sent requests, then one normal read")
        stalled = []
        try:
            for index in range(stalled_count):
                connection = socket.create_connection(("127.0.0.1", self.current.port), timeout=5)
                connection.sendall(f"POST /v1/debits HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n"
                                   f"X-Stalled: {index}\r\n".encode())
                stalled.append(connection)
            time.sleep(0.2)
            request = (f"GET /v1/wallets/u1 HTTP/1.1\r\nHost: x\r\n"
                       f"Authorization: Bearer {self.current.keys['bench-debit']}\r\nConnection: close\r\n\r\n").encode()
            started = time.monotonic()
            with socket.create_connection(("127.0.0.1", self.current.port), timeout=10) as connection:
                connection.sendall(request)
                answer = connection.recv(65536)
            elapsed = (time.monotonic() - started) * 1000
            if answer.startswith(b"HTTP/1.1 200"):
                self.slow_client_ms = elapsed
        finally:
            for connection in stalled:
                connection.close()

    def read_peak_rss(self):
        try:
            status = Path(f"/proc/{self.current.process.pid}/status").read_text()
        except OSError:
            return
        match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
        if match:
            self.rss_peak_kb = int(match.group(1))

    def stop_service(self, service):
        if service.process is None:
            return
        if service.process.poll() is None:
            service.process.send_signal(signal.SIGTERM)
            try:
                service.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                log(f"{service.label} did not stop within 30 s of SIGTERM; killing it")
                service.process.kill()
                service.process.wait(timeout=10)
        service.status = service.process.returncode
        service.process = None

    def check_ledger(self, service):
        log(f"wallet check ({service.label})")
        completed = self.wallet_command(service, ["check"], 900, check=False)
        service.check_status = completed.returncode
        service.check_output = (completed.stdout + completed.stderr).strip()

    def stop_postgres(self):
        if self.temp_dir is None or not (self.temp_dir / "data" / "postmaster.pid").exists():
            return
        data = str(self.temp_dir / "data")
        try:
            self.run([str(self.pg_bin / "pg_ctl"), "-D", data, "-m", "fast", "-w", "-t", "60", "stop"], 90,
                     as_postgres=True)
        except BenchError as error:
            log(f"fast stop failed ({error}); stopping immediately")
            self.run([str(self.pg_bin / "pg_ctl"), "-D", data, "-m", "immediate", "-w", "-t", "30", "stop"], 60,
                     as_postgres=True, check=False)

    def cleanup(self):
        if self.load_process is not None and self.load_process.poll() is None:
            self.load_process.kill()
            self.load_process.wait(timeout=10)
        for service in self.services + self.unanalyzed_services:
            try:
                self.stop_service(service)
            except Exception as error:  # keep cleaning up
                log(f"stopping {service.label}: {error}")
        try:
            self.stop_postgres()
        except Exception as error:
            log(f"stopping PostgreSQL: {error}")
        if self.temp_dir is not None:
            for service in self.services + self.unanalyzed_services:
                if service.log_path is not None and service.log_path.exists():
                    shutil.copy(service.log_path, RAW_DIR / ("service.log" if service is self.current
                                                             else "service-previous.log" if service is self.previous
                                                             else f"service-{service.database}.log"))
            if (self.temp_dir / "postgres.log").exists():
                shutil.copy(self.temp_dir / "postgres.log", RAW_DIR / "postgres.log")
            if self.keep:
                log(f"kept {self.temp_dir}")
            else:
                shutil.rmtree(self.temp_dir, ignore_errors=True)

    @staticmethod
    def tail(path, lines=30):
        try:
            return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def main(self):
        self.check_tools()
        if RAW_DIR.exists():
            shutil.rmtree(RAW_DIR)
        RAW_DIR.mkdir(parents=True)
        self.build()
        self.start_postgres()
        for service in self.services:
            self.start_service(service)
            self.make_keys_and_seed(service)
        self.seed_reference()
        if self.with_floor:
            self.seed_floor()
        self.measure()
        if self.measure_unanalyzed_too:
            self.measure_unanalyzed()
        if self.measure_events_too:
            self.measure_events()
        self.measure_slow_clients()
        self.read_peak_rss()
        for service in self.services:
            self.stop_service(service)
            self.check_ledger(service)
        if self.with_floor:
            self.check_floor()


# MARK: the report


def number(value, digits=0):
    return f"{value:,.{digits}f}"


def milliseconds(value):
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def report(bench):
    lines = []
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    clients = " and ".join(str(c) for c in bench.pgbench_clients)
    lines.append(f"## wallet benchmark, {when}")
    lines.append("")
    lines.append(f"- Service: `wrk -t{bench.wrk_threads} -c{bench.connections} -d{bench.seconds}s --latency`, "
                 f"release build, " + ", ".join(f"{k}={v}" for k, v in bench.service_settings.items()) + ".")
    lines.append(f"- References: `pgbench -M prepared -n -T {bench.seconds} -j 2` over TCP on loopback, "
                 f"each the better of {clients} clients: the floor, the minimal correct one-transaction SQL on "
                 f"minimal tables of its own (`bench/sql/floor-*.sql`, database `{FLOOR_DATABASE}`), and the "
                 f"one-transaction SQL on the service's own tables, triggers and indexes (`bench/sql/<scenario>.sql`, "
                 f"database `{REFERENCE_DATABASE}`). The targets are against the floor.")
    lines.append(f"- PostgreSQL {bench.pg_version}, default settings ({bench.pg_settings}); "
                 f"{os.cpu_count()} cores shared by PostgreSQL, the service and the load generator.")
    if bench.previous:
        lines.append(f"- Also measured: {bench.previous.label}, on its own database of the same cluster; each "
                     f"scenario ran previous, this, this, previous ({bench.rounds} round(s)), and each side's "
                     f"figures are the mean of its {2 * bench.rounds} runs.")
    elif bench.rounds > 1:
        lines.append(f"- Each figure is the mean of {bench.rounds} rounds.")
    lines.append("")
    lines.append("| scenario | ops/s | p50 ms | p99 ms | non-2xx | floor ops/s | floor p50 / p99 ms "
                 "| service ÷ floor | own-tables ops/s | own-tables p50 / p99 ms | service ÷ own tables | mean batch |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

    def reference_cells(result, runs):
        best_clients, best = result.best(runs)
        ratio = result.ratio_to(runs)
        if best is None or ratio is None:
            return ["n/a", "n/a", "n/a"] if runs else ["–", "–", "–"]
        return [f"{number(best.ops)} (c={best_clients})", f"{milliseconds(best.p50_ms)} / {milliseconds(best.p99_ms)}",
                f"{ratio:.2f}×"]

    for result in bench.results:
        service = result.service
        failures = f"{service.failures}" + (f" (+{service.socket_errors} socket errors)" if service.socket_errors else "")
        batch = f"{result.batch_mean:.1f}" if result.batch_mean else "–"
        cells = ([result.scenario.title, number(service.ops), milliseconds(service.p50_ms),
                  milliseconds(service.p99_ms), failures]
                 + reference_cells(result, result.floor) + reference_cells(result, result.pgbench) + [batch])
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("pgbench at each client count (ops/s, failed transactions):")
    lines.append("")
    lines.append("| scenario | reference | " + " | ".join(f"c={c}" for c in bench.pgbench_clients) + " |")
    lines.append("|---|---|" + "---:|" * len(bench.pgbench_clients))
    for result in bench.results:
        for label, runs in (("floor", result.floor), ("own tables", result.pgbench)):
            if not runs:
                continue
            cells = []
            for c in bench.pgbench_clients:
                m = runs.get(c)
                if m is None:
                    cells.append("n/a")
                else:
                    cells.append(f"{number(m.ops)}" + (f", {m.failures} failed" if m.failures else "")
                                 + (" (aborted)" if m.aborted else ""))
            lines.append(f"| {result.scenario.title} | {label} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("CPU in use during each run, in cores (of "
                 f"{os.cpu_count()}): the service, PostgreSQL, the load generator, anything else on the machine:")
    lines.append("")
    lines.append("| run | wallet | postgres | wrk / pgbench | other |")
    lines.append("|---|---:|---:|---:|---:|")
    for result in bench.results:
        runs = [("service", result.service)]
        if result.previous is not None:
            runs.append(("previous release", result.previous))
        floor_clients, floor = result.best_floor
        if floor is not None:
            runs.append((f"floor c={floor_clients}", floor))
        best_clients, best = result.best_pgbench
        if best is not None:
            runs.append((f"own tables c={best_clients}", best))
        for label, m in runs:
            cpu = m.cpu
            lines.append(f"| {result.scenario.title}, {label} | {cpu.wallet:.2f} | {cpu.postgres:.2f} | "
                         f"{cpu.load:.2f} | {cpu.other:.2f} |")
    lines.append("")
    committed = [f"{r.scenario.name} {number(r.committed)} committed for "
                 f"{number(r.service.requests - r.service.failures)} 2xx answers"
                 for r in bench.results if r.committed >= 0]
    if committed:
        lines.append("Rows the service committed under each run's references: " + "; ".join(committed) + ".")
        lines.append("")
    if bench.previous and bench.results:
        lines.append(f"Against the {bench.previous.label}, in this run:")
        lines.append("")
        lines.append("| scenario | previous ops/s | this ops/s | change | pairs' changes | previous p99 ms | this p99 ms |")
        lines.append("|---|---:|---:|---:|---|---:|---:|")
        for result in bench.results:
            previous, service = result.previous, result.service
            pairs = ", ".join(f"{change:+.0%}" for change in result.changes)
            lines.append(f"| {result.scenario.title} | {number(previous.ops)} | {number(service.ops)} | "
                         f"{result.change:+.1%} | {pairs} | {milliseconds(previous.p99_ms)} | "
                         f"{milliseconds(service.p99_ms)} |")
        lines.append("")
    rss = f"{bench.rss_peak_kb / 1024:.1f} MB" if bench.rss_peak_kb else "unknown"
    lines.append(f"Peak RSS of the service (VmHWM): {rss}.")
    for service in bench.services:
        if service.status != 0:
            lines.append(f"{service.label} exited {service.status} on SIGTERM; see its log in bench/results/last-run/.")
    lines.append("")
    if bench.events is not None:
        events = bench.events
        none, webhook = events["none"], events["webhook"]
        lines.append(f"Events: spread debits without a webhook and with one endpoint (a loopback receiver answering "
                     f"204), {bench.rounds} ABBA round(s):")
        lines.append("")
        lines.append("| | ops/s | p50 ms | p99 ms | wallet / PostgreSQL cores |")
        lines.append("|---|---:|---:|---:|---:|")
        for label, m in (("no webhook", none), ("one endpoint", webhook)):
            lines.append(f"| {label} | {number(m.ops)} | {milliseconds(m.p50_ms)} | {milliseconds(m.p99_ms)} | "
                         f"{m.cpu.wallet:.2f} / {m.cpu.postgres:.2f} |")
        lines.append("")
        feed = events["feed"]
        lines.append(f"With the endpoint: {events['change']:+.1%}, and {number(events['delivered_per_second'])} "
                     f"deliveries/s received during the runs (the receiver, a thread of the bench, on "
                     f"{events.get('receiver_cores', 0.0):.2f} cores). The feed, one reader from cursor 0: "
                     f"{number(feed['events'])} events in {feed['seconds']:.2f} s ({feed['pages']} pages), "
                     f"{number(feed['events_per_second'])} events/s.")
        lines.append("")
    if bench.unanalyzed:
        lines.append(f"Balance reads (`read_spread.lua` over {number(bench.unanalyzed_wallets)} wallets) on a database "
                     f"loaded a moment before, its tables never analyzed, then the same database after ANALYZE:")
        lines.append("")
        lines.append("| release | never analyzed ops/s | p99 ms | non-2xx | analyzed ops/s | p99 ms | non-2xx "
                     "| never analyzed ÷ analyzed |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        for label, before, after in bench.unanalyzed:
            ratio = f"{before.ops / after.ops:.2f}" if after.ops else "n/a"
            lines.append(f"| {label} | {number(before.ops)} | {milliseconds(before.p99_ms)} | "
                         f"{before.failures + before.socket_errors} | {number(after.ops)} | "
                         f"{milliseconds(after.p99_ms)} | {after.failures + after.socket_errors} | {ratio} |")
        lines.append("")
    if bench.slow_client_ms is not None:
        lines.append(f"A normal read beside 50 clients that each sent half a request and stalled: "
                     f"answered in {bench.slow_client_ms:.1f} ms.")
        lines.append("")
    for service in bench.services:
        check = service.check_output.splitlines()
        lines.append(f"`wallet check` afterwards ({service.label}): exit {service.check_status}"
                     + (f", `{check[-1]}`" if len(check) == 1 else ""))
        if len(check) > 1:
            lines.append("")
            lines.append("```")
            lines.extend(check[:50])
            lines.append("```")
        lines.append("")
    if bench.floor_check is not None:
        violations, text = bench.floor_check
        lines.append(f"The floor's books afterwards: " + ("balanced." if violations == 0 else "NOT balanced:"))
        if violations:
            lines.append("")
            lines.append("```")
            lines.extend(text.splitlines())
            lines.append("```")
        lines.append("")
    lines.extend(targets(bench))
    return "\n".join(lines) + "\n"


def verdict(met):
    return "met" if met else "NOT met"


def targets(bench):
    by_name = {r.scenario.name: r for r in bench.results}
    rows = []

    def ratio_row(name, label, needed):
        # Against the floor; the ratio to the reference on the service's own
        # tables rides along, as it is the figure earlier reports gave.
        result = by_name.get(name)
        if result is None or result.floor_ratio is None:
            rows.append((label, "not measured", "–"))
        else:
            own = f" (own tables {result.ratio:.2f}×)" if result.ratio is not None else ""
            rows.append((label, f"{result.floor_ratio:.2f}×{own}", verdict(result.floor_ratio >= needed)))

    ratio_row("debit-spread", "debit spread ≥ 2.5× the floor (4× the aim)", 2.5)
    ratio_row("debit-hot", "hot wallet ≥ 8× the hot floor", 8.0)
    ratio_row("credit-spread", "credits ≥ 2.5× the floor", 2.5)
    ratio_row("hold-capture", "hold + capture ≥ 2× the floor", 2.0)
    if bench.results:
        worst = max(bench.results, key=lambda r: r.service.p99_ms)
        rows.append(("p99 ≤ 25 ms in every scenario", f"worst {milliseconds(worst.service.p99_ms)} ms "
                     f"({worst.scenario.name})", verdict(worst.service.p99_ms <= 25)))
    if bench.rss_peak_kb:
        megabytes = bench.rss_peak_kb / 1024
        rows.append(("peak RSS ≤ 150 MB", f"{megabytes:.1f} MB", verdict(megabytes <= 150)))
    bad = sum(r.service.failures + r.service.socket_errors for r in bench.results)
    rows.append(("zero non-2xx (and no socket errors)", str(bad), verdict(bad == 0)))
    changes = [r for r in bench.results if r.change is not None]
    if changes:
        worst = min(changes, key=lambda r: r.change)
        rows.append(("no scenario loses more than 5% against the previous release",
                     f"worst {worst.change:+.1%} ({worst.scenario.name})", verdict(worst.change >= -0.05)))
    if bench.events is not None and bench.events["change"] is not None:
        change = bench.events["change"]
        rows.append(("spread debits lose ≤ 15% with a webhook endpoint", f"{change:+.1%}",
                     verdict(change >= -0.15)))
        rate = bench.events["feed"]["events_per_second"]
        rows.append(("the feed serves ≥ 20,000 events/s to one reader", f"{number(rate)}/s",
                     verdict(rate >= 20_000)))
    if bench.unanalyzed:
        _, before, after = bench.unanalyzed[-1]
        ratio = before.ops / after.ops if after.ops else 0.0
        rows.append(("balance reads never analyzed within 10% of analyzed", f"{ratio:.2f}", verdict(ratio >= 0.9)))
        bad = sum(m.failures + m.socket_errors for m in (before, after))
        rows.append(("zero non-2xx in this build's read-unanalyzed runs", str(bad), verdict(bad == 0)))
    reads = by_name.get("read-spread")
    if reads is not None:
        rows.append(("balance reads ≥ 25k/s", f"{number(reads.service.ops)}/s",
                     verdict(reads.service.ops >= 25_000)))
    standard = bench.seconds == 10 and bench.connections == 64
    lines = ["Targets" + ("" if standard else f" (set for c=64 and 10 s; this run used c={bench.connections}, "
                                               f"{bench.seconds} s)") + ":", "",
             "| target | measured | met |", "|---|---:|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return lines


def main():
    def on_terminate(signum, frame):
        raise Interrupted(signal.Signals(signum).name)

    # SIGINT too: a shell that starts the runner in the background leaves
    # SIGINT ignored, and Python then never raises KeyboardInterrupt.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, on_terminate)
    bench = Bench()
    failed = None
    try:
        bench.main()
    except Interrupted as error:
        failed = f"interrupted by {error}"
    except BenchError as error:
        failed = str(error)
    finally:
        # A second Ctrl-C must not cut the cleanup short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        bench.cleanup()
    if failed:
        log(f"failed: {failed}")
        if (RAW_DIR / "service.log").exists():
            log(f"service log: {RAW_DIR / 'service.log'}")
        return 1
    table = report(bench)
    (RESULTS_DIR / "latest.md").write_text(table)
    print(table, end="")
    log(f"wrote {RESULTS_DIR / 'latest.md'}; raw output in {RAW_DIR}")
    floor_broken = bench.floor_check is not None and bench.floor_check[0] != 0
    return 0 if bench.check_status == 0 and not floor_broken else 1


if __name__ == "__main__":
    sys.exit(main())
