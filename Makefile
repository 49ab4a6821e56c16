# The two commands a newcomer needs: `make run` and `make test`.
SHELL := /bin/bash
SWIFT ?= swift
SWIFT_FLAGS ?= -Xswiftc -warnings-as-errors

# Debian packages the build, the tests and the embedded database use.
APT_PACKAGES := pkg-config libpq-dev libmicrohttpd-dev libssl-dev \
	postgresql-15 postgresql-client-15 python3-yaml python3-venv

.PHONY: deps build test
deps:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || echo $$p; done); \
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

build: deps
	$(SWIFT) build $(SWIFT_FLAGS)

test: deps
	$(SWIFT) build --build-tests $(SWIFT_FLAGS)
	$(SWIFT) test --skip-build

# Load benchmark against a fresh PostgreSQL (see bench/README.md). Not part
# of `make test`: it takes a few minutes and wants the machine to itself.
BENCH_APT_PACKAGES := wrk

.PHONY: bench
bench: deps
	@missing=$$(for p in $(BENCH_APT_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || echo $$p; done); \
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
	SWIFT=$(SWIFT) bench/run.sh
