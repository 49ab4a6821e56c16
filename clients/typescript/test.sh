#!/usr/bin/env bash
# The TypeScript client's checks: its declarations through tsc, then the
# node:test suite against the real service (embedded development database).
#
#   clients/typescript/test.sh [WALLET_BINARY]
#
# The binary: the argument, else $WALLET_BINARY, else <repo>/.build/debug/wallet.
# Installs Debian's nodejs (and node-typescript) when missing and run as root.
# Prints the chaos line and the suite's wall time; exits non-zero on failure.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BINARY=${1:-${WALLET_BINARY:-$REPO/.build/debug/wallet}}
if [ ! -x "$BINARY" ]; then
    echo "test.sh: no wallet binary at $BINARY (build it, or pass its path)" >&2
    exit 2
fi
WALLET_BINARY=$(cd "$(dirname "$BINARY")" && pwd)/$(basename "$BINARY")
export WALLET_BINARY

SUITE_START=$(date +%s%N)
is_root() { [ "$(id -u)" = 0 ]; }
apt_install() {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1 || {
        apt-get update -qq >/dev/null 2>&1
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
    }
}

if ! command -v node >/dev/null 2>&1; then
    if is_root; then
        echo "test.sh: installing Debian's nodejs"
        apt_install nodejs
    else
        echo "test.sh: node is missing; install it with: sudo apt-get install nodejs" >&2
        exit 2
    fi
fi
NODE_MAJOR=$(node -p 'process.versions.node.split(".")[0]')
if [ "$NODE_MAJOR" -lt 18 ]; then
    echo "test.sh: node $(node --version) is too old; the client needs Node 18 or later" >&2
    exit 2
fi

cd "$HERE"

# 1. The declarations, as a strict TypeScript program that uses them.
if ! command -v tsc >/dev/null 2>&1 && is_root; then
    echo "test.sh: installing Debian's node-typescript"
    apt_install node-typescript || echo "test.sh: could not install node-typescript" >&2
fi
if command -v tsc >/dev/null 2>&1; then
    tsc --noEmit --strict --target es2022 --module es2022 --moduleResolution node --lib es2022,dom \
        test/types-usage.ts
    echo "tsc $(tsc --version | awk '{print $2}'): index.d.ts checked (test/types-usage.ts, --strict)"
else
    echo "tsc: not installed, so the declaration check is skipped (apt-get install node-typescript)"
fi

# 2. The suite. Every service it starts lives under ROOT; whatever a crash
#    leaves behind (a service, its PostgreSQL) is stopped here.
#    The databases go to memory (/dev/shm) when there is one: the kills hit
#    `wallet serve`, never PostgreSQL, so its disk adds nothing but time.
BASE=${WALLET_TEST_TMPDIR:-}
if [ -z "$BASE" ]; then
    if [ -d /dev/shm ] && [ -w /dev/shm ]; then BASE=/dev/shm; else BASE=${TMPDIR:-/tmp}; fi
fi
ROOT=$(mktemp -d "$BASE/wallet-client-ts.XXXXXX")
chmod 755 "$ROOT"    # as root, PostgreSQL runs as `postgres`, which must reach it
cleanup() {
    for pidfile in "$ROOT"/*/serve.pid; do
        [ -f "$pidfile" ] || continue
        pid=$(cat "$pidfile")
        if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$WALLET_BINARY serve"; then
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
    for pgdata in "$ROOT"/*/data/postgres/pgdata; do
        [ -f "$pgdata/postmaster.pid" ] || continue
        pg_ctl=$(ls -d /usr/lib/postgresql/*/bin/pg_ctl 2>/dev/null | sort -V | tail -1)
        [ -n "$pg_ctl" ] || pg_ctl=$(command -v pg_ctl || true)
        [ -n "$pg_ctl" ] || continue
        if is_root; then
            runuser -u postgres -- "$pg_ctl" -D "$pgdata" stop -m immediate -w -t 30 >/dev/null 2>&1 || true
        else
            "$pg_ctl" -D "$pgdata" stop -m immediate -w -t 30 >/dev/null 2>&1 || true
        fi
    done
    rm -rf "$ROOT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

REPORTER=()
if node --test-reporter=spec -e 0 >/dev/null 2>&1; then REPORTER=(--test-reporter=spec); fi
status=0
WALLET_TEST_ROOT=$ROOT node --test "${REPORTER[@]}" test/wallet.test.js test/chaos.test.js || status=$?

echo
if [ -f "$ROOT/report.txt" ]; then cat "$ROOT/report.txt"; else echo "chaos: no result (the chaos test did not finish)"; fi
SUITE_END=$(date +%s%N)
awk -v ns=$((SUITE_END - SUITE_START)) 'BEGIN { printf "suite wall time: %.1f s\n", ns / 1e9 }'
if [ "$status" -ne 0 ]; then echo "test.sh: FAILED (node --test exited $status)" >&2; fi
exit "$status"
