#!/usr/bin/env bash
# Installs the Python client into a throwaway virtual environment and runs
# its tests against the real service.
#
#   clients/python/test.sh [WALLET_BINARY]
#
# The binary is the argument, else $WALLET_BINARY, else <repo>/.build/debug/wallet.
# The tests start it on its embedded development database in temp
# directories (as root too: PostgreSQL then runs as the `postgres` user).
#
# The interpreter is $PYTHON, else the first of /usr/bin/python3 and python3
# (3.11 or later) that has pytest. The venv sees the system's packages
# (Debian's python3-pytest), and the package is installed offline when the
# interpreter has setuptools and wheel; otherwise the wheel is built by
# another local interpreter that has them, and only as a last resort does
# pip fetch build tools (or pytest) from the package index.
#
# Prints the chaos line and the wall time; exits non-zero on any failure.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
STARTED=$(date +%s.%N)

WALLET=${1:-${WALLET_BINARY:-$ROOT/.build/debug/wallet}}
if [ ! -x "$WALLET" ] || [ -d "$WALLET" ]; then
    echo "test.sh: no wallet binary at $WALLET (pass one as the argument or WALLET_BINARY)" >&2
    exit 2
fi
WALLET_BINARY=$(cd "$(dirname "$WALLET")" && pwd)/$(basename "$WALLET")
export WALLET_BINARY

# has PYTHON MODULE...: a Python 3.11 or later that can import every MODULE (found, not imported).
has() {
    "$1" -c 'import sys, importlib.util as u
sys.exit(sys.version_info < (3, 11) or any(u.find_spec(m) is None for m in sys.argv[1:]))' "${@:2}" >/dev/null 2>&1
}

candidates=()
[ -n "${PYTHON:-}" ] && candidates+=("$PYTHON")
candidates+=(/usr/bin/python3 python3)
PY=
for candidate in "${candidates[@]}"; do
    if command -v "$candidate" >/dev/null 2>&1 && has "$candidate" pytest; then PY=$candidate; break; fi
done
NEED_PYTEST=
if [ -z "$PY" ]; then
    for candidate in "${candidates[@]}"; do
        if command -v "$candidate" >/dev/null 2>&1 && has "$candidate" venv; then PY=$candidate; break; fi
    done
    [ -n "$PY" ] || { echo "test.sh: no Python 3.11 or later with venv found" >&2; exit 2; }
    NEED_PYTEST=1
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/wallet-client-python-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

echo "test.sh: $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])'), wallet $WALLET_BINARY"
# Without a pip of its own when the interpreter has one to lend (making
# one takes many seconds); the venv's python installs into the venv either way.
if has "$PY" pip; then
    "$PY" -m venv --system-site-packages --without-pip "$WORK/venv"
else
    "$PY" -m venv --system-site-packages "$WORK/venv"
fi
VPY=$WORK/venv/bin/python

# Install from a copy, so the build leaves nothing in the source tree.
mkdir -p "$WORK/src" "$WORK/dist"
cp -R "$HERE/pyproject.toml" "$HERE/README.md" "$HERE/wallet_client" "$WORK/src/"
if has "$VPY" setuptools wheel; then
    "$VPY" -m pip install --quiet --no-index --no-deps --no-build-isolation "$WORK/src"
    echo "test.sh: installed offline, built with the venv's setuptools"
else
    # Build the wheel with a local interpreter that has setuptools and
    # wheel (Debian's python3-setuptools and python3-wheel), through the
    # PEP 517 backend as pip would, then pip-install the wheel.
    built=
    for builder in /usr/bin/python3 python3; do
        if command -v "$builder" >/dev/null 2>&1 && has "$builder" setuptools wheel \
            && (cd "$WORK/src" && "$builder" -c 'import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])' \
                    "$WORK/dist") >"$WORK/build.log" 2>&1; then
            built=$builder
            break
        fi
    done
    if [ -n "$built" ]; then
        "$VPY" -m pip install --quiet --no-index --no-deps "$WORK"/dist/wallet_client-*.whl
        echo "test.sh: installed offline from a wheel built by $built"
    else
        echo "test.sh: no offline build tools; fetching setuptools from the package index"
        "$VPY" -m pip install --quiet --no-deps "$WORK/src"
    fi
fi
if [ -n "$NEED_PYTEST" ]; then
    echo "test.sh: $PY has no pytest (Debian: python3-pytest); fetching it from the package index"
    "$VPY" -m pip install --quiet pytest
fi
rm -rf "$WORK/src"

# The tests must import the installed package, not the source tree.
(cd "$WORK" && "$VPY" -c 'import sys, wallet_client, pathlib
where = pathlib.Path(wallet_client.__file__).resolve()
assert where.is_relative_to(pathlib.Path(sys.prefix).resolve()), where
assert (where.parent / "py.typed").exists(), "py.typed is not installed"')

export WALLET_CLIENT_CHAOS_REPORT=$WORK/chaos.txt
status=0
(cd "$WORK" && "$VPY" -m pytest -p no:cacheprovider -q -rfE --durations=5 "$HERE/tests") || status=$?

ENDED=$(date +%s.%N)
echo
if [ -s "$WORK/chaos.txt" ]; then cat "$WORK/chaos.txt"; else echo "chaos: no result (the chaos test did not finish)"; fi
echo "python client suite: wall time $(awk -v a="$STARTED" -v b="$ENDED" 'BEGIN { printf "%.1f", b - a }') s (venv, install and tests)"
if [ "$status" -ne 0 ]; then
    echo "python client suite: FAILED (pytest exit $status)" >&2
fi
exit "$status"
