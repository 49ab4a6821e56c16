#!/usr/bin/env bash
# Runs the three examples against `wallet serve` on its embedded development
# database, as `make run` starts it, and checks what they did through the API:
#
#   1. the app backend (TypeScript) credits a purchase, gets a replay for the
#      same transaction, and holds a conflicting claim for support;
#   2. the game shop (Swift) sells an item (hold, delivery, capture) and
#      releases the hold of a failed delivery;
#   3. an operator refunds purchases with Scripts/admin/refund.sql, one of
#      them from a player who had spent the coins: the shop, following the
#      event feed, takes the item back, and the ops script (Python) lists
#      that player's negative balance, but not a player who repaid the debt.
#
#   examples/run.sh [WALLET_BINARY] [GAME_SHOP_BINARY]
#
# WALLET_BINARY defaults to <repo>/.build/debug/wallet. Without
# GAME_SHOP_BINARY the shop is built first (`swift build --product
# GameShopExample`, reusing .build). Needs node 18+ with tsc (Debian's nodejs
# and node-typescript, installed here when missing and run as root) and
# python3 3.11+. Exits non-zero on any mismatch. EXAMPLES_KEEP=1 keeps the
# service's directory and logs.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
WALLET=${1:-$REPO/.build/debug/wallet}
SHOP=${2:-}
[ -x "$WALLET" ] || { echo "run.sh: no wallet binary at $WALLET (build it, or pass its path)" >&2; exit 2; }
WALLET=$(cd "$(dirname "$WALLET")" && pwd)/$(basename "$WALLET")

is_root() { [ "$(id -u)" = 0 ]; }
apt_install() {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1 || {
        apt-get update -qq >/dev/null 2>&1
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
    }
}
for tool in node:nodejs tsc:node-typescript; do
    if ! command -v "${tool%%:*}" >/dev/null 2>&1; then
        if is_root; then
            echo "run.sh: installing Debian's ${tool#*:}"
            apt_install "${tool#*:}"
        else
            echo "run.sh: ${tool%%:*} is missing; install it with: sudo apt-get install ${tool#*:}" >&2
            exit 2
        fi
    fi
done

# The shop, built as `make test` builds (same flags, so nothing is rebuilt).
if [ -z "$SHOP" ]; then
    echo "run.sh: building GameShopExample"
    BUILD_LOG=$(mktemp)
    if ! (cd "$REPO" && timeout 3600 swift build --product GameShopExample -Xswiftc -warnings-as-errors) >"$BUILD_LOG" 2>&1; then
        cat "$BUILD_LOG" >&2; rm -f "$BUILD_LOG"; echo "run.sh: the shop did not build" >&2; exit 1
    fi
    rm -f "$BUILD_LOG"
    SHOP=$(cd "$REPO" && timeout 300 swift build --show-bin-path -Xswiftc -warnings-as-errors)/GameShopExample
fi
[ -x "$SHOP" ] || { echo "run.sh: no game shop binary at $SHOP" >&2; exit 2; }

START=$(date +%s%N)
elapsed() { awk -v ns=$(($(date +%s%N) - START)) 'BEGIN { printf "%.1f", ns / 1e9 }'; }

# The app backend, compiled by tsc into examples/app-backend/dist.
timeout 60 tsc -p "$HERE/app-backend"

BASE=/tmp
if [ -d /dev/shm ] && [ -w /dev/shm ]; then BASE=/dev/shm; fi
WORK=$(mktemp -d "$BASE/wallet-examples.XXXXXX")
chmod 755 "$WORK"    # as root, PostgreSQL runs as `postgres`, which must reach it
SERVER_PID=
stop_service() {    # SIGTERM, then up to 30 s for it to stop its PostgreSQL and exit
    kill -TERM "$SERVER_PID" 2>/dev/null || return 0
    for _ in $(seq 1 300); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -KILL "$SERVER_PID" 2>/dev/null || true
        return 1
    fi
}
cleanup() {
    if [ -n "$SERVER_PID" ]; then
        stop_service || true
        # A service killed above leaves its PostgreSQL running: stop that too.
        pgdata=$WORK/data/postgres/pgdata
        pg_ctl=$(ls -d /usr/lib/postgresql/*/bin/pg_ctl 2>/dev/null | sort -V | tail -1 || true)
        if [ -f "$pgdata/postmaster.pid" ] && [ -n "$pg_ctl" ]; then
            if is_root; then runuser -u postgres -- "$pg_ctl" -D "$pgdata" stop -m immediate -w -t 30 >/dev/null 2>&1 || true
            else "$pg_ctl" -D "$pgdata" stop -m immediate -w -t 30 >/dev/null 2>&1 || true; fi
        fi
    fi
    if [ "${EXAMPLES_KEEP:-}" = 1 ]; then echo "run.sh: kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The service's environment is `make run`'s: the data directory and the
# address, and no other WALLET_ setting from this shell.
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
URL=http://127.0.0.1:$PORT
SERVICE_ENV=(env)
for name in $(compgen -e | grep '^WALLET_' || true); do SERVICE_ENV+=(-u "$name"); done
SERVICE_ENV+=(WALLET_DATA_DIR="$WORK/data" WALLET_LISTEN="127.0.0.1:$PORT")
WALLET_CMD=("${SERVICE_ENV[@]}" "$WALLET")

"${WALLET_CMD[@]}" serve >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVER_PID=$!
for _ in $(seq 1 450); do
    grep -q "game-server (debit, grant, read):" "$WORK/serve.out" 2>/dev/null && break
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/serve.err" >&2; echo "run.sh: the service did not start" >&2; exit 1; }
    sleep 0.1
done
APP_KEY=$(awk '/app-backend \(credit, read\):/ {print $NF}' "$WORK/serve.out")
GAME_KEY=$(awk '/game-server \(debit, grant, read\):/ {print $NF}' "$WORK/serve.out")
[ -n "$APP_KEY" ] && [ -n "$GAME_KEY" ] || { echo "run.sh: no development keys printed within 45 s" >&2; exit 1; }
EVENTS_KEY=$(timeout 30 "${WALLET_CMD[@]}" keys create --name examples-events --scopes events,read | tail -1) \
    || { echo "run.sh: could not create the examples-events key" >&2; exit 1; }
echo "run.sh: wallet serve on $URL ($(elapsed) s); keys: app-backend, game-server, examples-events (events,read)"

# The checks.
checks=0
failures=0
pass() { checks=$((checks + 1)); echo "  ok: $1"; }
fail() { checks=$((checks + 1)); failures=$((failures + 1)); echo "  MISMATCH: $1" >&2; }
check() {    # check WHAT ACTUAL EXPECTED
    if [ "$2" = "$3" ]; then pass "$1 ($2)"; else fail "$1: got '$2', expected '$3'"; fi
}
has_line() {    # has_line WHAT FILE EXTENDED-REGEX
    if grep -Eq -- "$3" "$2"; then pass "$1"; else fail "$1: no line matching /$3/ in:"; sed 's/^/    | /' "$2" >&2; fi
}
no_line() {    # no_line WHAT FILE EXTENDED-REGEX
    if grep -Eq -- "$3" "$2"; then fail "$1: a line matches /$3/:"; grep -E -- "$3" "$2" | sed 's/^/    | /' >&2; else pass "$1"; fi
}
# One read through the Python client, with the game server's read scope:
# `api 'EXPRESSION'` prints the expression, `w` being the client.
api() {
    timeout 20 python3 - "$REPO/clients/python" "$URL" "$GAME_KEY" "$1" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
from wallet_client import WalletClient
with WalletClient(sys.argv[2], sys.argv[3]) as w:
    print(eval(sys.argv[4]))
EOF
}
balance() { api "w.get_wallet('$1').currency('coin').balance"; }
run() {    # run NAME COMMAND...: the output to $WORK/NAME.out, shown indented
    local status=0
    timeout 30 "${@:2}" >"$WORK/$1.out" 2>&1 || status=$?
    sed 's/^/    | /' "$WORK/$1.out"
    return $status
}
# The three examples, each with its own key.
app=(env WALLET_URL="$URL" WALLET_APP_KEY="$APP_KEY" node "$HERE/app-backend/dist/main.js")
shop=(env WALLET_URL="$URL" WALLET_GAME_KEY="$GAME_KEY" WALLET_EVENTS_KEY="$EVENTS_KEY" SHOP_STATE="$WORK/shop-state.json" "$SHOP")
ops=(env WALLET_URL="$URL" WALLET_OPS_KEY="$EVENTS_KEY" python3 "$HERE/ops/negative_balances.py")
refund() {    # refund NAME FLOW_NO: Scripts/admin/refund.sql through `wallet psql`
    run "$1" "${WALLET_CMD[@]}" psql -- -X -q -v ON_ERROR_STOP=1 -v flow_no="$2" -v reason=chargeback -v operator=examples \
        -f "$REPO/Scripts/admin/refund.sql"
}

echo "1. app backend: a purchase reported twice, then claimed for another player"
status=0; run app-demo "${app[@]}" demo --user player-ann --other-user player-bob --product guodong600 --transaction 2000000001 || status=$?
check "the demo's answers were the service's promises (exit status)" "$status" 0
has_line "the first report credits" "$WORK/app-demo.out" '^   purchase 2000000001 .*: credited \(600 coin, balance 600\) -> app: finish the transaction'
has_line "the second report is a replay" "$WORK/app-demo.out" '^   purchase 2000000001 .*: already_credited .* -> app: finish the transaction'
has_line "the other player's claim goes to support" "$WORK/app-demo.out" '^   purchase 2000000001 \(guodong600 for player-bob\): needs_support \(wallet said flow_no_conflict\)'
has_line "an unknown product keeps the transaction" "$WORK/app-demo.out" 'blocked \(wallet said unknown_product\) -> app: keep the transaction'
check "player-ann's balance: the credit applied once" "$(balance player-ann)" 600
check "player-ann's ledger: one entry for transaction 2000000001" \
    "$(api "sum(1 for e in w.iter_entries('player-ann') if e.reference == '2000000001')")" 1
check "player-bob got nothing" "$(balance player-bob)" 0
status=0
run app-cat "${app[@]}" credit --user player-cat --product guodong1200 --transaction 2000000003 || status=$?
run app-dan "${app[@]}" credit --user player-dan --product guodong600 --transaction 2000000004 || status=$((status + $?))
check "two more purchases credited (exit statuses)" "$status" 0

echo "2. game shop: a sale, and a sale whose delivery fails"
run shop-sword "${shop[@]}" sell --user player-ann --item sword || fail "shop sell sword exited non-zero"
has_line "the sword is sold: hold captured" "$WORK/shop-sword.out" '^sold sword to player-ann for 500 coin: hold [0-9]+ captured, debit [0-9]+; balance 100 '
run shop-potion "${shop[@]}" sell --user player-ann --item potion --fail-delivery || fail "shop sell potion exited non-zero"
has_line "the potion's delivery fails: hold released" "$WORK/shop-potion.out" '^delivery of potion to player-ann failed .*: hold [0-9]+ released; balance 100, available 100 '
check "player-ann's holds: one captured for 500, one released" \
    "$(api "sorted((h.status, h.captured_amount) for h in w.list_holds('player-ann').holds)")" \
    "[('captured', 500), ('released', None)]"
check "player-ann's balance after the sale" "$(balance player-ann)" 100
run shop-shield "${shop[@]}" sell --user player-dan --item shield --order order-shield-1 || fail "shop sell shield exited non-zero"
has_line "the shield is sold" "$WORK/shop-shield.out" '^sold shield to player-dan for 300 coin: .*; balance 300 '
run shop-shield-again "${shop[@]}" sell --user player-dan --item shield --order order-shield-1 \
    || fail "shop sell shield again exited non-zero"
has_line "the same order again sells nothing twice" "$WORK/shop-shield-again.out" '^order order-shield-1 has ended: delivered$'
check "player-dan paid once" "$(balance player-dan)" 300
run shop-follow-1 "${shop[@]}" follow || fail "shop follow exited non-zero"
has_line "the feed so far takes nothing back" "$WORK/shop-follow-1.out" '^followed the feed after event 0 to event [0-9]+: [0-9]+ event\(s\), 0 item\(s\) revoked$'

echo "3. refunds by an operator: coins spent (ann, dan) and unspent (cat); dan then buys again"
refund refund-ann 2000000001 || fail "refund.sql for 2000000001 failed"
has_line "ann's refund leaves a debt" "$WORK/refund-ann.out" '^refunded flowNO 2000000001: 600 coin from user player-ann, balance -500 '
refund refund-cat 2000000003 || fail "refund.sql for 2000000003 failed"
has_line "cat's refund takes the unspent coins" "$WORK/refund-cat.out" '^refunded flowNO 2000000003: 1200 coin from user player-cat, balance 0 '
refund refund-dan 2000000004 || fail "refund.sql for 2000000004 failed"
has_line "dan's refund leaves a debt" "$WORK/refund-dan.out" '^refunded flowNO 2000000004: 600 coin from user player-dan, balance -300 '
run app-ann-again "${app[@]}" credit --user player-ann --product guodong600 --transaction 2000000001 \
    || fail "the app backend's answer to a refunded purchase reported again"
has_line "a refunded purchase reported again is a replay: nothing credited" "$WORK/app-ann-again.out" \
    '^purchase 2000000001 .*: already_credited \(600 coin, balance -500\) -> app: finish the transaction; "This purchase was credited, then refunded."$'
run app-dan-2 "${app[@]}" credit --user player-dan --product guodong1200 --transaction 2000000005 || fail "dan's second purchase"
check "dan's new purchase repaid the debt first" "$(balance player-dan)" 900

run shop-follow-2 "${shop[@]}" follow || fail "shop follow exited non-zero"
has_line "the shop takes the sword back from ann" "$WORK/shop-follow-2.out" '^revoke sword from player-ann \(order [^)]*, paid 500 coin\): refund of flowNO 2000000001 left a debt of 500 coin$'
has_line "the shop takes the shield back from dan" "$WORK/shop-follow-2.out" '^revoke shield from player-dan \(order [^)]*, paid 300 coin\): refund of flowNO 2000000004 left a debt of 300 coin$'
has_line "ann's balance.negative is covered by that, not revoked twice" "$WORK/shop-follow-2.out" '^player-ann owes 500 coin: items worth 500 coin already revoked'
has_line "cat's refund takes nothing" "$WORK/shop-follow-2.out" '^refund of flowNO 2000000003 for player-cat: nothing to take back'
check "items revoked in all" "$(grep -c '^revoke ' "$WORK/shop-follow-2.out" || true)" 2
run shop-follow-3 "${shop[@]}" follow || fail "shop follow exited non-zero"
has_line "a second walk of the feed revokes nothing more" "$WORK/shop-follow-3.out" ': 0 event\(s\), 0 item\(s\) revoked$'
run shop-inventory "${shop[@]}" inventory || fail "shop inventory exited non-zero"
check "nobody keeps an item bought with refunded coins" "$(cat "$WORK/shop-inventory.out")" "inventory: empty"
run shop-refused "${shop[@]}" sell --user player-ann --item potion || fail "shop sell while in debt exited non-zero"
has_line "a player in debt cannot buy" "$WORK/shop-refused.out" '^refused potion for player-ann .*available -500, balance -500; the player owes coins'

echo "4. ops: negative balances"
status=0; run ops "${ops[@]}" || status=$?
check "the ops script's exit status" "$status" 0
has_line "ann is listed with her debt" "$WORK/ops.out" '^player-ann +coin +-500 +500 '
no_line "dan, who repaid, is not listed" "$WORK/ops.out" '^player-dan '
no_line "cat, who never went below zero, is not listed" "$WORK/ops.out" '^player-cat '
has_line "one negative balance in all" "$WORK/ops.out" '^1 negative balance\(s\); owed in all: 500 coin$'

if timeout 30 "${WALLET_CMD[@]}" check >"$WORK/check.out" 2>&1; then pass "wallet check: the books balance"; else fail "wallet check:"; cat "$WORK/check.out" >&2; fi

status=0; stop_service || status=$?
if [ "$status" = 0 ]; then wait "$SERVER_PID" || status=$?; fi
SERVER_PID=
check "the service stopped on SIGTERM (exit status)" "$status" 0
if grep -q '"level":"error"' "$WORK/serve.err"; then
    fail "the service logged errors:"; grep '"level":"error"' "$WORK/serve.err" | head -20 >&2
fi

echo "examples: $((checks - failures)) passed, $failures failed"
echo "examples: wall time $(elapsed) s (the Swift build excluded)"
[ "$failures" = 0 ]
