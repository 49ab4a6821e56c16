#!/usr/bin/env bash
# Fuzzes the HTTP API with schemathesis, generated from the service's own
# served /openapi.json, once with an app-backend key and once with a
# game-server key. Checks: no 5xx (not_a_server_error) and every response
# matching its documented schema (response_schema_conformance). Then runs
# `wallet check`: whatever the fuzzer managed to write must keep the books
# balanced.
#
#   Scripts/api-fuzz.sh [path/to/wallet]      (make test runs it)
#
# The service runs on its embedded development database in a temp dir, so
# nothing outside is touched. Bounded by API_FUZZ_SECONDS per key (60).
# One worker: CPython 3.11's ast.parse, which hypothesis calls to describe
# its strategies, can fail with "AST constructor recursion depth mismatch"
# when two threads parse at once.
set -euo pipefail

SCHEMATHESIS_VERSION=4.32.5
SEED=20261202
SECONDS_PER_KEY=${API_FUZZ_SECONDS:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WALLET=${1:-$ROOT/.build/debug/wallet}
VENV=$ROOT/.build/schemathesis-$SCHEMATHESIS_VERSION

if [ ! -x "$VENV/bin/st" ]; then
    echo "api-fuzz: installing schemathesis $SCHEMATHESIS_VERSION into $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi

WORK=$(mktemp -d /tmp/wallet-api-fuzz.XXXXXX)
chmod 755 "$WORK"
SERVER_PID=
cleanup() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID"
        for _ in $(seq 1 100); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export WALLET_DATA_DIR=$WORK/data WALLET_LISTEN=127.0.0.1:$PORT WALLET_LOG_LEVEL=error
unset WALLET_DATABASE_URL
"$WALLET" serve >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVER_PID=$!

for _ in $(seq 1 600); do
    grep -q "game-server (debit, grant, read):" "$WORK/serve.out" 2>/dev/null && break
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/serve.err" >&2; echo "api-fuzz: the service did not start" >&2; exit 1; }
    sleep 0.1
done
APP_KEY=$(awk '/app-backend \(credit, read\):/ {print $NF}' "$WORK/serve.out")
GAME_KEY=$(awk '/game-server \(debit, grant, read\):/ {print $NF}' "$WORK/serve.out")
[ -n "$APP_KEY" ] && [ -n "$GAME_KEY" ] || { echo "api-fuzz: no development keys printed" >&2; exit 1; }

status=0
for key in "$APP_KEY" "$GAME_KEY"; do
    "$VENV/bin/st" run "http://127.0.0.1:$PORT/openapi.json" \
        --checks not_a_server_error,response_schema_conformance \
        --header "Authorization: Bearer $key" \
        --seed "$SEED" --max-time "$SECONDS_PER_KEY" --max-examples 200 \
        --request-timeout 10 --workers 1 --no-color \
        --warnings off --report-dir "$WORK/report" || status=1
done

kill -TERM "$SERVER_PID"
wait "$SERVER_PID" || { echo "api-fuzz: the service did not stop cleanly" >&2; status=1; }
SERVER_PID=
if grep -q '"level":"error"' "$WORK/serve.err"; then
    echo "api-fuzz: the service logged errors:" >&2
    grep '"level":"error"' "$WORK/serve.err" | head -20 >&2
    status=1
fi
"$WALLET" check || status=1
exit $status
