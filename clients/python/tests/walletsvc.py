"""Runs the real `wallet serve` on its embedded development database.

Each `WalletService` has a private directory for its data and output, a free
loopback port, and the development keys parsed from its first start's
banner. It can be SIGKILLed and started again on the same port and data
directory. `stop()` ends the process and then the PostgreSQL cluster it
made, which outlives a `wallet serve` that was killed (a later serve reuses
it and leaves it running). Every wait has a deadline.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

START_SECONDS = 90.0  # the first start makes a cluster (initdb) and migrates
READY_SECONDS = 30.0
STOP_SECONDS = 20.0

_KEY_LINE = re.compile(r"^\s*(app-backend|game-server|support-console) \([^)]*\):\s+(wk_\S+)\s*$")
_CLUSTER_LINE = re.compile(r"development database: embedded PostgreSQL in (\S+)")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def postgres_bin_dir() -> str | None:
    """Where `pg_ctl` is, found the way the service finds it: PATH first, then /usr/lib/postgresql/*/bin."""
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(entry) / "pg_ctl"
        if entry and candidate.is_file() and os.access(candidate, os.X_OK) and (Path(entry) / "initdb").exists():
            return str(candidate.resolve().parent)
    root = Path("/usr/lib/postgresql")
    versions = sorted((int(p.name) for p in root.iterdir() if p.name.isdigit()), reverse=True) if root.is_dir() else []
    for version in versions:
        bindir = root / str(version) / "bin"
        if (bindir / "pg_ctl").is_file():
            return str(bindir)
    return None


class WalletService:
    def __init__(self, binary: str, name: str = "wallet") -> None:
        self.binary = binary
        # Under the system temp dir, opened to others: as root the service
        # runs PostgreSQL as the `postgres` user, which must reach it.
        self.workdir = Path(tempfile.mkdtemp(prefix=f"wallet-client-py-{name}-"))
        self.workdir.chmod(0o755)
        self.data_dir = self.workdir / "data"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.keys: dict[str, str] = {}
        self.cluster_dir: str | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.kills = 0

    # Environment and process.

    def env(self) -> dict[str, str]:
        env = {name: value for name, value in os.environ.items() if not name.startswith("WALLET_")}
        env.update(
            WALLET_DATA_DIR=str(self.data_dir),
            WALLET_LISTEN=f"127.0.0.1:{self.port}",
            WALLET_LOG_LEVEL="error",
        )
        return env

    def _spawn(self) -> Path:
        self.starts += 1
        out = self.workdir / f"serve-{self.starts}.out"
        err = self.workdir / f"serve-{self.starts}.err"
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            self.process = subprocess.Popen(
                [self.binary, "serve"], env=self.env(), stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                cwd=self.workdir,
            )
        return out

    def start(self) -> None:
        """The first start: waits for the banner's keys, then for readiness."""
        out = self._spawn()
        deadline = time.monotonic() + START_SECONDS
        while True:
            text = out.read_text(errors="replace") if out.exists() else ""
            for line in text.splitlines():
                match = _KEY_LINE.match(line)
                if match:
                    self.keys[match.group(1)] = match.group(2)
                cluster = _CLUSTER_LINE.search(line)
                if cluster:
                    self.cluster_dir = cluster.group(1)
            if "app-backend" in self.keys and "game-server" in self.keys:
                break
            self._check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"wallet serve printed no keys within {START_SECONDS:.0f} s: {self._logs()}")
            time.sleep(0.05)
        self.wait_ready()

    def restart(self) -> None:
        """Starts the service again on the same port and data directory (no new keys are printed)."""
        self._spawn()
        self.wait_ready()

    def wait_ready(self, seconds: float = READY_SECONDS) -> None:
        deadline = time.monotonic() + seconds
        while True:
            self._check_alive()
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=1.0) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"wallet serve was not ready within {seconds:.0f} s: {self._logs()}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL, as a crash would: no drain, no cleanup."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=STOP_SECONDS)
        self.kills += 1

    def _check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"wallet serve exited with status {self.process.returncode}: {self._logs()}")

    def _logs(self) -> str:
        parts = []
        for path in sorted(self.workdir.glob("serve-*.*")):
            parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(parts)

    # Keys.

    def create_key(self, name: str, scopes: str) -> str:
        """`wallet keys create` against the running service's database; the secret is the last line."""
        done = subprocess.run(
            [self.binary, "keys", "create", "--name", name, "--scopes", scopes],
            env=self.env(), stdin=subprocess.DEVNULL, capture_output=True, timeout=60, cwd=self.workdir,
        )
        if done.returncode != 0:
            raise RuntimeError(f"wallet keys create failed ({done.returncode}): {done.stderr.decode(errors='replace')}")
        lines = [line.strip() for line in done.stdout.decode().splitlines() if line.strip()]
        if not lines or not lines[-1].startswith("wk_"):
            raise RuntimeError(f"wallet keys create printed no secret: {done.stdout!r}")
        return lines[-1]

    # Shutdown.

    def terminate(self) -> None:
        """SIGTERM (the service drains and exits), then SIGKILL if it has not exited in time."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=STOP_SECONDS)

    def stop(self) -> None:
        """Stops the service and its PostgreSQL, then removes the directory."""
        try:
            self.terminate()
            self.stop_cluster()
        finally:
            self._remove()

    def stop_cluster(self) -> None:
        """`pg_ctl stop -m fast` on the cluster, as the `postgres` user when root; nothing when it is not running."""
        cluster = self.cluster_dir or str(self.data_dir / "postgres")
        pgdata = str(Path(cluster) / "pgdata")
        bindir = postgres_bin_dir()
        if bindir is None or not Path(cluster).exists():
            return
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        status = subprocess.run(prefix + [f"{bindir}/pg_ctl", "status", "-D", pgdata],
                                capture_output=True, timeout=30)
        if status.returncode != 0:
            return
        subprocess.run(prefix + [f"{bindir}/pg_ctl", "stop", "-D", pgdata, "-m", "fast", "-w", "-t", "30"],
                       capture_output=True, timeout=45, check=True)

    def cluster_running(self) -> bool:
        cluster = self.cluster_dir or str(self.data_dir / "postgres")
        return (Path(cluster) / "pgdata" / "postmaster.pid").exists()

    def _remove(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)
        # The service keeps its cluster in the temp dir instead when the
        # `postgres` user cannot reach the data directory.
        if self.cluster_dir and not self.cluster_dir.startswith(str(self.workdir)):
            parent = Path(self.cluster_dir).parent
            if parent.name.startswith("wallet-dev-"):
                shutil.rmtree(parent, ignore_errors=True)
