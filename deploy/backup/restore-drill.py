#!/usr/bin/python3
"""Restore drill: backs the ledger up under load, loses every data directory,
and restores it twice, to the latest state and to a chosen time.

Run: deploy/backup/restore-drill.py --wallet .build/release/wallet
     (or `make restore-drill`; `make test` runs the bounded form,
      --wallet .build/debug/wallet --before-seconds 10 --after-seconds 10 --clients 4)

1. A throwaway PostgreSQL 15 (initdb in a temp directory, unix socket only,
   as the postgres user when run as root) archives its WAL with pgBackRest to
   a throwaway repository, both set up from the templates beside this file
   (pgbackrest.conf, postgresql.conf).
2. `wallet serve` runs against it; the failover drill's retrying clients
   (deploy/ha/drill.py) credit and debit, each operation with its own flowNO
   or idempotency key, and every acknowledgement is logged with its time.
3. After --before-seconds, `pgbackrest backup --type=full`, under load.
4. --after-seconds more of writes; half-way through, the time T is noted as
   the point-in-time recovery target.
5. `pg_switch_wal()`, and a wait until pg_stat_archiver shows that segment
   archived: every operation acknowledged before the switch is in the
   repository (the cut). Writes go on for a few seconds more, the tail a
   lost disk takes with it.
6. The clients stop, then the service, then PostgreSQL (immediate: no
   shutdown checkpoint, no last archiving), and the data directory is deleted.
7. `pgbackrest restore` (the latest state), PostgreSQL started, the service
   started: the RTO runs from the restore's start to /readyz answering 200.
   Every operation acknowledged before the cut must be there; those after it
   that are missing are the RPO, with the time window they cover. Then
   `wallet check`.
8. All deleted again, and `pgbackrest restore --type=time --target=T
   --target-action=promote`: every operation acknowledged before T must be
   there, none first sent after T may be, and one in flight at T (sent
   before, acknowledged after) may be either; they are counted. `wallet check`.

It exits 1 if an operation acknowledged before the cut is missing, if an
operation breaks the rule of T, if `wallet check` fails on either restore,
or if any step misses its deadline; everything it started is stopped and its
directory removed, on failure too (--keep leaves the directory). Its last line
reads `restore-drill: acknowledged=N missing=N rpo_seconds=X rto_seconds=Y
pitr=ok|failed` (-1 for a figure not measured because the drill stopped).
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "ha"))
# The failover drill's retrying clients, service instances, and its run and wait functions.
import drill  # noqa: E402
from drill import DrillError, log, run, wait_until  # noqa: E402

PG_BIN = Path("/usr/lib/postgresql/15/bin")
PGBACKREST = "/usr/bin/pgbackrest"
RENDER = HERE.parent / "ha" / "render.sh"
PORT = 5432
SERVER_USER = "postgres"

# Deadlines, in seconds.
INITDB_SECONDS_MAX = 120
# pg_ctl start: for a restored cluster, until it accepts connections.
START_SECONDS_MAX = 180
STOP_SECONDS_MAX = 60
# From the service's start to /readyz 200 (promotion included).
READY_SECONDS_MAX = 180
# A switched segment to show in pg_stat_archiver.
ARCHIVE_SECONDS_MAX = 60
BACKUP_SECONDS_MAX = 1800
RESTORE_SECONDS_MAX = 1800
CHECK_SECONDS_MAX = 300
# Writes after the cut: acknowledged, but not yet archived when the disk is lost.
TAIL_SECONDS = 2.0


class Cluster:
    """The throwaway PostgreSQL and its pgBackRest stanza, in `root`."""

    def __init__(self, root):
        self.root = root
        self.data = root / "pgdata"
        self.repo = root / "repo"
        self.log_file = root / "postgres.log"
        self.config = root / "pgbackrest.conf"
        self.as_owner = ["runuser", "-u", SERVER_USER, "--"] if os.geteuid() == 0 else []
        self.url = f"host={root} port={PORT} user=wallet dbname=wallet"

    def own(self, path):
        if self.as_owner:
            shutil.chown(path, SERVER_USER, SERVER_USER)

    def make_directory(self, path):
        path.mkdir(mode=0o700)
        self.own(path)

    def render(self, template, output, values):
        environment = {"PATH": "/usr/bin:/bin", **values}
        run([str(RENDER), str(template), str(output)], env=environment, timeout=30)
        self.own(output)

    def create(self):
        for path in (self.repo, self.root / "log", self.root / "lock"):
            self.make_directory(path)
        values = {"BACKUP_REPO_PATH": str(self.repo), "BACKUP_PG_DATA": str(self.data),
                  "BACKUP_PG_SOCKET_DIR": str(self.root), "BACKUP_PG_PORT": str(PORT),
                  "BACKUP_LOG_DIR": str(self.root / "log"), "BACKUP_LOCK_DIR": str(self.root / "lock"),
                  "BACKUP_CONFIG": str(self.config)}
        self.render(HERE / "pgbackrest.conf", self.config, values)
        archiving = self.root / "archiving.conf"
        self.render(HERE / "postgresql.conf", archiving, values)
        run(self.as_owner + [str(PG_BIN / "initdb"), "-D", str(self.data), "-U", SERVER_USER, "--auth=trust",
                             "--encoding=UTF8", "--locale=C", "--no-instructions"], timeout=INITDB_SECONDS_MAX)
        own_settings = (f"\n# restore drill\nlisten_addresses = ''\nport = {PORT}\n"
                        f"unix_socket_directories = '{self.root}'\nlogging_collector = off\n")
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(own_settings + "\n" + archiving.read_text())

    def start(self):
        run(self.as_owner + [str(PG_BIN / "pg_ctl"), "start", "-D", str(self.data), "-l", str(self.log_file), "-w",
                             "-t", str(START_SECONDS_MAX)], timeout=START_SECONDS_MAX + 10)

    def running(self):
        if not (self.data / "postmaster.pid").exists():
            return False
        status = run(self.as_owner + [str(PG_BIN / "pg_ctl"), "status", "-D", str(self.data)], timeout=30, check=False)
        return status.returncode == 0

    def stop(self, mode):
        if self.running():
            run(self.as_owner + [str(PG_BIN / "pg_ctl"), "stop", "-D", str(self.data), "-m", mode, "-w",
                                 "-t", str(STOP_SECONDS_MAX)], timeout=STOP_SECONDS_MAX + 10)

    def psql(self, sql, database="wallet", timeout=60):
        return run([str(PG_BIN / "psql"), "-h", str(self.root), "-p", str(PORT), "-U", SERVER_USER, "-d", database,
                    "--no-psqlrc", "-v", "ON_ERROR_STOP=1", "-tAF", "\t", "-c", sql], timeout=timeout).stdout

    def backrest(self, *arguments, timeout):
        return run(self.as_owner + [PGBACKREST, f"--config={self.config}", "--stanza=wallet", *arguments],
                   timeout=timeout)

    def wipe(self):
        """The data directory gone, and an empty one in its place for the restore."""
        shutil.rmtree(self.data)
        self.make_directory(self.data)


def sql_time(seconds):
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f+00")


def clock(seconds):
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def pause(seconds, stop_early):
    """Sleeps, but returns at once when a client thread has died."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if stop_early():
            raise DrillError("a client thread stopped")
        time.sleep(min(0.2, max(0, deadline - time.monotonic())))


def start_service(wallet, cluster, root, name):
    environment = {"WALLET_DATABASE_URL": cluster.url, "WALLET_DATABASE_SESSION_URL": cluster.url}
    instance = drill.Instance(wallet, environment, root / f"wallet-{name}.log")
    try:
        wait_until(instance.ready, READY_SECONDS_MAX, f"the service on the {name} database ready (/readyz 200)")
    except DrillError:
        instance.stop()
        raise
    return instance


def applied(cluster, run_id):
    """The drill's credits (by flowNO) and debits (by idempotency key) in the
    ledger."""
    credits = set(cluster.psql(f"SELECT flow_no FROM wallet.credits WHERE flow_no LIKE 'drill-{run_id}-%'").split())
    debits = set(cluster.psql(f"""SELECT key FROM wallet.idempotency_keys
                                  WHERE outcome = 'debited' AND key LIKE 'drill-{run_id}-%'""").split())
    return {"credit": credits, "debit": debits}


def present(found, ledger, reference):
    kind = (ledger.acknowledged.get(reference) or ledger.unacknowledged[reference])[0]
    return reference in found[kind]


def wallet_check(wallet, cluster):
    environment = {**os.environ, "WALLET_DATABASE_URL": cluster.url, "WALLET_DATABASE_SESSION_URL": cluster.url}
    result = run([wallet, "check", "--full"], env=environment, timeout=CHECK_SECONDS_MAX, check=False)
    return result.returncode, (result.stdout + result.stderr).strip()


def restore(wallet, cluster, root, name, options):
    """Restores into an empty data directory, starts PostgreSQL and the
    service; returns the running instance and the times of each step."""
    started = time.monotonic()
    cluster.wipe()
    cluster.backrest(*options, "restore", timeout=RESTORE_SECONDS_MAX)
    restored = time.monotonic()
    cluster.start()
    accepting = time.monotonic()
    instance = start_service(wallet, cluster, root, name)
    ready = time.monotonic()
    return instance, {"restore": restored - started, "postgres": accepting - restored, "service": ready - accepting,
                      "rto": ready - started}


def run_drill(arguments, root, report):
    wallet = str(Path(arguments.wallet).resolve())
    if not os.access(wallet, os.X_OK):
        raise DrillError(f"{wallet} is not an executable; build it first")
    for program in (PGBACKREST, str(PG_BIN / "initdb")):
        if not os.access(program, os.X_OK):
            raise DrillError(f"{program} is missing; install the Debian packages pgbackrest and postgresql-15")
    started = time.monotonic()
    cluster = Cluster(root)
    report["cluster"] = cluster
    log(f"creating the cluster and the stanza in {root}")
    cluster.create()
    cluster.start()
    cluster.psql("CREATE ROLE wallet LOGIN", database="postgres")
    cluster.psql("CREATE DATABASE wallet OWNER wallet", database="postgres")
    cluster.backrest("stanza-create", timeout=120)
    # Forces a WAL switch and waits for it to reach the repository.
    cluster.backrest("check", timeout=120)

    run_id = f"{int(time.time())}{os.getpid() % 1000:03d}"
    instance = start_service(wallet, cluster, root, "original")
    report["instances"].append(instance)
    environment = {**os.environ, "WALLET_DATABASE_URL": cluster.url, "WALLET_DATABASE_SESSION_URL": cluster.url}
    keys = {}
    for scope in ("credit", "debit"):
        output = run([wallet, "keys", "create", "--name", f"drill-{run_id}-{scope}", "--scopes", scope],
                     env=environment)
        keys[scope] = output.stdout.strip().splitlines()[-1]
    cluster.psql("; ".join(
        f"SELECT * FROM wallet.grant_coins('drill-{run_id}-u{u}', {drill.SEED_COINS}, 'coin', 'drill-{run_id}-seed-{u}', 'drill')"
        for u in range(drill.USERS)))

    ledger = drill.Ledger()
    report["ledger"] = ledger
    stop = threading.Event()
    report["stop"] = stop
    clients = [drill.Client(n, run_id, [instance.port], keys, ledger, stop, arguments.pace_ms / 1000)
               for n in range(arguments.clients)]
    report["clients"] = clients
    for client in clients:
        client.start()
    load_started = time.monotonic()
    log(f"{arguments.clients} clients writing for {arguments.before_seconds:g} s before the backup")
    died = lambda: not all(c.is_alive() for c in clients)  # noqa: E731
    pause(arguments.before_seconds, died)

    log("full backup, under load")
    backup_started = time.monotonic()
    cluster.backrest("--type=full", "backup", timeout=BACKUP_SECONDS_MAX)
    report["backup_seconds"] = time.monotonic() - backup_started
    info = json.loads(cluster.backrest("--output=json", "info", timeout=60).stdout)
    backup = info[0]["backup"][-1]
    report["backup"] = {"label": backup["label"], "database_bytes": backup["info"]["size"],
                        "repository_bytes": backup["info"]["repository"]["delta"]}

    log(f"writing for {arguments.after_seconds:g} s more; the recovery target is half-way")
    pause(arguments.after_seconds / 2, died)
    target = time.time()
    report["target"] = target
    pause(arguments.after_seconds / 2, died)

    # Every operation acknowledged before this instant was flushed before
    # the switch, so it lies in a segment up to the switched one.
    cut = time.time()
    segment = cluster.psql("SELECT pg_walfile_name(pg_switch_wal())").strip()
    deadline = time.monotonic() + ARCHIVE_SECONDS_MAX
    while True:
        archived, failed = cluster.psql(
            "SELECT coalesce(last_archived_wal, ''), coalesce(last_failed_wal, '') FROM pg_stat_archiver").split("\t")
        if archived[:24] >= segment:
            break
        if time.monotonic() > deadline:
            raise DrillError(f"segment {segment} not archived after {ARCHIVE_SECONDS_MAX} s "
                             f"(last archived {archived or 'none'}, last failed {failed.strip() or 'none'})")
        time.sleep(0.1)
    report["cut"] = cut
    report["segment"] = segment
    report["archive_seconds"] = time.time() - cut
    log(f"segment {segment} archived {report['archive_seconds']:.2f} s after the switch; "
        f"{TAIL_SECONDS:g} s of writes the archive will not see")
    pause(TAIL_SECONDS, died)

    stop.set()
    for client in clients:
        client.join(timeout=drill.OPERATION_SECONDS_MAX + 30)
    report["load_seconds"] = time.monotonic() - load_started
    last_ack = max((acked for _, acked in ledger.times.values() if acked is not None), default=cut)
    report["last_ack"] = last_ack
    log(f"{len(ledger.acknowledged)} operations acknowledged; stopping the service and PostgreSQL "
        "(immediate) and deleting the data directory")
    instance.stop()
    report["instances"].remove(instance)
    cluster.stop("immediate")

    log("restoring the latest state")
    instance, times = restore(wallet, cluster, root, "latest", [])
    report["instances"].append(instance)
    report["latest"] = times
    log(f"service ready {times['rto']:.1f} s after the restore began")
    found = applied(cluster, run_id)
    before_cut = [r for r, (_, acked) in ledger.times.items() if acked is not None and acked < cut]
    after_cut = [r for r, (_, acked) in ledger.times.items() if acked is not None and acked >= cut]
    report["lost_before_cut"] = [r for r in before_cut if not present(found, ledger, r)]
    missing = [r for r in after_cut if not present(found, ledger, r)]
    report["before_cut"] = len(before_cut)
    report["after_cut"] = len(after_cut)
    report["missing"] = missing
    if missing:
        first_missing = min(ledger.times[r][1] for r in missing)
        kept = [acked for r, (_, acked) in ledger.times.items()
                if acked is not None and acked < first_missing and present(found, ledger, r)]
        report["rpo_window"] = (max(kept, default=first_missing), max(ledger.times[r][1] for r in missing))
    report["latest_check"] = wallet_check(wallet, cluster)
    report["latest_unacknowledged_applied"] = sum(1 for r in ledger.unacknowledged if present(found, ledger, r))
    instance.stop()
    report["instances"].remove(instance)
    cluster.stop("fast")

    log(f"restoring to {sql_time(target)} (point in time)")
    instance, times = restore(wallet, cluster, root, "pitr",
                              ["--type=time", f"--target={sql_time(target)}", "--target-action=promote",
                               "--target-timeline=current"])
    report["instances"].append(instance)
    report["pitr"] = times
    found = applied(cluster, run_id)
    acked_before = [r for r, (_, acked) in ledger.times.items() if acked is not None and acked < target]
    sent_after = [r for r, (sent, _) in ledger.times.items() if sent > target]
    in_flight = [r for r, (sent, acked) in ledger.times.items() if sent <= target and (acked is None or acked >= target)]
    report["pitr_acked_before"] = len(acked_before)
    report["pitr_lost"] = [r for r in acked_before if not present(found, ledger, r)]
    report["pitr_sent_after"] = len(sent_after)
    report["pitr_extra"] = [r for r in sent_after if present(found, ledger, r)]
    report["pitr_in_flight"] = (len(in_flight), sum(1 for r in in_flight if present(found, ledger, r)))
    report["pitr_check"] = wallet_check(wallet, cluster)
    report["seconds"] = time.monotonic() - started


def summary(report):
    ledger = report["ledger"]
    by_kind = {kind: sum(1 for k, _, _ in ledger.acknowledged.values() if k == kind) for kind in ("credit", "debit")}
    retries = ", ".join(f"{k} {v}" for k, v in sorted(ledger.retries.items())) or "none"
    latest, pitr = report["latest"], report["pitr"]
    check = lambda result: "clean" if result[0] == 0 else f"FAILED: {result[1]}"  # noqa: E731
    lines = [
        f"- Load: {len(ledger.acknowledged)} operations acknowledged ({by_kind['credit']} credits, "
        f"{by_kind['debit']} debits) in {report['load_seconds']:.1f} s; retries: {retries}; "
        f"unacknowledged: {len(ledger.unacknowledged)}",
        f"- Full backup under load: {report['backup_seconds']:.1f} s, {report['backup']['database_bytes'] / 2**20:.1f} MiB "
        f"of database in {report['backup']['repository_bytes'] / 2**20:.1f} MiB of repository ({report['backup']['label']})",
        f"- Last archived WAL before the loss: {report['segment']}, switched at {clock(report['cut'])} and archived "
        f"{report['archive_seconds']:.2f} s later; the last acknowledgement came {report['last_ack'] - report['cut']:.1f} s "
        "after the switch",
        "",
        "| Restore | pgbackrest restore | PostgreSQL up | Service ready | RTO |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| latest | {latest['restore']:.1f} s | {latest['postgres']:.1f} s | {latest['service']:.1f} s | {latest['rto']:.1f} s |",
        f"| to {clock(report['target'])} | {pitr['restore']:.1f} s | {pitr['postgres']:.1f} s | {pitr['service']:.1f} s | "
        f"{pitr['rto']:.1f} s |",
        "",
        f"- Latest: acknowledged before the last archived WAL: {report['before_cut']}, missing "
        f"{len(report['lost_before_cut'])}; after it: {report['after_cut']}, missing {len(report['missing'])} (the RPO)"
        + (f", acknowledged from {clock(report['rpo_window'][0])} to {clock(report['rpo_window'][1])} "
           f"({report['rpo_window'][1] - report['rpo_window'][0]:.2f} s)" if report["missing"] else ""),
        f"- Latest: `wallet check` {check(report['latest_check'])}",
        f"- Point in time {sql_time(report['target'])}: acknowledged before it {report['pitr_acked_before']}, missing "
        f"{len(report['pitr_lost'])}; first sent after it {report['pitr_sent_after']}, present "
        f"{len(report['pitr_extra'])}; in flight across it {report['pitr_in_flight'][0]}, of which present "
        f"{report['pitr_in_flight'][1]}",
        f"- Point in time: `wallet check` {check(report['pitr_check'])}",
        f"- The whole drill: {report['seconds']:.1f} s",
    ]
    if ledger.refused:
        lines.append(f"- Unexpected answers: {ledger.refused[:10]}")
    if report["lost_before_cut"]:
        lines.append(f"- Lost before the last archived WAL: {sorted(report['lost_before_cut'])[:10]}")
    if report["pitr_lost"] or report["pitr_extra"]:
        lines.append(f"- Against the target: missing {sorted(report['pitr_lost'])[:10]}, "
                     f"present though sent after it {sorted(report['pitr_extra'])[:10]}")
    return "\n".join(lines)


def tail(path, lines=20):
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(none)"


def cleanup(report, root, keep):
    stop = report.get("stop")
    if stop is not None:
        stop.set()
    # A client finishes the operation in hand while the service still
    # answers; one still retrying after that is a daemon thread, ended with
    # the drill.
    deadline = time.monotonic() + 15
    for client in report.get("clients", []):
        client.join(timeout=max(0, deadline - time.monotonic()))
    for instance in list(report["instances"]):
        instance.stop()
    cluster = report.get("cluster")
    if cluster is not None:
        try:
            cluster.stop("immediate")
        except (DrillError, subprocess.TimeoutExpired) as error:
            print(f"restore-drill: stopping PostgreSQL: {error}", file=sys.stderr)
    if keep:
        log(f"kept {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wallet", default=".build/release/wallet", help="the wallet binary")
    parser.add_argument("--before-seconds", type=float, default=60, help="writes before the full backup")
    parser.add_argument("--after-seconds", type=float, default=60, help="writes after it, until the last archived WAL")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--pace-ms", type=float, default=0, help="pause between a client's operations")
    parser.add_argument("--keep", action="store_true", help="leave the drill's directory (logs, repository)")
    arguments = parser.parse_args()
    if arguments.clients < 1 or arguments.before_seconds < 1 or arguments.after_seconds < 2:
        sys.exit("--clients at least 1, --before-seconds at least 1, --after-seconds at least 2")
    # The service and its commands read only what the drill gives them.
    for name in [n for n in os.environ if n.startswith("WALLET_")]:
        del os.environ[name]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    # PostgreSQL's user must reach the directory, so not under a private home.
    root = Path(tempfile.mkdtemp(prefix="wallet-restore-drill-", dir="/tmp"))
    report = {"instances": []}
    failed = True
    try:
        if os.geteuid() == 0:
            shutil.chown(root, SERVER_USER, SERVER_USER)
        run_drill(arguments, root, report)
        print("\n" + summary(report) + "\n", flush=True)
        pitr_ok = not report["pitr_lost"] and not report["pitr_extra"] and report["pitr_check"][0] == 0
        failed = bool(report["lost_before_cut"] or report["latest_check"][0] != 0 or not pitr_ok
                      or report["ledger"].refused or not report["ledger"].acknowledged)
        rpo = report["rpo_window"][1] - report["rpo_window"][0] if report["missing"] else 0.0
        last = (f"acknowledged={len(report['ledger'].acknowledged)} missing={len(report['missing'])} "
                f"rpo_seconds={rpo:.2f} rto_seconds={report['latest']['rto']:.2f} pitr={'ok' if pitr_ok else 'failed'}")
    except (DrillError, subprocess.TimeoutExpired, OSError, ValueError, KeyError) as error:
        print(f"restore-drill: {error}", file=sys.stderr)
        for name in ("postgres.log", "wallet-original.log", "wallet-latest.log", "wallet-pitr.log"):
            if (root / name).exists():
                print(f"--- last lines of {name}:\n{tail(root / name)}", file=sys.stderr)
        ledger = report.get("ledger")
        acknowledged = len(ledger.acknowledged) if ledger else 0
        rto = f"{report['latest']['rto']:.2f}" if "latest" in report else "-1"
        missing = len(report["missing"]) if "missing" in report else -1
        last = f"acknowledged={acknowledged} missing={missing} rpo_seconds=-1 rto_seconds={rto} pitr=failed"
    finally:
        cleanup(report, root, arguments.keep)
    print(f"restore-drill: {last}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
