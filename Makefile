# The two commands a newcomer needs: `make run` and `make test`.
SHELL := /bin/bash
SWIFT ?= swift
SWIFT_FLAGS ?= -Xswiftc -warnings-as-errors

# Debian packages the build, the tests and the embedded database use.
APT_PACKAGES := pkg-config libpq-dev libmicrohttpd-dev libssl-dev openssl \
	postgresql-15 postgresql-client-15 python3-yaml python3-venv
# The benchmark's load generator.
BENCH_APT_PACKAGES := wrk
# The high-availability layout (deploy/ha/): its bounded drill is part of
# `make test`.
HA_APT_PACKAGES := patroni etcd-server haproxy pgbouncer iproute2
# Backups and WAL archiving (deploy/backup/, deploy/ha/): the restore drill's
# bounded form is part of `make test`.
BACKUP_APT_PACKAGES := pgbackrest
# promtool, which checks and tests the alert rules in deploy/prometheus/.
OBSERVABILITY_APT_PACKAGES := prometheus
# The support console's browser tests: headless Chromium through Selenium.
BROWSER_APT_PACKAGES := chromium chromium-driver python3-selenium
# The documentation site's generator (`make docs`, part of `make test`).
DOCS_APT_PACKAGES := mkdocs
# The client libraries' suites: Node.js and the TypeScript compiler that
# checks the TypeScript client's declarations, and pytest with the build
# tools that install the Python client offline.
CLIENT_APT_PACKAGES := nodejs node-typescript python3-pytest python3-setuptools python3-wheel

# Installs the Debian packages named in $(1) that are missing: with apt-get
# when root, otherwise it prints the command to run.
define install_packages
	@missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "installing: $$missing"; \
			DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
		else \
			echo "missing Debian packages; run:"; \
			echo "  sudo apt-get install -y $$missing"; \
			exit 1; \
		fi; \
	fi
endef

.PHONY: deps build test docs run chaos bench tsan failover restore-drill
deps:
	$(call install_packages,$(APT_PACKAGES) $(HA_APT_PACKAGES) $(BACKUP_APT_PACKAGES) $(OBSERVABILITY_APT_PACKAGES) $(BROWSER_APT_PACKAGES) $(CLIENT_APT_PACKAGES) $(DOCS_APT_PACKAGES))

build: deps
	$(SWIFT) build $(SWIFT_FLAGS)

# Every suite (a throwaway PostgreSQL is started by the tests; the chaos
# test runs in its bounded form; the Swift client's suites among them),
# then the Python and TypeScript clients' suites, then the examples (an app
# backend, a game shop and an ops script, against `wallet serve` on its
# embedded database), then the API fuzzer against the built service, then
# the support console in headless Chromium (directly, then through the TLS
# proxy of deploy/tls), then one switchover of the high-availability layout
# under load and a kill -9 of one HAProxy and of one PgBouncer (the failover
# drill's bounded form, about 70 s), then a backup, a lost data
# directory and two restores under load (the restore drill's bounded form:
# about 10 s of writes either side of the backup), then the compose files'
# rules, the alert rules (promtool; the dashboard's metrics are checked by a
# suite against the served /metrics) and the target graph's levels, then the
# benchmark floor's SQL on a PostgreSQL of its own (bench/test_floor.py, no
# load; seconds), then the documentation: every shell example of README.md and docs/ run against
# `wallet serve` and its output compared (about 20 s), and `make docs`.
test: deps
	$(SWIFT) build --build-tests $(SWIFT_FLAGS)
	@# One test at a time: many tests block a thread on sockets and child
	@# processes, and Swift Testing runs tests on a pool as wide as the
	@# cores, so in parallel a quick test can queue behind a minute of others
	@# and fail its own time limit. Each limit now times only its own test.
	$(SWIFT) test --skip-build --no-parallel
	clients/python/test.sh .build/debug/wallet
	clients/typescript/test.sh .build/debug/wallet
	examples/run.sh .build/debug/wallet .build/debug/GameShopExample
	Scripts/api-fuzz.sh .build/debug/wallet
	/usr/bin/python3 Tests/Browser/console_test.py --wallet .build/debug/wallet
	/usr/bin/python3 Tests/Browser/console_tls_test.py --wallet .build/debug/wallet
	deploy/ha/drill.py --wallet .build/debug/wallet --switchover --kinds haproxy,pgbouncer --rounds 1 \
		--clients 4 --pace-ms 100 --degraded-seconds 3
	deploy/backup/restore-drill.py --wallet .build/debug/wallet --before-seconds 10 --after-seconds 10 --clients 4
	/usr/bin/python3 Scripts/check-compose.py docker-compose.yml
	/usr/bin/python3 Scripts/check-compose.py --ha deploy/ha/docker-compose.yml
	promtool check rules deploy/prometheus/wallet-alerts.yml
	promtool test rules deploy/prometheus/wallet-alerts.test.yml
	$(SWIFT) package dump-package | /usr/bin/python3 Scripts/check-layers.py
	/usr/bin/python3 bench/test_floor.py
	/usr/bin/python3 Scripts/check-doc-examples.py --wallet .build/debug/wallet
	$(MAKE) --no-print-directory docs

# The documentation site (mkdocs.yml): README.md as the front page, docs/
# and the READMEs they link to, staged at their repository paths into
# .build/docs/src, built by Debian's MkDocs with a built-in theme (nothing is
# downloaded) and --strict, so a warning fails, into .build/docs/site; then
# every internal href and src of the built site, #anchors included, must
# resolve. A few seconds; part of `make test`.
docs:
	$(call install_packages,$(DOCS_APT_PACKAGES))
	/usr/bin/python3 Scripts/stage-docs.py .build/docs/src
	mkdocs build --strict --config-file mkdocs.yml
	/usr/bin/python3 Scripts/check-site-links.py .build/docs/site

# The suites that exercise threads, built and run under the thread
# sanitizer in a build directory of their own. Every process (the test runner
# and the `wallet` servers the tests start) writes its reports to
# .build-tsan/reports/; any report fails the target. Not part of `make test`:
# the sanitizer makes the suites several times slower.
TSAN_SUITES := MonitorTests|BoundedCacheTests|LauncherProcessTests|WorkQueueTests|PoolTests|GroupCommitTests|GroupCommitServiceTests|ServerTests|OperationsTests|StallTests|AuthenticatorCacheTests|ChainCacheTests|RefundRaceTests|CreditDebitTests|ServerThreadReadsTests|NotificationWorkTests|SlowClientTests|ServerAPIThreadTests|HoldTests|SynchronousReplicationTests|MultiInstanceTests|ConsoleTests|GooglePlayCreditTests|GooglePlayVoidTests|AccessTokenTests|PushAuthenticationTests|ConnectionLimitTests|ConsoleFloodTests|UnconfirmedWriteTests|WebhookTests|WebhookTransportTests|EventFeedTests|ChargeNotificationTests|AccountTokenTests
TSAN_REPORTS := .build-tsan/reports
tsan: deps
	$(SWIFT) build --build-tests --build-path .build-tsan --sanitize=thread $(SWIFT_FLAGS)
	@rm -rf $(TSAN_REPORTS) && mkdir -p $(TSAN_REPORTS)
	@status=0; \
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/Scripts/tsan.supp log_path=$(CURDIR)/$(TSAN_REPORTS)/report" \
		$(SWIFT) test --skip-build --no-parallel --build-path .build-tsan --sanitize=thread \
		--filter '\.($(TSAN_SUITES))/' || status=$$?; \
	if compgen -G '$(TSAN_REPORTS)/report.*' >/dev/null; then \
		cat $(TSAN_REPORTS)/report.*; echo "thread sanitizer: reports above (also in $(TSAN_REPORTS)/)"; exit 1; \
	fi; \
	exit $$status

# The service on 127.0.0.1:8080 with the embedded development database.
# Ctrl-C (or SIGTERM to `wallet serve`) stops it and its PostgreSQL.
run: deps
	$(SWIFT) build -c release --product wallet $(SWIFT_FLAGS)
	exec .build/release/wallet serve

# The chaos test for longer: kills and restarts for WALLET_CHAOS_SECONDS (300).
chaos: deps
	$(SWIFT) build --build-tests $(SWIFT_FLAGS)
	WALLET_CHAOS_SECONDS=$${WALLET_CHAOS_SECONDS:-300} $(SWIFT) test --skip-build --filter WalletServiceTests.ChaosTests

# Load benchmark against a fresh PostgreSQL (see bench/README.md). Not part
# of `make test`: it takes a few minutes and wants the machine to itself.
bench: deps
	$(call install_packages,$(BENCH_APT_PACKAGES))
	SWIFT=$(SWIFT) bench/run.sh

# The failover drill: the high-availability layout on loopback (three etcd
# members, three Patroni nodes, two HAProxies, a PgBouncer per instance), two
# service instances under retrying clients, and in each of
# WALLET_FAILOVER_ROUNDS rounds (2) every failure kind: kill -9 of the
# primary's postmaster, stopping its Patroni, kill -9 of its etcd member, of
# one HAProxy and of one PgBouncer. Per kind it prints acknowledged
# operations lost and doubled and the longest write outage; then every
# acknowledged operation is looked for in the primary (see
# deploy/ha/README.md). WALLET_FAILOVER_KINDS picks kinds (comma-separated).
failover: deps
	$(SWIFT) build -c release --product wallet $(SWIFT_FLAGS)
	deploy/ha/drill.py --wallet .build/release/wallet --rounds $${WALLET_FAILOVER_ROUNDS:-2} \
		--kinds $${WALLET_FAILOVER_KINDS:-leader,etcd,haproxy,pgbouncer}

# The restore drill (deploy/backup/restore-drill.py): the release service
# under eight clients for WALLET_RESTORE_DRILL_SECONDS (60) before a full
# backup and as long after it, every data directory deleted, then a restore
# of the latest state and one to a point in time half-way through; it prints
# the RTO and the RPO (see docs/operations.md).
restore-drill: deps
	$(SWIFT) build -c release --product wallet $(SWIFT_FLAGS)
	deploy/backup/restore-drill.py --wallet .build/release/wallet --clients 8 \
		--before-seconds $${WALLET_RESTORE_DRILL_SECONDS:-60} --after-seconds $${WALLET_RESTORE_DRILL_SECONDS:-60}
