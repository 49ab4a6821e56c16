#!/usr/bin/python3
"""End-to-end browser tests of the support console (/admin).

Run: python3 Tests/Browser/console_test.py --wallet .build/debug/wallet [--screenshots DIR]

It makes a temp dir, starts `wallet serve` there on its embedded development
database and a free loopback port, makes API keys with `wallet keys create`
(an admin key, a credit-only key and a spare admin key that a test revokes;
the development console key it prints on the first start signs in too),
writes real data through the HTTP API (credits and debits, a ledger longer
than one page, a debit whose reason and metadata are HTML), signs in with
headless Chromium through Selenium and checks the pages against the ledger
(read with psql over the database's unix socket). Then it seeds 10,000
players and 200,000 entries (Tests/Browser/seed.sql) and checks that every
page still answers within the service's request timeout, that the overview's
per-day table matches the ledger, and that `wallet check` stays clean.

Each test prints PASS or FAIL with why; the exit status is 1 if any failed.
Every wait has a deadline, and the whole run is bounded (RUN_DEADLINE_SECONDS);
the service, the browsers and the temp dir are always cleaned up.

Needs the Debian packages chromium, chromium-driver and python3-selenium,
and postgresql-15 (the embedded database and psql).
"""
import argparse
import glob
import html.parser
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
import uuid

try:
    import selenium  # noqa: F401
except ImportError:
    # python3-selenium is a Debian package: run under the system Python when
    # another python3 (a pyenv shim, a venv) comes first on PATH.
    if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") and os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    raise

from selenium import webdriver
from selenium.common.exceptions import (NoAlertPresentException, TimeoutException,
                                        UnexpectedAlertPresentException, WebDriverException)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

HERE = os.path.dirname(os.path.abspath(__file__))
SEED_SQL = os.path.join(HERE, "seed.sql")

RUN_DEADLINE_SECONDS = 300          # the whole run, cleanup included
SERVER_START_SECONDS = 90           # first start runs initdb
HTTP_TIMEOUT_SECONDS = 15
REQUEST_TIMEOUT_SECONDS = 10        # the service's default WALLET_REQUEST_TIMEOUT_SECONDS
PAGE_WAIT_SECONDS = 10
REVOKE_DEADLINE_SECONDS = 5
WIDTH, HEIGHT = 1280, 900
PHONE_WIDTH, PHONE_HEIGHT = 390, 844

COOKIE = "wallet_admin_session"
CSP = "default-src 'self'; frame-ancestors 'none'"
HOSTILE_REASON = "<script>alert(1)</script>"
HOSTILE_METADATA = "<img src=x onerror=alert(1)>"

# Players and flowNOs the API data uses.
PLAYER = "player-1001"
PLAYER_FLOW_NOS = ["2000000100000001", "2000000100000002"]
ODD_PLAYER = "team:42@eu"           # characters that may be percent-encoded in a path
PAGER = "pager-2001"
PAGER_DEBITS = 120
HOSTILE_PLAYER = "xss-3001"
SEEDED_PLAYER = "seed-user-00042"
SEEDED_REFUNDED_PLAYER = "seed-user-00050"


class Failure(Exception):
    """A test's expectation that did not hold."""


class RunDeadline(BaseException):
    """The whole run took too long."""


def check(condition, message):
    if not condition:
        raise Failure(message)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(description, predicate, seconds, interval=0.1):
    """Polls predicate until it returns something truthy, or fails."""
    deadline = time.monotonic() + seconds
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise Failure(f"timed out after {seconds}s waiting for {description}")
        # The poll's interval: the predicate is what is waited for.
        time.sleep(interval)


# --- HTTP --------------------------------------------------------------------

class Answer:
    def __init__(self, status, headers, body, seconds):
        self.status = status
        self.headers = headers
        self.body = body
        self.seconds = seconds

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")

    def header(self, name):
        return self.headers.get(name)

    def set_cookies(self):
        return self.headers.get_all("Set-Cookie") or []

    def location_path(self, base):
        location = self.headers.get("Location")
        if location is None:
            return None
        return urllib.parse.urlsplit(urllib.parse.urljoin(base + "/", location)).path

    def h1(self):
        match = re.search(r"<h1[^>]*>(.*?)</h1>", self.text, re.S | re.I)
        return html_text(match.group(1)) if match else None


class NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


OPENER = urllib.request.build_opener(NoRedirects)


def html_text(fragment):
    """The text of an HTML fragment, tags dropped and entities decoded."""
    class Text(html.parser.HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.parts = []

        def handle_data(self, data):
            self.parts.append(data)
    parser = Text()
    parser.feed(fragment)
    parser.close()
    return " ".join("".join(parser.parts).split())


def request(base, method, path, *, cookie=None, form=None, json_body=None, headers=None,
            timeout=HTTP_TIMEOUT_SECONDS):
    """One request, redirects not followed; any status is an Answer."""
    all_headers = dict(headers or {})
    data = None
    if form is not None:
        data = urllib.parse.urlencode(form).encode()
        all_headers["Content-Type"] = "application/x-www-form-urlencoded"
        all_headers.setdefault("Origin", base)
    elif json_body is not None:
        data = json.dumps(json_body).encode()
        all_headers["Content-Type"] = "application/json"
    if cookie is not None:
        all_headers["Cookie"] = f"{COOKIE}={cookie}"
    req = urllib.request.Request(base + path, data=data, method=method, headers=all_headers)
    started = time.monotonic()
    try:
        with OPENER.open(req, timeout=timeout) as response:
            body = response.read()
            return Answer(response.status, response.headers, body, time.monotonic() - started)
    except urllib.error.HTTPError as error:
        body = error.read()
        return Answer(error.code, error.headers, body, time.monotonic() - started)


def error_paragraph(text):
    """The text of the page's <p class="error" role="alert">, if it has one."""
    for match in re.finditer(r"<p\b([^>]*)>(.*?)</p>", text, re.S | re.I):
        attributes = match.group(1)
        if re.search(r'class="[^"]*\berror\b', attributes) and re.search(r'role="alert"', attributes):
            return html_text(match.group(2)) or None
    return None


def login_form(text):
    return any(f["action"] == "/admin/login" and f["method"] == "post" and "api_key" in f["inputs"]
               for f in forms_of(text))


def header_problems(name, answer):
    """What is missing from the security headers every console answer carries."""
    problems = []
    for header, value in (("Content-Security-Policy", CSP), ("X-Content-Type-Options", "nosniff"),
                          ("Referrer-Policy", "no-referrer")):
        got = answer.header(header)
        if got is None or got.strip() != value:
            problems.append(f"{name}: expected {header}: {value!r}, got {got!r}")
    return problems


def parse_set_cookie(value):
    """(name, value, {attribute lowercased: value or True})."""
    parts = [p.strip() for p in value.split(";")]
    name, _, cookie_value = parts[0].partition("=")
    attributes = {}
    for part in parts[1:]:
        if not part:
            continue
        key, eq, attribute_value = part.partition("=")
        attributes[key.strip().lower()] = attribute_value.strip() if eq else True
    return name.strip(), cookie_value.strip(), attributes


def session_cookie(answer):
    for value in answer.set_cookies():
        name, cookie_value, attributes = parse_set_cookie(value)
        if name == COOKIE:
            return cookie_value, attributes, value
    return None


class FormInputs(html.parser.HTMLParser):
    """Every <form>'s action, method and inputs, in document order."""
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.forms = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            self.forms.append({"action": attrs.get("action"), "method": (attrs.get("method") or "get").lower(),
                               "inputs": {}})
        elif tag == "input" and self.forms and attrs.get("name"):
            self.forms[-1]["inputs"][attrs["name"]] = attrs.get("value", "")


def forms_of(text):
    parser = FormInputs()
    parser.feed(text)
    parser.close()
    return parser.forms


# --- The service ---------------------------------------------------------------

class WalletServer:
    """`wallet serve` on its embedded database in a temp dir."""

    def __init__(self, wallet, work):
        self.wallet = wallet
        self.work = work
        self.data = os.path.join(work, "data")
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process = None
        self.out_path = os.path.join(work, "serve.out")
        self.err_path = os.path.join(work, "serve.err")
        self.app_key = None
        self.game_key = None
        self.console_key = None
        self.env = {k: v for k, v in os.environ.items() if k != "WALLET_DATABASE_URL"}
        self.env.update(WALLET_DATA_DIR=self.data, WALLET_LISTEN=f"127.0.0.1:{self.port}", WALLET_LOG_LEVEL="error",
                        WALLET_WEBHOOKS_ALLOW_HTTP="true", WALLET_WEBHOOKS_FIRST_RETRY_SECONDS="1")

    def start(self):
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.process = subprocess.Popen([self.wallet, "serve"], stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                            env=self.env, cwd=self.work)

        def keys_printed():
            if self.process.poll() is not None:
                raise Failure(f"wallet serve exited with {self.process.returncode}: {self.read(self.err_path)[-2000:]}")
            text = self.read(self.out_path)
            return "support-console (console):" in text and text
        text = wait_until("wallet serve to print its development keys", keys_printed, SERVER_START_SECONDS)
        self.app_key = re.search(r"app-backend \(credit, read\):\s*(\S+)", text).group(1)
        self.game_key = re.search(r"game-server \(debit, grant, read\):\s*(\S+)", text).group(1)
        self.console_key = re.search(r"support-console \(console\):\s*(\S+)", text).group(1)
        wait_until("/healthz to answer", self.healthy, 30)

    def healthy(self):
        try:
            return request(self.base, "GET", "/healthz", timeout=2).status == 200
        except OSError:
            return False

    @staticmethod
    def read(path):
        try:
            with open(path, "r", errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def create_key(self, name, scopes):
        result = subprocess.run([self.wallet, "keys", "create", "--name", name, "--scopes", scopes],
                                env=self.env, cwd=self.work, capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            raise Failure(f"wallet keys create --name {name} failed: {result.stderr.strip()}")
        return result.stdout.strip().splitlines()[-1].strip()

    def wallet_check(self):
        return subprocess.run([self.wallet, "check", "--full"], env=self.env, cwd=self.work, capture_output=True, text=True,
                              timeout=120)

    def conninfo(self):
        sockets = glob.glob(os.path.join(self.data, "postgres", ".s.PGSQL.*"))
        sockets += glob.glob(os.path.join(tempfile.gettempdir(), "wallet-pg-*", ".s.PGSQL.*")) if not sockets else []
        if not sockets:
            raise Failure(f"no PostgreSQL socket under {self.data}/postgres")
        directory, name = os.path.split(sockets[0])
        port = name.rsplit(".", 1)[1]
        return f"host={directory} port={port} user=postgres dbname=wallet"

    def psql(self, sql, timeout=60):
        """Rows of a query, each a list of text fields."""
        result = subprocess.run(["psql", "-X", "-q", "-At", "-F", "\t", "-v", "ON_ERROR_STOP=1", self.conninfo(),
                                 "-c", sql], capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise Failure(f"psql failed: {result.stderr.strip()}\n{sql}")
        return [line.split("\t") for line in result.stdout.splitlines() if line]

    def psql_file(self, path, timeout=90):
        result = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", self.conninfo(), "-f", path],
                                capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise Failure(f"psql -f {path} failed: {result.stderr.strip()}")
        return result.stdout

    def logged_errors(self):
        return [line for line in self.read(self.err_path).splitlines() if '"level":"error"' in line]

    def stop(self):
        """Stops the service (which stops its database); returns its exit status."""
        if self.process is None or self.process.poll() is not None:
            status = None if self.process is None else self.process.returncode
        else:
            self.process.send_signal(signal.SIGTERM)
            try:
                status = self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                status = self.process.wait(timeout=10)
        self.stop_orphaned_database()
        return status

    def stop_orphaned_database(self):
        """A service killed hard leaves its PostgreSQL running; stop that one."""
        pgdata = os.path.join(self.data, "postgres", "pgdata")
        if not os.path.exists(os.path.join(pgdata, "postmaster.pid")):
            return
        binaries = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
        pg_ctl = shutil.which("pg_ctl") or (binaries[-1] if binaries else None)
        if pg_ctl is None:
            return
        command = [pg_ctl, "-D", pgdata, "-m", "immediate", "-w", "-t", "20", "stop"]
        if os.geteuid() == 0:
            command = ["/usr/sbin/runuser", "-u", "postgres", "--"] + command
        subprocess.run(command, capture_output=True, timeout=30)


# --- The browser ----------------------------------------------------------------

def new_browser(extra_arguments=()):
    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     f"--window-size={WIDTH},{HEIGHT}", "--disable-extensions", "--no-first-run",
                     *extra_arguments):
        options.add_argument(argument)
    if os.path.exists("/usr/bin/chromium"):
        options.binary_location = "/usr/bin/chromium"
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(PAGE_WAIT_SECONDS + 5)
    driver.set_script_timeout(PAGE_WAIT_SECONDS)
    driver.implicitly_wait(0)
    set_viewport(driver, WIDTH, HEIGHT)
    return driver


def set_viewport(driver, width, height):
    """Makes the page's viewport exactly width x height CSS pixels (a
    headless window's size includes no browser chrome, but is not the
    viewport either)."""
    driver.set_window_size(width, height)
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})


def path_of(driver):
    return urllib.parse.urlsplit(driver.current_url).path


def wait_for(driver, description, condition, seconds=PAGE_WAIT_SECONDS):
    try:
        return WebDriverWait(driver, seconds, poll_frequency=0.1).until(lambda d: condition(d))
    except TimeoutException:
        raise Failure(f"timed out after {seconds}s waiting for {description} (at {driver.current_url})") from None


def element(driver, css):
    found = driver.find_elements(By.CSS_SELECTOR, css)
    return found[0] if found else None


def text_of(driver, css):
    found = element(driver, css)
    return found.text if found is not None else None


def browser_sign_in(driver, base, key):
    """Signs in through the form; answers the path it lands on."""
    driver.get(base + "/admin/login")
    field = element(driver, "form[method=post][action='/admin/login'] input#api-key[name=api_key][type=password]")
    check(field is not None, "GET /admin/login: expected <form method=post action=/admin/login> with "
                             "<input id=api-key name=api_key type=password>; not found")
    check(field.get_attribute("autocomplete") == "off",
          f"GET /admin/login: the key field has autocomplete={field.get_attribute('autocomplete')!r}, expected 'off'")
    label = element(driver, "label[for=api-key]")
    check(label is not None and label.text.strip() == "API key",
          f"GET /admin/login: expected <label for=api-key>API key</label>, got {label.text if label else None!r}")
    field.clear()
    field.send_keys(key)
    button = element(driver, "form[action='/admin/login'] button[type=submit]")
    check(button is not None and button.text.strip() == "Sign in",
          f"GET /admin/login: expected <button type=submit>Sign in</button>, got {button.text if button else None!r}")
    login_page = driver.find_element(By.TAG_NAME, "html")
    button.click()
    wait_for(driver, "the sign-in form to be answered", lambda d: is_stale(login_page))
    return path_of(driver)


def is_stale(web_element):
    try:
        web_element.tag_name
        return False
    except WebDriverException:
        return True


def click_and_wait(driver, web_element, description):
    page = driver.find_element(By.TAG_NAME, "html")
    web_element.click()
    wait_for(driver, description, lambda d: is_stale(page))


def submit_search(driver, query):
    field = element(driver, "form[role=search][method=get][action='/admin/search'] input#search[name=q][type=search]")
    check(field is not None, f"{path_of(driver)}: expected the search form <form role=search method=get "
                             "action=/admin/search> with <input id=search name=q type=search>; not found")
    field.clear()
    field.send_keys(query)
    button = element(driver, "form[role=search] button[type=submit]")
    check(button is not None, f"{path_of(driver)}: the search form has no submit button")
    click_and_wait(driver, button, f"the search for {query!r} to be answered")


def table_rows(driver, css):
    """The text of each body row's cells (th and td), read in one script."""
    return driver.execute_script("""
        const table = document.querySelector(arguments[0]);
        if (!table) return null;
        const rows = table.tBodies.length ? Array.from(table.tBodies).flatMap(b => Array.from(b.rows))
                                          : Array.from(table.rows).slice(1);
        return rows.map(r => Array.from(r.cells).map(c => [c.tagName.toLowerCase(), c.textContent.trim(),
                                                           c.getAttribute('scope') || '', c.className]));
    """, css)


def no_alert(driver):
    try:
        alert = driver.switch_to.alert
        text = alert.text
        alert.dismiss()
        return f"an alert fired: {text!r}"
    except NoAlertPresentException:
        return None


# --- The tests -------------------------------------------------------------------

class Suite:
    def __init__(self, service, screenshots):
        self.service = service
        self.base = service.base
        self.screenshots = screenshots
        self.driver = None
        self.second_driver = None
        self.keys = {}
        self.flow_no_of_pager = None
        self.seeded = False
        self.notes = []

    # Helpers shared by tests.

    def api(self, method, path, key, body, idempotency_key=None):
        headers = {"Authorization": f"Bearer {key}"}
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        answer = request(self.base, method, path, json_body=body, headers=headers)
        if answer.status not in (200, 201):
            raise Failure(f"{method} {path} {body}: status {answer.status}: {answer.text[:500]}")
        return json.loads(answer.text)

    def credit(self, user_id, flow_no, product_id):
        return self.api("POST", "/v1/credits", self.service.app_key,
                        {"flow_no": flow_no, "user_id": user_id, "product_id": product_id})

    def debit(self, user_id, amount, reason=None, metadata=None):
        body = {"user_id": user_id, "currency": "coin", "amount": amount}
        if reason is not None:
            body["reason"] = reason
        if metadata is not None:
            body["metadata"] = metadata
        return self.api("POST", "/v1/debits", self.service.game_key, body, idempotency_key=str(uuid.uuid4()))

    def http_sign_in(self, key):
        answer = request(self.base, "POST", "/admin/login", form={"api_key": key})
        check(answer.status == 303, f"POST /admin/login (admin key): expected 303, got {answer.status}")
        found = session_cookie(answer)
        check(found is not None and found[0], f"POST /admin/login: expected Set-Cookie {COOKIE}, got "
                                              f"{answer.set_cookies()}")
        return found[0]

    def get(self, path, cookie=None):
        return request(self.base, "GET", path, cookie=cookie)

    def coins_per_day(self, days):
        """[day, credited, debited, refunded] per UTC day of the window, from the ledger."""
        return self.service.psql(f"""
            WITH days AS (
                SELECT d::date AS day FROM generate_series((now() AT TIME ZONE 'UTC')::date - {days - 1},
                                                           (now() AT TIME ZONE 'UTC')::date, INTERVAL '1 day') d
            ), sums AS (
                SELECT (e.created_at AT TIME ZONE 'UTC')::date AS day,
                       coalesce(sum(e.amount) FILTER (WHERE e.kind = 'credit'), 0) AS credited,
                       coalesce(-sum(e.amount) FILTER (WHERE e.kind = 'debit'), 0) AS debited,
                       coalesce(-sum(e.amount) FILTER (WHERE e.kind = 'refund'), 0) AS refunded
                FROM wallet.entries e
                WHERE e.created_at >= ((now() AT TIME ZONE 'UTC')::date - {days - 1})::timestamp AT TIME ZONE 'UTC'
                GROUP BY 1
            )
            SELECT to_char(d.day, 'YYYY-MM-DD'), coalesce(s.credited, 0), coalesce(s.debited, 0),
                   coalesce(s.refunded, 0)
            FROM days d LEFT JOIN sums s ON s.day = d.day ORDER BY d.day""")

    def browser(self):
        if self.driver is None:
            self.driver = new_browser()
        return self.driver

    def signed_in_browser(self):
        driver = self.browser()
        driver.get(self.base + "/admin")
        if path_of(driver) != "/admin":
            landed = browser_sign_in(driver, self.base, self.keys["admin"])
            check(landed == "/admin", f"signing in with the admin key landed on {landed}, expected /admin")
        return driver

    # Setup: keys and API data (not a test, but reported like one).

    def setup_data(self):
        self.keys["admin"] = self.service.create_key("console-admin", "admin")
        self.keys["credit"] = self.service.create_key("console-credit-only", "credit")
        self.keys["spare"] = self.service.create_key("console-spare", "admin")
        self.keys["spare-2"] = self.service.create_key("console-spare-2", "read")
        self.credit(PLAYER, PLAYER_FLOW_NOS[0], "guodong1200")
        self.debit(PLAYER, 300, reason="sword", metadata={"item": "iron-sword", "level": 3})
        self.credit(PLAYER, PLAYER_FLOW_NOS[1], "guodong600")
        self.debit(PLAYER, 150, reason="potion")
        self.debit(PLAYER, 75, reason="gift", metadata={"to": "player-1002"})
        self.credit(ODD_PLAYER, "2000000100000003", "guodong600")
        self.flow_no_of_pager = "2000000200000001"
        self.credit(PAGER, self.flow_no_of_pager, "guodong5000")
        for i in range(PAGER_DEBITS):
            self.debit(PAGER, 1 + i % 7, reason=f"round {i}")
        self.credit(HOSTILE_PLAYER, "2000000300000001", "guodong1200")
        self.debit(HOSTILE_PLAYER, 100, reason=HOSTILE_REASON, metadata={"note": HOSTILE_METADATA})
        count = int(self.service.psql(f"SELECT count(*) FROM wallet.entries WHERE user_id = '{PAGER}'")[0][0])
        check(count == PAGER_DEBITS + 1, f"{PAGER} has {count} entries, expected {PAGER_DEBITS + 1}")

    # The tests.

    def test_pages_need_a_session(self):
        for path in ("/admin", "/admin/audit", "/admin/keys", "/admin/webhooks", "/admin/unclaimed"):
            answer = self.get(path)
            check(answer.status in (302, 303), f"GET {path} without a session: expected 303, got {answer.status}")
            landed = answer.location_path(self.base)
            check(landed == "/admin/login", f"GET {path} without a session: expected Location /admin/login, "
                                            f"got {answer.header('Location')!r}")

    def test_security_headers(self):
        cookie = self.http_sign_in(self.keys["admin"])
        answers = {
            "GET /admin/login": self.get("/admin/login"),
            "GET /admin?days=30": self.get("/admin?days=30", cookie),
            "GET /admin/search?q=no-such-thing (404)": self.get("/admin/search?q=no-such-thing-42", cookie),
            "GET /admin without a session (redirect)": self.get("/admin"),
            "GET /admin/search?q=player (redirect)": self.get("/admin/search?q=" + PLAYER, cookie),
        }
        expected_status = {"GET /admin/login": (200,), "GET /admin?days=30": (200,),
                           "GET /admin/search?q=no-such-thing (404)": (404,),
                           "GET /admin without a session (redirect)": (302, 303),
                           "GET /admin/search?q=player (redirect)": (302, 303)}
        problems = []
        for name, answer in answers.items():
            if answer.status not in expected_status[name]:
                problems.append(f"{name}: status {answer.status}, expected {expected_status[name]}")
            problems += header_problems(name, answer)
        answer = request(self.base, "POST", "/admin/login", form={"api_key": self.keys["admin"]})
        found = session_cookie(answer)
        if found is None:
            problems.append(f"POST /admin/login: no {COOKIE} cookie set")
        else:
            _, attributes, raw = found
            if attributes.get("httponly") is not True:
                problems.append(f"session cookie lacks HttpOnly: {raw!r}")
            if str(attributes.get("samesite", "")).lower() != "strict":
                problems.append(f"session cookie lacks SameSite=Strict: {raw!r}")
            if attributes.get("path") != "/admin":
                problems.append(f"session cookie Path is {attributes.get('path')!r}, expected '/admin': {raw!r}")
            if "secure" in attributes:
                problems.append(f"session cookie is Secure on loopback (the browser would drop it): {raw!r}")
        problems += header_problems("POST /admin/login (303)", answer)
        refused = request(self.base, "POST", "/admin/login", form={"api_key": self.keys["credit"]})
        problems += header_problems(f"POST /admin/login with a credit-only key ({refused.status})", refused)
        check(not problems, "\n      ".join(problems))

    def test_sign_in(self):
        driver = self.browser()
        driver.delete_all_cookies()
        landed = browser_sign_in(driver, self.base, self.keys["credit"])
        check(landed == "/admin/login", f"signing in with a credit-only key landed on {landed}, expected the "
                                        "form again at /admin/login")
        check(element(driver, "input#api-key") is not None, "after a refused sign-in the form is not shown again")
        message = text_of(driver, "p.error[role=alert]")
        check(message, "after a refused sign-in: expected <p class=error role=alert> with a message, got none")
        cookies = [c["name"] for c in driver.get_cookies()]
        check(COOKIE not in cookies, f"a refused sign-in set a session cookie: {cookies}")
        answer = request(self.base, "POST", "/admin/login", form={"api_key": self.keys["credit"]})
        check(answer.status == 403, f"POST /admin/login with a credit-only key: expected 403, got {answer.status}")
        check(session_cookie(answer) is None or not session_cookie(answer)[0],
              "POST /admin/login with a credit-only key set a session cookie")
        check(error_paragraph(answer.text) and login_form(answer.text),
              "POST /admin/login with a credit-only key: expected the form again with <p class=error role=alert>")
        answer = request(self.base, "POST", "/admin/login", form={"api_key": "wk_not-a-key-at-all"})
        check(answer.status == 401, f"POST /admin/login with an unknown key: expected 401, got {answer.status}")
        check(error_paragraph(answer.text) and login_form(answer.text),
              "POST /admin/login with an unknown key: expected the form again with <p class=error role=alert>")
        check(session_cookie(answer) is None, "POST /admin/login with an unknown key set a session cookie")
        self.notes.append(f"refused sign-in message: {message!r}")

        landed = browser_sign_in(driver, self.base, self.keys["admin"])
        check(landed == "/admin", f"signing in with the admin key landed on {landed}, expected /admin")
        check(COOKIE in [c["name"] for c in driver.get_cookies()], "signed in, but no session cookie in the browser")
        check(text_of(driver, "h1"), "the overview has no <h1>")
        for href, name in (("/admin", "Overview"), ("/admin/audit", "Audit"), ("/admin/keys", "Keys")):
            link = element(driver, f"header a[href='{href}']")
            check(link is not None and link.text.strip() == name,
                  f"GET /admin: expected <header> link <a href={href}>{name}</a>, got "
                  f"{link.text if link is not None else None!r}")
        logout = element(driver, "form[method=post][action='/admin/logout'] input[type=hidden][name=csrf]")
        check(logout is not None, "GET /admin: expected <form method=post action=/admin/logout> with a hidden csrf input")
        sign_out = element(driver, "form[action='/admin/logout'] button")
        check(sign_out is not None and sign_out.text.strip() == "Sign out",
              f"GET /admin: the logout button reads {sign_out.text if sign_out else None!r}, expected 'Sign out'")
        check(element(driver, "form[role=search]") is not None, "GET /admin: no <form role=search>")

    def test_console_key(self):
        """The development console key, as a support agent's: the console, and no /v1 route."""
        driver = self.browser()
        driver.delete_all_cookies()
        landed = browser_sign_in(driver, self.base, self.service.console_key)
        check(landed == "/admin", f"signing in with the console key landed on {landed}, expected /admin")
        signed_in_as = text_of(driver, "form.signout span")
        check(signed_in_as == "Signed in as support-console",
              f"GET /admin: the header reads {signed_in_as!r}, expected 'Signed in as support-console'")
        driver.get(self.base + f"/admin/users/{PLAYER}")
        check(element(driver, "table#ledger") is not None, f"/admin/users/{PLAYER} with the console key: no table#ledger")
        driver.get(self.base + "/admin/keys")
        check(element(driver, "table#keys tr[data-key='support-console']") is not None,
              "GET /admin/keys: no <tr data-key='support-console'>")
        headers = {"Authorization": f"Bearer {self.service.console_key}", "Idempotency-Key": str(uuid.uuid4())}
        for method, path, body in (("GET", f"/v1/wallets/{PLAYER}", None),
                                   ("POST", "/v1/debits", {"user_id": PLAYER, "amount": 1}),
                                   ("POST", "/v1/credits", {"user_id": PLAYER, "flow_no": "2000000900000001",
                                                            "product_id": "guodong600"})):
            answer = request(self.base, method, path, json_body=body, headers=headers)
            check(answer.status == 403, f"{method} {path} with the console key: expected 403, got {answer.status}")
        driver.delete_all_cookies()

    def test_search(self):
        driver = self.signed_in_browser()
        submit_search(driver, PLAYER)
        check(path_of(driver) == f"/admin/users/{PLAYER}",
              f"search {PLAYER!r}: expected to land on /admin/users/{PLAYER}, landed on {path_of(driver)}")
        check(PLAYER in (text_of(driver, "h1") or ""), f"/admin/users/{PLAYER}: <h1> {text_of(driver, 'h1')!r} "
                                                       "does not name the player")
        for css in ("table#balances", "table#ledger", "table#credits", "table#audit"):
            check(element(driver, css) is not None, f"/admin/users/{PLAYER}: no <{css.replace('#', ' id=')}>")
        rows = table_rows(driver, "table#ledger") or []
        check(len(rows) == 5, f"/admin/users/{PLAYER}: expected 5 ledger rows, got {len(rows)}")
        credits_rows = table_rows(driver, "table#credits") or []
        check(len(credits_rows) == 2, f"/admin/users/{PLAYER}: expected 2 rows in #credits, got {len(credits_rows)}")
        # The lots with coins left, as the database has them, and the
        # balance's paid and free coins, which they add up to.
        lots = self.service.psql(f"""
            SELECT id, remaining, paid FROM wallet.lots WHERE user_id = '{PLAYER}' AND open ORDER BY currency,
                   expires_at NULLS LAST, id""")
        shown_lots = table_rows(driver, "table#lots") or []
        check([row[0][1] for row in shown_lots] == [lot[0] for lot in lots],
              f"/admin/users/{PLAYER}: #lots shows {[row[0][1] for row in shown_lots]}, the database has "
              f"{[lot[0] for lot in lots]}")
        check(len(lots) > 0, f"{PLAYER} has no lot with coins left")
        coin = next((row for row in table_rows(driver, "table#balances") or [] if row[0][1] == "coin"), None)
        paid = sum(int(lot[1]) for lot in lots if lot[2] == "t")
        free = sum(int(lot[1]) for lot in lots if lot[2] == "f")
        check(coin is not None and coin[4][1] == str(paid) and coin[5][1] == str(free),
              f"/admin/users/{PLAYER}: #balances coin row {coin} does not show paid {paid} and free {free}")

        submit_search(driver, ODD_PLAYER)
        landed = urllib.parse.unquote(path_of(driver))
        check(landed == f"/admin/users/{ODD_PLAYER}",
              f"search {ODD_PLAYER!r}: expected /admin/users/{urllib.parse.quote(ODD_PLAYER, safe='')}, "
              f"landed on {path_of(driver)}")
        check(ODD_PLAYER in (text_of(driver, "h1") or ""), f"{path_of(driver)}: <h1> does not name {ODD_PLAYER}")

        flow_no = PLAYER_FLOW_NOS[0]
        submit_search(driver, flow_no)
        check(path_of(driver) == f"/admin/credits/{flow_no}",
              f"search {flow_no!r}: expected /admin/credits/{flow_no}, landed on {path_of(driver)}")
        check(flow_no in (text_of(driver, "h1") or ""), f"/admin/credits/{flow_no}: <h1> does not name the flowNO")
        for css in ("dl#credit", "table#refunds", "table#notifications"):
            check(element(driver, css) is not None, f"/admin/credits/{flow_no}: no {css}")

        submit_search(driver, "nobody-at-all-9999")
        check((text_of(driver, "h1") or "").strip() == "Nothing found",
              f"search for an unknown id: expected <h1>Nothing found</h1>, got {text_of(driver, 'h1')!r}")
        cookie = next((c["value"] for c in driver.get_cookies() if c["name"] == COOKIE), None)
        check(cookie, "no session cookie in the browser")
        answer = self.get("/admin/search?q=nobody-at-all-9999", cookie)
        check(answer.status == 404, f"GET /admin/search?q=nobody-at-all-9999: expected 404, got {answer.status}")
        check(answer.h1() == "Nothing found", f"GET /admin/search (nothing): <h1> is {answer.h1()!r}")
        answer = self.get("/admin/users/nobody-at-all-9999", cookie)
        check(answer.status == 404, f"GET /admin/users/nobody-at-all-9999: expected 404, got {answer.status}")

    def test_ledger_paging(self):
        driver = self.signed_in_browser()
        driver.get(f"{self.base}/admin/users/{PAGER}")
        seen, pages = [], 0
        while True:
            pages += 1
            check(pages <= 10, f"/admin/users/{PAGER}: more than 10 pages for {PAGER_DEBITS + 1} entries")
            rows = driver.execute_script("""
                const t = document.querySelector('table#ledger');
                if (!t) return null;
                return Array.from(t.tBodies).flatMap(b => Array.from(b.rows)).map(r => {
                    const c = r.cells[0];
                    return [c ? c.className : '', c ? c.tagName.toLowerCase() : '', c ? c.textContent.trim() : ''];
                });
            """)
            check(rows is not None, f"{driver.current_url}: no <table id=ledger>")
            check(0 < len(rows) <= 50, f"{driver.current_url}: {len(rows)} ledger rows, expected 1 to 50")
            for class_name, tag, text in rows:
                check(tag == "td" and "entry-id" in class_name.split(),
                      f"{driver.current_url}: a ledger row's first cell is <{tag} class={class_name!r}>, "
                      "expected <td class=entry-id>")
                check(re.fullmatch(r"\d+", text), f"{driver.current_url}: entry id cell {text!r} is not an integer")
                seen.append(int(text))
            link = element(driver, "a#next-page")
            if link is None:
                break
            check(link.get_attribute("rel") == "next" and link.text.strip() == "Older entries",
                  f"{driver.current_url}: next-page link is rel={link.get_attribute('rel')!r} "
                  f"text={link.text!r}, expected rel=next, 'Older entries'")
            check(len(rows) == 50, f"{driver.current_url}: a next-page link after only {len(rows)} rows")
            click_and_wait(driver, link, "the next ledger page")
        check(all(a > b for a, b in zip(seen, seen[1:])), f"entry ids are not strictly decreasing: {seen}")
        check(len(set(seen)) == len(seen), "entry ids repeat across pages")
        in_db = [int(r[0]) for r in self.service.psql(
            f"SELECT id FROM wallet.entries WHERE user_id = '{PAGER}' ORDER BY id DESC")]
        cookie = next((c["value"] for c in driver.get_cookies() if c["name"] == COOKIE), None)
        for path in (f"/admin/users/{PAGER}?cursor=not-a-cursor", f"/admin/users/{PAGER}?cursor=-1",
                     "/admin/audit?cursor=%00%ff", "/admin?days=5", "/admin?days=abc"):
            answer = self.get(path, cookie)
            check(answer.status < 500, f"GET {path}: status {answer.status}; a bad parameter should not be a 5xx")
        check(seen == in_db, f"the pages list {len(seen)} entries, the database {len(in_db)}; "
                             f"missing {sorted(set(in_db) - set(seen))[:10]}, extra {sorted(set(seen) - set(in_db))[:10]}")
        self.notes.append(f"ledger of {PAGER}: {len(seen)} entries over {pages} pages")

    def test_hostile_text_stays_text(self):
        driver = self.signed_in_browser()
        try:
            driver.get(f"{self.base}/admin/users/{HOSTILE_PLAYER}")
            # Loaded whole: a script in the page, or an image's error handler,
            # would have run by now.
            wait_until("the page to finish loading",
                       lambda: driver.execute_script("return document.readyState") == "complete", 10)
            fired = no_alert(driver)
            check(fired is None, f"/admin/users/{HOSTILE_PLAYER}: {fired}")
            body = driver.find_element(By.TAG_NAME, "body").text
        except UnexpectedAlertPresentException as error:
            raise Failure(f"/admin/users/{HOSTILE_PLAYER}: an alert fired ({error.alert_text!r})") from None
        check(HOSTILE_REASON in body, f"/admin/users/{HOSTILE_PLAYER}: the reason {HOSTILE_REASON!r} is not "
                                      "shown as text")
        check(HOSTILE_METADATA in body, f"/admin/users/{HOSTILE_PLAYER}: the metadata {HOSTILE_METADATA!r} is not "
                                        "shown as text")
        counts = driver.execute_script("""
            return {script: document.getElementsByTagName('script').length,
                    img: document.getElementsByTagName('img').length,
                    handlers: Array.from(document.querySelectorAll('*')).filter(e =>
                        Array.from(e.attributes).some(a => a.name.toLowerCase().startsWith('on'))).length,
                    iframe: document.getElementsByTagName('iframe').length};
        """)
        check(counts == {"script": 0, "img": 0, "handlers": 0, "iframe": 0},
              f"/admin/users/{HOSTILE_PLAYER}: elements the console does not render are in the DOM: {counts}")
        ledger_text = driver.execute_script(
            "const t = document.querySelector('table#ledger'); return t ? t.textContent : ''")
        check(HOSTILE_REASON in ledger_text and HOSTILE_METADATA in ledger_text,
              f"/admin/users/{HOSTILE_PLAYER}: the hostile reason and metadata are not in the ledger table")

    def test_revoke_key_ends_its_sessions(self):
        driver = self.signed_in_browser()
        self.second_driver = second = new_browser()
        landed = browser_sign_in(second, self.base, self.keys["spare"])
        check(landed == "/admin", f"signing in with the spare admin key landed on {landed}")
        driver.get(self.base + "/admin/keys")
        check(element(driver, "table#keys") is not None, "GET /admin/keys: no <table id=keys>")
        names = driver.execute_script(
            "return Array.from(document.querySelectorAll('table#keys tr[data-key]')).map(r => r.dataset.key)")
        for name in ("console-admin", "console-credit-only", "console-spare", "app-backend", "game-server"):
            check(name in names, f"GET /admin/keys: no <tr data-key={name!r}> (rows: {names})")
        link = element(driver, "table#keys tr[data-key='console-spare'] a.revoke")
        check(link is not None, "GET /admin/keys: no <a class=revoke> in the row of console-spare")
        check(urllib.parse.urlsplit(link.get_attribute("href")).path == "/admin/keys/console-spare/revoke",
              f"GET /admin/keys: revoke link is {link.get_attribute('href')!r}, expected "
              "/admin/keys/console-spare/revoke")
        click_and_wait(driver, link, "the revoke confirmation page")
        check(path_of(driver) == "/admin/keys/console-spare/revoke",
              f"the revoke link led to {path_of(driver)}, expected /admin/keys/console-spare/revoke")
        check(self.service.psql("SELECT count(*) FROM wallet.api_keys WHERE name = 'console-spare' "
                                "AND revoked_at IS NULL")[0][0] == "1",
              "GET /admin/keys/console-spare/revoke revoked the key before it was confirmed")
        form = element(driver, "form[method=post][action='/admin/keys/console-spare/revoke']")
        check(form is not None, "confirmation page: no <form method=post action=/admin/keys/console-spare/revoke>")
        check(element(driver, "form[action='/admin/keys/console-spare/revoke'] input[type=hidden][name=csrf]")
              is not None, "confirmation page: the form has no hidden csrf input")
        button = element(driver, "form[action='/admin/keys/console-spare/revoke'] button[type=submit]")
        check(button is not None and button.text.strip() == "Revoke key",
              f"confirmation page: expected <button type=submit>Revoke key</button>, got "
              f"{button.text if button else None!r}")
        click_and_wait(driver, button, "the revocation to be answered")
        revoked_at = time.monotonic()
        check(path_of(driver) == "/admin/keys", f"after revoking, landed on {path_of(driver)}, expected /admin/keys")
        rows = driver.execute_script("""
            return Array.from(document.querySelectorAll("table#keys tr[data-key='console-spare']")).map(r => {
                const c = r.querySelector('.revoked');
                return [c ? c.textContent.trim() : null, !!r.querySelector('a.revoke')];
            });""")
        check(rows, "GET /admin/keys after revoking: no row for console-spare")
        check(any(cell for cell, _ in rows) and not any(link for cell, link in rows if cell),
              f"GET /admin/keys after revoking: console-spare's row does not show it revoked: {rows}")
        live = driver.execute_script("""
            const r = document.querySelector("table#keys tr[data-key='console-admin']");
            const c = r && r.querySelector('.revoked');
            return c ? c.textContent.trim() : null;""")
        check(live == "", f"GET /admin/keys: console-admin's revoked cell should be empty, got {live!r}")

        attempts = []

        def signed_out():
            second.get(self.base + "/admin")
            attempts.append(round(time.monotonic() - revoked_at, 2))
            return path_of(second) == "/admin/login"

        try:
            wait_until("the revoked key's session to end", signed_out,
                       REVOKE_DEADLINE_SECONDS - (time.monotonic() - revoked_at), interval=0.25)
        except Failure:
            raise Failure(f"the revoked key's session still loads /admin {REVOKE_DEADLINE_SECONDS}s after the "
                          f"revocation (loads at {attempts}s)") from None
        check(element(second, "input#api-key") is not None, "the revoked session landed on /admin/login without its form")
        # The same through plain HTTP, for the status codes: the form's POST answers 303 to /admin/keys.
        cookie = self.http_sign_in(self.keys["admin"])
        confirm = self.get("/admin/keys/console-spare-2/revoke", cookie)
        check(confirm.status == 200, f"GET /admin/keys/console-spare-2/revoke: status {confirm.status}")
        form = [f for f in forms_of(confirm.text) if f["action"] == "/admin/keys/console-spare-2/revoke"]
        check(form and form[0]["inputs"].get("csrf"), "GET /admin/keys/console-spare-2/revoke: no form with a csrf value")
        answer = request(self.base, "POST", "/admin/keys/console-spare-2/revoke", cookie=cookie,
                         form={"csrf": form[0]["inputs"]["csrf"]})
        check(answer.status == 303 and answer.location_path(self.base) == "/admin/keys",
              f"POST /admin/keys/console-spare-2/revoke: expected 303 to /admin/keys, got {answer.status} "
              f"{answer.header('Location')!r}")
        problems = header_problems("POST /admin/keys/console-spare-2/revoke (303)", answer)
        check(not problems, "; ".join(problems))
        audit = self.service.psql("SELECT count(*) FROM wallet.admin_audit WHERE action = 'revoke_key' "
                                  "AND arguments ->> 'key' = 'console-spare'")[0][0]
        check(audit == "1", f"expected one revoke_key audit row for console-spare, found {audit}")
        self.notes.append(f"revoked session sent to the login page {attempts[-1]}s after the revocation "
                          f"(page loads: {len(attempts)})")
        driver.get(self.base + "/admin/audit")
        check(element(driver, "table#audit") is not None, "GET /admin/audit: no <table id=audit>")
        check("console-spare" in driver.find_element(By.TAG_NAME, "body").text,
              "GET /admin/audit: the key revocation is not listed")

    def test_webhooks_and_player_events(self):
        """The Webhooks page lists the endpoints, a failing and a disabled one marked, and the
        deliveries tried last; the player page shows the player's events as the ledger has them."""
        dead = f"http://127.0.0.1:{free_port()}/hooks"      # nothing listens: every attempt is refused
        ids = self.service.psql(
            f"SELECT wallet.add_webhook('{dead}', '{{*}}', '\\x{'ab' * 16}'::bytea, 'console-test'), "
            f"wallet.add_webhook('{dead}/off', '{{credit.refunded}}', '\\x{'cd' * 16}'::bytea, 'console-test')")[0]
        failing, off = ids
        self.service.psql(f"SELECT wallet.set_webhook_enabled({off}, FALSE, 'console-test')")
        try:
            self.debit(PLAYER, 5, reason="webhook")
            wait_until("the sender to try the endpoint", lambda: self.service.psql(
                f"SELECT count(*) FROM wallet.webhook_deliveries WHERE endpoint_id = {failing} AND attempts > 0")[0][0]
                != "0", 30)
            driver = self.signed_in_browser()
            link = element(driver, "header nav a[href='/admin/webhooks']")
            check(link is not None and link.text.strip() == "Webhooks", "the header has no Webhooks link")
            click_and_wait(driver, link, "the Webhooks page")
            check(path_of(driver) == "/admin/webhooks", f"the Webhooks link led to {path_of(driver)}")
            endpoints = driver.execute_script("""
                return Array.from(document.querySelectorAll('table#endpoints tbody tr')).map(r =>
                    [r.dataset.endpoint || '', r.className, Array.from(r.cells).map(c => c.textContent.trim())]);""")
            by_id = {row[0]: row for row in endpoints}
            check(set(by_id) == {failing, off}, f"GET /admin/webhooks: endpoints {sorted(by_id)}, expected {failing} and {off}")
            check(by_id[failing][1] == "failing" and by_id[failing][2][3].startswith("failing since "),
                  f"the refused endpoint is not shown failing: {by_id[failing]}")
            check(by_id[failing][2][1] == dead and by_id[failing][2][2] == "all",
                  f"the refused endpoint's URL or events are wrong: {by_id[failing]}")
            check(by_id[off][1] == "failing" and by_id[off][2][3] == "disabled: disabled by console-test"
                  and by_id[off][2][2] == "credit.refunded", f"the disabled endpoint is not shown disabled: {by_id[off]}")
            deliveries = table_rows(driver, "table#deliveries")
            mine = [[cell[1] for cell in row] for row in deliveries if row[0][1] == failing and row[2][1] == PLAYER]
            check(mine and mine[0][3] == "pending" and int(mine[0][4]) >= 1 and mine[0][6],
                  f"GET /admin/webhooks: no pending, tried delivery to {failing} for {PLAYER}: {deliveries}")

            driver.get(self.base + f"/admin/users/{PLAYER}")
            shown = [[cell[1] for cell in row][:3] for row in table_rows(driver, "table#events")]
            expected = [[event_id, created_at, kind] for event_id, created_at, kind in self.service.psql(
                f"SELECT id, wallet.rfc3339(created_at), type FROM wallet.events WHERE user_id = '{PLAYER}' "
                f"ORDER BY id DESC LIMIT 50")]
            check(shown == expected, f"GET /admin/users/{PLAYER}: events {shown}, expected {expected}")
        finally:
            # Nothing listens there: stop trying, so the later tests run on a quiet service.
            self.service.psql(f"SELECT wallet.set_webhook_enabled({failing}, FALSE, 'console-test')")

    def test_unclaimed_purchases(self):
        """The Unclaimed page lists the purchases that name no known player, oldest first, one past an hour
        marked; once one is credited it is gone, and its credit's page says how it was credited."""
        self.service.psql(
            "SELECT wallet.keep_unclaimed_purchase('apple', '7100000001', 'guodong600', 1, 'Production', NULL, NULL), "
            "wallet.keep_unclaimed_purchase('google', 'GPA.7100-0002', 'guodong1200', 2, 'Production', "
            "wallet.google_account_id('ghost'), 'tok-console-unclaimed')")
        # The first has waited two hours (backdated here; the service never changes it).
        self.service.psql("UPDATE wallet.unclaimed_purchases SET received_at = now() - interval '2 hours' "
                          "WHERE flow_no = '7100000001'")
        driver = self.signed_in_browser()
        link = element(driver, "header nav a[href='/admin/unclaimed']")
        check(link is not None and link.text.strip() == "Unclaimed", "the header has no Unclaimed link")
        click_and_wait(driver, link, "the Unclaimed page")
        check(path_of(driver) == "/admin/unclaimed", f"the Unclaimed link led to {path_of(driver)}")
        rows = driver.execute_script("""
            return Array.from(document.querySelectorAll('table#unclaimed tbody tr')).map(r =>
                [r.dataset.flowNo || '', Array.from(r.cells).map(c => [c.className, c.textContent.trim()])]);""")
        check([row[0] for row in rows] == ["7100000001", "GPA.7100-0002"], f"GET /admin/unclaimed: rows {rows}")
        first, second = rows[0][1], rows[1][1]
        check(first[0][0] == "alert" and second[0][0] != "alert", f"only the two-hour-old purchase is marked: {rows}")
        check([cell[1] for cell in first[1:]] == ["apple", "7100000001", "guodong600", "1", "Production", "none"],
              f"the App Store purchase's cells: {first}")
        check(second[1][1] == "google" and second[4][1] == "2" and len(second[6][1]) == 64,
              f"the Google purchase's cells: {second}")
        # Claimed by hand: gone from the page; its credit says how it was credited.
        self.service.psql("SELECT * FROM wallet.claim_purchase('7100000001', 'claimer', 'ticket 1', 'console-test')")
        driver.get(self.base + "/admin/unclaimed")
        left = driver.execute_script(
            "return Array.from(document.querySelectorAll('table#unclaimed tbody tr')).map(r => r.dataset.flowNo);")
        check(left == ["GPA.7100-0002"], f"GET /admin/unclaimed after the claim: {left}")
        driver.get(self.base + "/admin/credits/7100000001")
        details = driver.find_element(By.ID, "credit").text
        check("claimed by hand (Scripts/admin/claim.sql, console-test)" in details,
              f"the claimed credit's page does not say how it was credited: {details!r}")

    def test_sign_out(self):
        cookie = self.http_sign_in(self.keys["admin"])
        page = self.get("/admin", cookie)
        check(page.status == 200, f"GET /admin with a fresh session: {page.status}")
        logout = [f for f in forms_of(page.text) if f["action"] == "/admin/logout" and f["method"] == "post"]
        check(logout and logout[0]["inputs"].get("csrf"), "GET /admin: no logout form with a csrf value")
        csrf = logout[0]["inputs"]["csrf"]
        for form in ({"csrf": "not-the-token"}, {}):
            answer = request(self.base, "POST", "/admin/keys/console-credit-only/revoke", cookie=cookie, form=form)
            live = self.service.psql("SELECT count(*) FROM wallet.api_keys WHERE name = 'console-credit-only' "
                                     "AND revoked_at IS NULL")[0][0]
            check(live == "1", f"POST /admin/keys/console-credit-only/revoke with {form or 'no csrf'} "
                               f"(status {answer.status}) revoked the key")
        refused = request(self.base, "POST", "/admin/logout", cookie=cookie, form={"csrf": "not-the-token"})
        still = self.get("/admin", cookie)
        check(still.status == 200, f"POST /admin/logout with a wrong csrf (status {refused.status}) ended the "
                                   f"session: GET /admin answers {still.status}")
        answer = request(self.base, "POST", "/admin/logout", cookie=cookie, form={"csrf": csrf})
        check(answer.status in (302, 303) and answer.location_path(self.base) == "/admin/login",
              f"POST /admin/logout: expected 303 to /admin/login, got {answer.status} {answer.header('Location')!r}")
        found = session_cookie(answer)
        cleared = found is not None and (found[0] == "" or found[1].get("max-age") == "0" or "expires" in found[1])
        check(cleared, f"POST /admin/logout: the session cookie is not cleared ({answer.set_cookies()})")
        after = self.get("/admin", cookie)
        check(after.status in (302, 303) and after.location_path(self.base) == "/admin/login",
              f"GET /admin with a signed-out session: expected 303 to /admin/login, got {after.status}")

    def test_seed(self):
        started = time.monotonic()
        self.service.psql_file(SEED_SQL)
        seconds = time.monotonic() - started
        self.seeded = True
        counts = self.service.psql("SELECT (SELECT count(*) FROM wallet.wallets WHERE user_id LIKE 'seed-user-%'), "
                                   "(SELECT count(*) FROM wallet.entries WHERE user_id LIKE 'seed-user-%')")[0]
        check(counts == ["10000", "200000"], f"seed.sql made {counts[0]} players and {counts[1]} entries")
        check(seconds < 60, f"seed.sql took {seconds:.1f}s")
        self.notes.append(f"seed.sql: 10,000 players, 200,000 entries in {seconds:.1f}s")

    def test_chart_matches_ledger(self):
        driver = self.signed_in_browser()
        for _ in range(2):
            today = self.service.psql("SELECT (now() AT TIME ZONE 'UTC')::date")[0][0]
            driver.get(self.base + "/admin?days=30")
            rows = table_rows(driver, "table#coins-per-day")
            expected = self.coins_per_day(30)
            if self.service.psql("SELECT (now() AT TIME ZONE 'UTC')::date")[0][0] == today:
                break
        check(rows is not None, "GET /admin?days=30: no <table id=coins-per-day>")
        headers = driver.execute_script("""
            const t = document.querySelector('table#coins-per-day');
            return t && t.tHead ? Array.from(t.tHead.rows[0].cells).map(c => c.textContent.trim()) : null;""")
        check(headers == ["Day", "Credited", "Debited", "Refunded"],
              f"GET /admin?days=30: #coins-per-day <thead> cells are {headers}, expected Day, Credited, Debited, Refunded")
        check(len(rows) == 30, f"GET /admin?days=30: {len(rows)} rows in #coins-per-day, expected 30")
        problems = []
        for got, want in zip(rows, expected):
            shape = [(c[0], c[2]) for c in got]
            if shape != [("th", "row"), ("td", ""), ("td", ""), ("td", "")]:
                problems.append(f"row {got[0][1] if got else '?'}: cells are {shape}, expected "
                                "<th scope=row> then three <td>")
                continue
            values = [c[1] for c in got]
            if values != want:
                problems.append(f"day {want[0]}: page {values[1:]} (day {values[0]}), ledger {want[1:]}")
        check(not problems, "GET /admin?days=30 per-day table differs from wallet.entries:\n      "
              + "\n      ".join(problems[:10]) + (f"\n      ... {len(problems)} in all" if len(problems) > 10 else ""))
        nonzero = sum(1 for row in expected if row[1:] != ["0", "0", "0"])
        check(nonzero >= 25 or not self.seeded, f"only {nonzero} of 30 days have coins; was the seed loaded?")
        svg = element(driver, "svg#coins-chart")
        check(svg is not None, "GET /admin?days=30: no <svg id=coins-chart>")
        check(svg.get_attribute("role") == "img", f"<svg id=coins-chart> role is {svg.get_attribute('role')!r}")
        label = (svg.get_attribute("aria-label") or "").strip()
        check(label, "<svg id=coins-chart> has no aria-label")
        for days in (7, 30, 90):
            check(element(driver, f"a[href$='?days={days}']") is not None,
                  f"GET /admin?days=30: no window link ending in ?days={days}")
        for css in ("table#top-balances", "table#negative-balances", "table#notification-outcomes", "dl#counts"):
            check(element(driver, css) is not None, f"GET /admin?days=30: no {css}")
        self.notes.append(f"chart aria-label: {label!r}")
        cookie = next((c["value"] for c in driver.get_cookies() if c["name"] == COOKIE), None)
        for days in (7, 90):
            answer = self.get(f"/admin?days={days}", cookie)
            check(answer.status == 200, f"GET /admin?days={days}: status {answer.status}")
            table = re.search(r'<table[^>]*id="coins-per-day".*?</table>', answer.text, re.S)
            check(table is not None, f"GET /admin?days={days}: no <table id=coins-per-day>")
            body = re.search(r"<tbody[^>]*>(.*?)</tbody>", table.group(0), re.S)
            got = [[html_text(cell) for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)]
                   for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body.group(1) if body else "", re.S)]
            want = self.coins_per_day(days)
            check(len(got) == days, f"GET /admin?days={days}: {len(got)} rows in #coins-per-day, expected {days}")
            differing = [f"{w[0]}: page {g[1:]}, ledger {w[1:]}" for g, w in zip(got, want) if g != w]
            check(not differing, f"GET /admin?days={days} per-day table differs from wallet.entries: "
                                 + "; ".join(differing[:5]))

    def test_seeded_pages_answer_in_time(self):
        check(self.seeded, "the seed was not loaded")
        cookie = self.http_sign_in(self.keys["admin"])
        refunded = self.service.psql(f"SELECT flow_no FROM wallet.credits WHERE user_id = '{SEEDED_REFUNDED_PLAYER}' "
                                     "AND status = 'refunded' ORDER BY flow_no LIMIT 1")
        check(refunded, f"the seed has no refunded credit for {SEEDED_REFUNDED_PLAYER}")
        flow_no = refunded[0][0]
        paths = ["/admin?days=7", "/admin?days=30", "/admin?days=90", f"/admin/users/{SEEDED_PLAYER}",
                 f"/admin/users/{SEEDED_REFUNDED_PLAYER}", f"/admin/credits/{flow_no}",
                 f"/admin/search?q={SEEDED_PLAYER}", "/admin/audit", "/admin/keys"]
        times, problems = [], []
        for path in paths:
            try:
                answer = request(self.base, "GET", path, cookie=cookie, timeout=REQUEST_TIMEOUT_SECONDS + 5)
            except OSError as error:
                problems.append(f"GET {path}: {error}")
                continue
            expected = (303,) if path.startswith("/admin/search") else (200,)
            times.append(f"{path} {answer.status} {answer.seconds * 1000:.0f} ms")
            if answer.status not in expected:
                problems.append(f"GET {path}: status {answer.status}, expected {expected[0]}")
            if answer.seconds >= REQUEST_TIMEOUT_SECONDS:
                problems.append(f"GET {path}: {answer.seconds:.1f}s, over the {REQUEST_TIMEOUT_SECONDS}s request timeout")
            problems += header_problems(f"GET {path}", answer)
        audit = request(self.base, "GET", "/admin/audit", cookie=cookie)
        next_link = re.search(r'<a[^>]*id="next-page"[^>]*href="([^"]+)"', audit.text) or \
            re.search(r'<a[^>]*href="([^"]+)"[^>]*id="next-page"', audit.text)
        if next_link is None:
            problems.append("GET /admin/audit: no next-page link, though the seed wrote over 5,000 audit rows")
        else:
            href = html_text(next_link.group(1))
            answer = request(self.base, "GET", urllib.parse.urljoin("/admin/audit", href), cookie=cookie)
            times.append(f"/admin/audit (page 2) {answer.status} {answer.seconds * 1000:.0f} ms")
            if answer.status != 200 or answer.seconds >= REQUEST_TIMEOUT_SECONDS:
                problems.append(f"GET {href}: status {answer.status} in {answer.seconds:.1f}s")
        page = request(self.base, "GET", f"/admin/credits/{flow_no}", cookie=cookie)
        for table in ("refunds", "notifications"):
            match = re.search(rf'<table[^>]*id="{table}".*?</table>', page.text, re.S)
            if match is None or "<tbody" not in match.group(0) or len(re.findall(r"<tr", match.group(0))) < 2:
                problems.append(f"GET /admin/credits/{flow_no}: #{table} does not list the seeded Apple refund")
        self.notes.append("seeded page times: " + "; ".join(times))
        check(not problems, "\n      ".join(problems))

    def test_phone_width(self):
        driver = self.signed_in_browser()
        try:
            set_viewport(driver, PHONE_WIDTH, PHONE_HEIGHT)
            problems = []
            for path in ("/admin?days=30", f"/admin/users/{PLAYER}"):
                driver.get(self.base + path)
                sizes = driver.execute_script("""
                    const s = document.querySelector('input#search');
                    const r = s ? s.getBoundingClientRect() : null;
                    return {inner: window.innerWidth, scroll: document.documentElement.scrollWidth,
                            search: r ? [r.left, r.right, r.width] : null,
                            viewport: !!document.querySelector('meta[name=viewport]')};""")
                if sizes["scroll"] > sizes["inner"] + 1:
                    problems.append(f"{path} at {PHONE_WIDTH}px: the page scrolls sideways "
                                    f"(document {sizes['scroll']}px wide, window {sizes['inner']}px)")
                search = sizes["search"]
                if search is None or search[0] < 0 or search[1] > sizes["inner"] + 1 or search[2] < 80:
                    problems.append(f"{path} at {PHONE_WIDTH}px: the search field is not within the window: {search}")
                if not sizes["viewport"]:
                    self.notes.append(f"warning: {path} has no <meta name=viewport>; phones will lay it out at 980px")
            check(not problems, "\n      ".join(problems))
        finally:
            set_viewport(driver, WIDTH, HEIGHT)

    def test_screenshots(self):
        driver = self.signed_in_browser()
        os.makedirs(self.screenshots, exist_ok=True)
        set_viewport(driver, WIDTH, HEIGHT)
        for path, name, css in (("/admin?days=30", "console-overview.png", "svg#coins-chart"),
                                (f"/admin/users/{PLAYER}", "console-user.png", "table#ledger")):
            driver.get(self.base + path)
            wait_for(driver, f"{path} to load", lambda d: d.execute_script("return document.readyState") == "complete")
            check(element(driver, css) is not None, f"{path}: no {css} to show (at {driver.current_url})")
            target = os.path.join(self.screenshots, name)
            check(driver.save_screenshot(target), f"could not save {target}")
            self.notes.append(f"screenshot {target} ({os.path.getsize(target)} bytes)")

    def test_sign_in_rate_limit(self):
        answers = []
        for _ in range(30):
            answer = request(self.base, "POST", "/admin/login", form={"api_key": "wk_wrong-" + uuid.uuid4().hex})
            answers.append(answer.status)
            if answer.status == 429:
                break
            check(answer.status == 401, f"POST /admin/login with an unknown key: expected 401, got {answer.status}")
        check(answers[-1] == 429, f"30 failed sign-ins in a row were never answered 429: {answers}")
        problems = header_problems("POST /admin/login (429)", answer)
        if not error_paragraph(answer.text):
            problems.append(f"POST /admin/login (429): expected the error in <p class=\"error\" role=\"alert\">; "
                            f"got a page with <h1>{answer.h1()}</h1>, no such paragraph"
                            + ("" if login_form(answer.text) else ", and without the sign-in form"))
        if session_cookie(answer) is not None:
            problems.append("POST /admin/login (429) set a session cookie")
        check(not problems, "\n      ".join(problems))
        self.notes.append(f"sign-in rate limit: 429 after {len(answers) - 1} failures "
                          f"(Retry-After: {answer.header('Retry-After')!r})")

    def test_books_balance(self):
        result = self.service.wallet_check()
        check(result.returncode == 0, f"wallet check exited {result.returncode}: {result.stdout[-2000:]}"
                                      f"{result.stderr[-2000:]}")

    def test_no_errors_logged(self):
        errors = self.service.logged_errors()
        check(not errors, "the service logged errors:\n      " + "\n      ".join(errors[:10]))

    def close(self):
        for driver in (self.second_driver, self.driver):
            if driver is not None:
                try:
                    driver.quit()
                except Exception:
                    pass
        self.driver = self.second_driver = None


def run(args):
    work = tempfile.mkdtemp(prefix="wallet-console-test.")
    os.chmod(work, 0o755)       # the postgres user (when run as root) must reach the data dir
    service = WalletServer(os.path.abspath(args.wallet), work)
    suite = Suite(service, os.path.abspath(args.screenshots) if args.screenshots else None)
    results = []
    started = time.monotonic()

    def step(name, function, required=False):
        t0 = time.monotonic()
        try:
            function()
        except Failure as failure:
            results.append((name, False))
            print(f"FAIL {name} ({time.monotonic() - t0:.1f}s)\n      {failure}", flush=True)
        except (WebDriverException, OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError,
                AttributeError, IndexError) as error:
            results.append((name, False))
            detail = "".join(traceback.format_exception_only(type(error), error)).strip()
            print(f"FAIL {name} ({time.monotonic() - t0:.1f}s)\n      {detail[:1500]}", flush=True)
        else:
            results.append((name, True))
            print(f"PASS {name} ({time.monotonic() - t0:.1f}s)", flush=True)
            return True
        if required:
            raise Failure(f"{name} failed; the tests after it cannot run")
        return False

    try:
        step("service starts", service.start, required=True)
        print(f"     service on {service.base}, data in {service.data}", flush=True)
        step("keys and API data", suite.setup_data, required=True)
        step("pages need a session", suite.test_pages_need_a_session)
        step("security headers and session cookie", suite.test_security_headers)
        step("sign in", suite.test_sign_in)
        step("a console key signs in and opens no /v1 route", suite.test_console_key)
        step("search", suite.test_search)
        step("ledger paging", suite.test_ledger_paging)
        step("hostile text stays text", suite.test_hostile_text_stays_text)
        step("revoking a key ends its sessions", suite.test_revoke_key_ends_its_sessions)
        step("webhooks page and the player's events", suite.test_webhooks_and_player_events)
        step("unclaimed purchases page", suite.test_unclaimed_purchases)
        step("sign out", suite.test_sign_out)
        if step("seed 10,000 players and 200,000 entries", suite.test_seed):
            step("chart matches the ledger", suite.test_chart_matches_ledger)
            step("seeded pages answer in time", suite.test_seeded_pages_answer_in_time)
        step("phone width", suite.test_phone_width)
        if suite.screenshots:
            step("screenshots", suite.test_screenshots)
        step("sign-in rate limit", suite.test_sign_in_rate_limit)
        step("books balance (wallet check)", suite.test_books_balance)
    except Failure as failure:
        print(f"     stopping: {failure}", flush=True)
    except RunDeadline:
        results.append(("run deadline", False))
        print(f"FAIL the run took over {RUN_DEADLINE_SECONDS}s; stopping", flush=True)
    finally:
        signal.alarm(0)
        suite.close()
        status = service.stop()
        if service.process is not None:
            if status not in (0, None):
                results.append(("service stops cleanly", False))
                print(f"FAIL service stops cleanly\n      wallet serve exited with {status}: "
                      f"{service.read(service.err_path)[-1500:]}", flush=True)
            step("no errors logged", suite.test_no_errors_logged)
        shutil.rmtree(work, ignore_errors=True)

    for note in suite.notes:
        print(f"     {note}")
    failed = [name for name, ok in results if not ok]
    print(f"\n{len(results) - len(failed)} passed, {len(failed)} failed in {time.monotonic() - started:.1f}s"
          + (f": {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser(description="End-to-end browser tests of the wallet's support console.")
    parser.add_argument("--wallet", required=True, help="the wallet binary, e.g. .build/debug/wallet")
    parser.add_argument("--screenshots", metavar="DIR", help="save console-overview.png and console-user.png here")
    args = parser.parse_args()
    if not os.access(args.wallet, os.X_OK):
        parser.error(f"{args.wallet} is not an executable")

    def on_alarm(signum, frame):
        raise RunDeadline()

    def on_signal(signum, frame):
        raise KeyboardInterrupt()
    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, on_signal)
    signal.alarm(RUN_DEADLINE_SECONDS)
    try:
        return run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
