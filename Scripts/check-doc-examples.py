#!/usr/bin/python3
"""Runs the shell examples of the documentation against the real service and
compares what each command prints with what the page says it prints.

Run: /usr/bin/python3 Scripts/check-doc-examples.py --wallet .build/debug/wallet [PAGE.md ...]

Without pages it checks README.md and every docs/*.md. It exits 1 on any
mismatch, and prints, per page, how many examples it ran and skipped.

How a page writes an example: a fenced block marked `sh`, holding commands,
each followed by the lines it prints, each written as a comment:

    ```sh
    curl -s http://127.0.0.1:8080/v1/wallets/player-1 -H "Authorization: Bearer $GAME_KEY"
    # {"user_id":"player-1","balances":[…]}
    ```

- A command is a line that is not a comment, with the lines after it while
  a line ends in a backslash. The `#` lines right after it are its output
  (`# ` and the text; a lone `#` is an empty line). A command with no `#`
  lines after it is run and its output not compared.
- Tabs in the output are expanded as a terminal shows them (every 8
  columns). `…` in a line matches any text; a line that is `…` alone matches any
  number of lines, none included. Trailing white space and carriage returns
  are ignored.
- A command must exit 0; `# [exit N]` as its last output line expects N.
- An example that cannot run against a local service (it needs Apple's or
  Google's real servers, a production database, a second machine) carries
  the comment `<!-- example: skip (why) -->` on the line before its fence;
  it is counted, not run. Blocks of other languages (`json`, `sql`,
  `python`, output without a language) are not examples; a `console` or
  `bash` block is refused, since it would look like one and never run.

Each page gets a service of its own, on a fresh copy of one development
database (made once per run by `wallet serve` on its embedded PostgreSQL, as
`make run` makes it), and one scratch shell that runs its examples in order,
so a page may use what an earlier example on it made. The shell starts in a
scratch directory that links to the repository's Scripts/, with:

- APP_KEY, GAME_KEY and CONSOLE_KEY: the development keys `make run` prints
  (app-backend, game-server, support-console);
- WALLET_DATABASE_URL: the psql line `make run` prints, for the admin
  scripts' psql lines;
- `wallet` on its PATH: the binary, on that page's database;
- `curl` on its PATH: curl, with the documented address
  http://127.0.0.1:8080 (or localhost:8080) turned into the page's service,
  which listens on a free port so that a `make run` elsewhere on the machine
  does not matter.
"""
import argparse
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP_MARK = re.compile(r"^\s*<!--\s*example:\s*skip\b(.*?)-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,})\s*([\w-]*)\s*$")
EXIT_LINE = re.compile(r"^\[exit (\d+)\]$")
COMMAND_SECONDS = 30    # each command's limit; --command-seconds changes it
START_SECONDS = 60
OTHER_SHELLS = {"console", "bash", "shell", "shell-session", "zsh", "sh-session"}
KEY_NAMES = {"app-backend": "APP_KEY", "game-server": "GAME_KEY", "support-console": "CONSOLE_KEY"}


class Example:
    def __init__(self, page, line, commands, skipped):
        self.page = page
        self.line = line            # the fence's line number, 1-based
        self.commands = commands    # [(line, text, expected lines or None)]
        self.skipped = skipped      # None, or the reason


def parse_page(path):
    """The page's `sh` blocks, in order, and the blocks of other shells,
    which would escape the check."""
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().split("\n")
    examples = []
    problems = []
    index = 0
    while index < len(lines):
        fence = FENCE.match(lines[index])
        if not fence:
            index += 1
            continue
        indent, ticks, language = fence.group(1), fence.group(2), fence.group(3)
        start = index
        body = []
        index += 1
        while index < len(lines) and not re.match(r"^\s*" + ticks + r"\s*$", lines[index]):
            line = lines[index]
            body.append((index + 1, line[len(indent):] if line.startswith(indent) else line.lstrip()))
            index += 1
        index += 1
        if language in OTHER_SHELLS:
            problems.append(f"{os.path.relpath(path, REPO)}:{start + 1}: a {language} block; write a shell "
                            "example as an sh block with # output lines, so that it is run")
            continue
        if language != "sh":
            continue
        previous = start - 1
        while previous >= 0 and not lines[previous].strip():
            previous -= 1
        mark = SKIP_MARK.match(lines[previous]) if previous >= 0 else None
        skipped = (mark.group(1).strip(" ()") or "marked") if mark else None
        examples.append(Example(path, start + 1, split_commands(body), skipped))
    return examples, problems


def split_commands(body):
    commands = []
    position = 0
    while position < len(body):
        number, text = body[position]
        if not text.strip() or text.lstrip().startswith("#"):
            position += 1     # a comment before any command, or a blank line
            continue
        command = [text]
        while command[-1].rstrip().endswith("\\") and position + 1 < len(body):
            position += 1
            command.append(body[position][1])
        position += 1
        expected = []
        while position < len(body) and body[position][1].startswith("#"):
            line = body[position][1]
            expected.append(line[2:] if line.startswith("# ") else line[1:])
            position += 1
        commands.append((number, "\n".join(command), expected if expected else None))
    return commands


def line_pattern(expected):
    parts = [re.escape(part) for part in expected.split("…")]
    return re.compile(".*".join(parts) + r"\Z", re.DOTALL)


def matches(expected, actual):
    """Whether the actual lines match the expected ones (`…` as above)."""
    patterns = [None if line == "…" else line_pattern(line) for line in expected]
    memo = {}

    def match(i, j):
        if (i, j) in memo:
            return memo[(i, j)]
        if i == len(patterns):
            result = j == len(actual)
        elif patterns[i] is None:
            result = any(match(i + 1, k) for k in range(j, len(actual) + 1))
        else:
            result = j < len(actual) and patterns[i].match(actual[j]) is not None and match(i + 1, j + 1)
        memo[(i, j)] = result
        return result

    return match(0, 0)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def service_environment(data_dir, port):
    """`make run`'s environment: no WALLET_ setting of this shell."""
    environment = {name: value for name, value in os.environ.items() if not name.startswith("WALLET_")}
    environment.update(WALLET_DATA_DIR=data_dir, WALLET_LISTEN=f"127.0.0.1:{port}")
    return environment


class Service:
    """`wallet serve` on the embedded database in data_dir."""

    def __init__(self, wallet, data_dir, log_dir, wait_for):
        self.port = free_port()
        self.data_dir = data_dir
        self.environment = service_environment(data_dir, self.port)
        self.out_path = os.path.join(log_dir, "serve.out")
        self.err_path = os.path.join(log_dir, "serve.err")
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.process = subprocess.Popen([wallet, "serve"], env=self.environment, stdout=out, stderr=err,
                                            stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            with open(self.out_path) as out:
                if wait_for in out.read() and self.ready():
                    return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        with open(self.err_path) as err:
            sys.stderr.write(err.read()[-4000:])
        raise RuntimeError(f"wallet serve on {data_dir} did not start within {START_SECONDS} s")

    def ready(self):
        """Whether /readyz answers 200: the database is up and takes writes."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as answer:
                return answer.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def banner(self):
        with open(self.out_path) as out:
            return out.read()

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def make_template(wallet, work):
    """One development database, made as the first `make run` makes it, and
    the keys its banner prints."""
    data_dir = os.path.join(work, "template")
    service = Service(wallet, data_dir, work, "Try them:")
    try:
        keys = {}
        for line in service.banner().split("\n"):
            found = re.match(r"^\s+([a-z-]+) \([a-z, ]+\):\s+(wk_\S+)$", line)
            if found and found.group(1) in KEY_NAMES:
                keys[KEY_NAMES[found.group(1)]] = found.group(2)
    finally:
        service.stop()
    if set(keys) != set(KEY_NAMES.values()):
        raise RuntimeError(f"the banner printed keys for {sorted(keys)}, not {sorted(KEY_NAMES.values())}")
    return data_dir, keys


def copy_database(template, data_dir):
    """A copy of the stopped template cluster. PostgreSQL names its socket
    directory in postgresql.conf, so the copy's is pointed at its own."""
    # cp -a keeps the owner: as root, the cluster belongs to `postgres`.
    subprocess.run(["cp", "-a", template, data_dir], check=True)
    pgdata = os.path.join(data_dir, "postgres", "pgdata")
    configuration = os.path.join(pgdata, "postgresql.conf")
    with open(configuration) as handle:
        text = handle.read()
    socket_dir = os.path.join(data_dir, "postgres")
    text, count = re.subn(r"(?m)^unix_socket_directories = .*$", f"unix_socket_directories = '{socket_dir}'", text)
    if count != 1:
        raise RuntimeError(f"{configuration} names no unix_socket_directories")
    with open(configuration, "w") as handle:
        handle.write(text)
    os.chmod(data_dir, 0o755)


def tools(directory, wallet, service):
    """The scratch shell's `wallet` and `curl`."""
    os.makedirs(directory)
    environment = " ".join(f"{name}='{value}'" for name, value in
                           (("WALLET_DATA_DIR", service.data_dir), ("WALLET_LISTEN", f"127.0.0.1:{service.port}")))
    with open(os.path.join(directory, "wallet"), "w") as handle:
        handle.write("#!/bin/bash\n"
                     "for name in $(compgen -e | grep '^WALLET_' || true); do unset \"$name\"; done\n"
                     f"exec env {environment} '{wallet}' \"$@\"\n")
    real_curl = shutil.which("curl")
    if real_curl is None:
        raise RuntimeError("curl is not installed")
    with open(os.path.join(directory, "curl"), "w") as handle:
        handle.write("#!/bin/bash\n"
                     "# The documented address is the page's service.\n"
                     "args=()\n"
                     "for arg in \"$@\"; do\n"
                     f"    arg=${{arg//127.0.0.1:8080/127.0.0.1:{service.port}}}\n"
                     f"    arg=${{arg//localhost:8080/127.0.0.1:{service.port}}}\n"
                     "    args+=(\"$arg\")\n"
                     "done\n"
                     f"exec '{real_curl}' \"${{args[@]}}\"\n")
    for name in ("wallet", "curl"):
        os.chmod(os.path.join(directory, name), 0o755)


class Shell:
    """One bash for a page: variables and files live from example to example."""

    def __init__(self, directory, bin_dir, keys):
        environment = {name: value for name, value in os.environ.items() if not name.startswith("WALLET_")}
        environment.update(keys)
        environment["PATH"] = bin_dir + os.pathsep + environment.get("PATH", "/usr/bin:/bin")
        environment["HOME"] = directory
        self.directory = directory
        # A session of its own, so that a command that hangs is stopped
        # with everything it started.
        self.process = subprocess.Popen(["bash", "--norc", "--noprofile"], cwd=directory, env=environment,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        start_new_session=True)
        self.pending = b""
        self.count = 0

    def run(self, command):
        """(exit status, stdout, stderr) of one command, or None on a timeout."""
        self.count += 1
        out = os.path.join(self.directory, f".out{self.count}")
        err = os.path.join(self.directory, f".err{self.count}")
        marker = f"__example_done_{self.count}__"
        script = (f"{{\n{command}\n}} >'{out}' 2>'{err}' </dev/null\n"
                  f"echo \"{marker} $?\"\n")
        self.process.stdin.write(script.encode())
        self.process.stdin.flush()
        deadline = time.monotonic() + COMMAND_SECONDS
        status = None
        while status is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self.process.stdout], [], [], remaining)[0]:
                break
            chunk = os.read(self.process.stdout.fileno(), 4096)
            if not chunk:
                break    # the shell exited
            self.pending += chunk
            while b"\n" in self.pending and status is None:
                line, self.pending = self.pending.split(b"\n", 1)
                if line.startswith(marker.encode()):
                    status = int(line.split()[1])
        if status is None:
            self.kill()
            return None
        with open(out, encoding="utf-8", errors="replace") as handle:
            stdout = handle.read()
        with open(err, encoding="utf-8", errors="replace") as handle:
            stderr = handle.read()
        return status, stdout, stderr

    def kill(self):
        """Stops the shell and whatever it started."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=10)

    def close(self):
        """Ends the shell at its input's end, then stops whatever it left
        running in the background."""
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.kill()


def check_command(shell, page, number, command, expected):
    """A failure message, or None."""
    answer = shell.run(command)
    where = f"{os.path.relpath(page, REPO)}:{number}"
    if answer is None:
        return f"{where}: no answer within {COMMAND_SECONDS} s:\n    $ {command}"
    status, stdout, stderr = answer
    wanted_status = 0
    lines = list(expected or [])
    if lines and EXIT_LINE.match(lines[-1]):
        wanted_status = int(EXIT_LINE.match(lines.pop()).group(1))
    actual = [line.rstrip("\r").expandtabs().rstrip() for line in stdout.split("\n")]
    while actual and not actual[-1]:
        actual.pop()
    problems = []
    if status != wanted_status:
        problems.append(f"exit status {status}, not {wanted_status}")
    if expected is not None and not matches([line.rstrip() for line in lines], actual):
        problems.append("output differs")
    if not problems:
        return None
    report = [f"{where}: {', '.join(problems)}", f"    $ {command}"]
    if expected is not None:
        report += ["  expected:"] + [f"    # {line}" for line in lines]
    report += ["  got:"] + [f"    {line}" for line in actual]
    if stderr.strip():
        report += ["  stderr:"] + [f"    {line}" for line in stderr.rstrip().split("\n")[-20:]]
    return "\n".join(report)


def check_page(page, examples, wallet, template, keys, work):
    """(ran, skipped, failures) of one page."""
    runnable = [example for example in examples if example.skipped is None]
    skipped = len(examples) - len(runnable)
    if not runnable:
        return 0, skipped, []
    name = re.sub(r"[^A-Za-z0-9]+", "-", os.path.relpath(page, REPO))
    page_dir = os.path.join(work, name)
    os.makedirs(page_dir)
    data_dir = os.path.join(page_dir, "data")
    copy_database(template, data_dir)
    service = Service(wallet, data_dir, page_dir, "listening on")
    failures = []
    shell = None
    try:
        scratch = os.path.join(page_dir, "scratch")
        os.makedirs(scratch)
        os.symlink(os.path.join(REPO, "Scripts"), os.path.join(scratch, "Scripts"))
        bin_dir = os.path.join(page_dir, "bin")
        tools(bin_dir, wallet, service)
        found = re.search(r"psql: psql '([^']+)'", service.banner())
        if not found:
            raise RuntimeError("the banner printed no psql line")
        shell = Shell(scratch, bin_dir, dict(keys, WALLET_DATABASE_URL=found.group(1)))
        for example in runnable:
            for number, command, expected in example.commands:
                failure = check_command(shell, page, number, command, expected)
                if failure:
                    failures.append(failure)
                if shell.process.poll() is not None:
                    failures.append(f"{os.path.relpath(page, REPO)}:{number}: the page's shell stopped here; "
                                    "its later examples did not run")
                    return len(runnable), skipped, failures
    finally:
        if shell:
            shell.close()
        service.stop()
    return len(runnable), skipped, failures


def main():
    global COMMAND_SECONDS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--wallet", default=os.path.join(REPO, ".build/debug/wallet"))
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument("--command-seconds", type=int, default=COMMAND_SECONDS,
                        help="how long one command may take; the page stops at the first that takes longer")
    parser.add_argument("pages", nargs="*")
    arguments = parser.parse_args()
    COMMAND_SECONDS = arguments.command_seconds
    wallet = os.path.abspath(arguments.wallet)
    if not os.access(wallet, os.X_OK):
        sys.exit(f"check-doc-examples: no wallet binary at {wallet}")
    pages = [os.path.abspath(page) for page in arguments.pages] or \
        [os.path.join(REPO, "README.md")] + sorted(
            os.path.join(REPO, "docs", name) for name in os.listdir(os.path.join(REPO, "docs")) if name.endswith(".md"))
    started = time.monotonic()
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    work = tempfile.mkdtemp(prefix="wallet-doc-examples.", dir=base)
    os.chmod(work, 0o755)    # as root, PostgreSQL runs as `postgres`, which must reach it
    failures = []
    totals = [0, 0]
    try:
        parsed = {}
        for page in pages:
            parsed[page], problems = parse_page(page)
            failures += problems
        template, keys = (None, None)
        if any(example.skipped is None for examples in parsed.values() for example in examples):
            template, keys = make_template(wallet, work)
        for page, examples in parsed.items():
            page_started = time.monotonic()
            ran, skipped, page_failures = check_page(page, examples, wallet, template, keys, work)
            totals[0] += ran
            totals[1] += skipped
            failures += page_failures
            verdict = f"{len(page_failures)} mismatch(es)" if page_failures else "ok"
            commands = sum(len(example.commands) for example in examples if example.skipped is None)
            print(f"{os.path.relpath(page, REPO)}: ran {ran} ({commands} commands), skipped {skipped}: {verdict}"
                  f" ({time.monotonic() - page_started:.1f} s)")
    finally:
        if arguments.keep:
            print(f"check-doc-examples: kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    for failure in failures:
        print(failure, file=sys.stderr)
    print(f"check-doc-examples: ran {totals[0]} example(s), skipped {totals[1]}, "
          f"{len(failures)} mismatch(es), {time.monotonic() - started:.1f} s")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
