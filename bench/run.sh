#!/usr/bin/env bash
# Load benchmark of the wallet service against its PostgreSQL reference.
# Run from anywhere: bench/run.sh   (or `make bench`, which installs wrk first)
# Settings: see the header of bench/run.py and bench/README.md.
set -euo pipefail
exec python3 "$(dirname "$0")/run.py" "$@"
