#!/usr/bin/python3
"""The support console through the TLS proxy of deploy/tls, in headless Chromium.

Run: python3 Tests/Browser/console_tls_test.py --wallet .build/debug/wallet [--screenshots DIR]

It makes a development certificate with deploy/tls/dev-cert.sh, starts
`wallet serve` on its embedded database (the console's cookie Secure, the
proxy's address trusted) and HAProxy with deploy/tls/haproxy.cfg in front of
it, then checks, through the proxy:

- a browser that trusts exactly that certificate signs in at
  https://wallet.test:PORT/admin and gets a Secure session cookie: the
  service believed the proxy's X-Forwarded-Proto (a host that is not
  localhost, so only HTTPS lets a Secure cookie be kept);
- answers carry Strict-Transport-Security, and plain HTTP on the proxy's
  other port only redirects to HTTPS (308, nothing else served);
- the proxy replaces a client's own X-Forwarded-For: failed sign-ins that
  each claim another address are still counted against the one real client,
  so the sign-in limit holds.

Needs haproxy, openssl, chromium, chromium-driver, python3-selenium and
postgresql-15. Every wait has a deadline; the whole run is bounded.
"""
import argparse
import http.client
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse

import console_test as console
from console_test import Failure, check, free_port, wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TLS_DIR = os.path.join(ROOT, "deploy", "tls")
HOST = "wallet.test"              # mapped to 127.0.0.1 for the browser and the client below
RUN_DEADLINE_SECONDS = 180


class Proxy:
    """HAProxy with deploy/tls/haproxy.cfg, in the foreground."""

    def __init__(self, work, certificate, upstream):
        self.https_port = free_port()
        self.http_port = free_port()
        self.log_path = os.path.join(work, "haproxy.log")
        self.env = dict(os.environ, TLS_LISTEN=f"127.0.0.1:{self.https_port}",
                        TLS_REDIRECT_LISTEN=f"127.0.0.1:{self.http_port}", TLS_CERT=certificate,
                        WALLET_UPSTREAM=upstream)
        self.process = None

    def start(self):
        config = os.path.join(TLS_DIR, "haproxy.cfg")
        checked = subprocess.run(["haproxy", "-c", "-f", config], env=self.env, capture_output=True, text=True,
                                 timeout=30)
        check(checked.returncode == 0, f"haproxy -c refused deploy/tls/haproxy.cfg: {checked.stdout}{checked.stderr}")
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(["haproxy", "-db", "-f", config], env=self.env, stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


class Connection(http.client.HTTPSConnection):
    """HTTPS to HOST, reached at 127.0.0.1, verified against the test's certificate."""

    def __init__(self, port, context):
        super().__init__(HOST, port, context=context, timeout=console.HTTP_TIMEOUT_SECONDS)

    def connect(self):
        self.sock = self._create_connection(("127.0.0.1", self.port), self.timeout)
        self.sock = self._context.wrap_socket(self.sock, server_hostname=HOST)


def https(port, context, method, path, body=None, headers=None):
    connection = Connection(port, context)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        answer = connection.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        connection.close()


def spki_sha256(certificate):
    """The base64 SHA-256 of the certificate's public key, as Chromium pins it."""
    key = subprocess.run(["openssl", "x509", "-in", certificate, "-noout", "-pubkey"], capture_output=True,
                         check=True, timeout=30).stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "DER"], input=key, capture_output=True,
                         check=True, timeout=30).stdout
    digest = subprocess.run(["openssl", "dgst", "-sha256", "-binary"], input=der, capture_output=True,
                            check=True, timeout=30).stdout
    return subprocess.run(["openssl", "base64", "-A"], input=digest, capture_output=True, check=True,
                          timeout=30).stdout.decode().strip()


def run(args):
    started = time.monotonic()
    results = []
    work = tempfile.mkdtemp(prefix="wallet-tls-")
    os.chmod(work, 0o755)
    service = console.WalletServer(os.path.abspath(args.wallet), work)
    service.env.update(WALLET_ADMIN_COOKIE_SECURE="true", WALLET_TRUSTED_PROXIES="127.0.0.1/32")
    proxy = None
    driver = None

    def step(name, body):
        try:
            body()
            results.append((name, True))
            print(f"PASS {name}", flush=True)
        except Failure as failure:
            results.append((name, False))
            print(f"FAIL {name}\n      {failure}", flush=True)

    try:
        made = subprocess.run([os.path.join(TLS_DIR, "dev-cert.sh"), os.path.join(work, "tls"), HOST],
                              capture_output=True, text=True, timeout=60)
        check(made.returncode == 0, f"dev-cert.sh failed: {made.stderr}")
        pem = os.path.join(work, "tls", "wallet.pem")
        certificate = os.path.join(work, "tls", "cert.pem")
        with open(pem) as source, open(certificate, "w") as target:
            text = source.read()
            target.write(text[:text.index("-----END CERTIFICATE-----") + len("-----END CERTIFICATE-----")] + "\n")
        context = ssl.create_default_context(cafile=certificate)

        service.start()
        proxy = Proxy(work, pem, f"127.0.0.1:{service.port}")
        proxy.start()

        def proxied_health():
            try:
                return https(proxy.https_port, context, "GET", "/healthz")[0] == 200
            except OSError:
                return False
        wait_until("the proxy to reach the service over HTTPS", proxied_health, 30)
        base = f"https://{HOST}:{proxy.https_port}"

        def browser_signs_in():
            nonlocal driver
            driver = console.new_browser(extra_arguments=(
                f"--host-resolver-rules=MAP {HOST} 127.0.0.1",
                f"--ignore-certificate-errors-spki-list={spki_sha256(certificate)}",
                f"--user-data-dir={os.path.join(work, 'chromium')}"))
            landed = console.browser_sign_in(driver, base, service.console_key)
            check(landed == "/admin", f"signing in through TLS landed on {landed!r}, expected /admin; page: "
                                      f"{driver.find_element('tag name', 'body').text[:300]!r}")
            check(urllib.parse.urlsplit(driver.current_url).scheme == "https", f"ended on {driver.current_url}")
            cookies = [c for c in driver.get_cookies() if c["name"] == console.COOKIE]
            check(len(cookies) == 1 and cookies[0].get("secure") is True and cookies[0].get("httpOnly") is True,
                  f"expected one Secure, HttpOnly {console.COOKIE} cookie, got {cookies}")
            if args.screenshots:
                os.makedirs(args.screenshots, exist_ok=True)
                driver.save_screenshot(os.path.join(args.screenshots, "console-tls.png"))
        step("a browser signs in to the console through TLS", browser_signs_in)

        def strict_transport():
            status, headers, _ = https(proxy.https_port, context, "GET", "/healthz")
            check(status == 200, f"GET /healthz through TLS: {status}")
            check(headers.get("strict-transport-security") == "max-age=31536000",
                  f"Strict-Transport-Security: {headers.get('strict-transport-security')!r}")
        step("answers over TLS carry Strict-Transport-Security", strict_transport)

        def plain_http_redirects():
            connection = http.client.HTTPConnection("127.0.0.1", proxy.http_port, timeout=console.HTTP_TIMEOUT_SECONDS)
            try:
                # As a browser asks for http://wallet.test/… on port 80.
                connection.request("GET", "/v1/wallets/player-1", headers={"Host": HOST})
                answer = connection.getresponse()
                answer.read()
            finally:
                connection.close()
            check(answer.status == 308, f"plain HTTP answered {answer.status}, expected 308")
            check(answer.getheader("Location") == f"https://{HOST}/v1/wallets/player-1",
                  f"Location: {answer.getheader('Location')!r}")
        step("plain HTTP on the proxy only redirects to HTTPS", plain_http_redirects)

        def forged_forwarded_for_is_replaced():
            # The limit allows a burst of ten; each attempt claims a new address.
            statuses = []
            for attempt in range(12):
                status, _, _ = https(proxy.https_port, context, "POST", "/admin/login",
                                     body=urllib.parse.urlencode({"api_key": "wk_not-a-key"}),
                                     headers={"Content-Type": "application/x-www-form-urlencoded",
                                              "Origin": base, "X-Forwarded-For": f"198.51.100.{attempt + 1}"})
                statuses.append(status)
            check(429 in statuses, f"twelve failed sign-ins, each claiming its own address, answered {statuses}: "
                                   "the client's X-Forwarded-For reached the service")
        step("the proxy replaces a client's X-Forwarded-For", forged_forwarded_for_is_replaced)
    except Failure as failure:
        results.append(("setup", False))
        print(f"FAIL setup\n      {failure}", flush=True)
    finally:
        if driver is not None:
            driver.quit()
        if proxy is not None:
            proxy.stop()
        service.stop()
        shutil.rmtree(work, ignore_errors=True)

    failed = [name for name, ok in results if not ok]
    print(f"\n{len(results) - len(failed)} passed, {len(failed)} failed in {time.monotonic() - started:.1f}s"
          + (f": {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser(description="The support console through the TLS proxy.")
    parser.add_argument("--wallet", required=True, help="the wallet binary, e.g. .build/debug/wallet")
    parser.add_argument("--screenshots", metavar="DIR", help="save console-tls.png here")
    args = parser.parse_args()
    if not os.access(args.wallet, os.X_OK):
        parser.error(f"{args.wallet} is not an executable")

    def on_alarm(signum, frame):
        raise console.RunDeadline()
    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(130))
    signal.alarm(RUN_DEADLINE_SECONDS)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
