#!/bin/sh
# One pgBackRest backup of the cluster, taken on whichever node is primary:
# run it on every node at the same times (a systemd timer or cron, as in
# deploy/backup/), and the standby does nothing.
#
# Run: deploy/ha/backup.sh full|diff|incr
#      (compose: docker compose -f deploy/ha/docker-compose.yml exec pg1 wallet-ha-backup full,
#       and the same for pg2; local.sh: deploy/ha/local.sh backup full)
#
# Where things are, with the compose containers' values as defaults:
# HA_BACKUP_CONFIG (/run/wallet-ha/pgbackrest.conf), HA_BACKUP_PGPASS
# (/run/wallet-ha/backup.pgpass, the superuser's password for pgBackRest's
# connection) and HA_REST_URL (http://127.0.0.1:8008, the node's Patroni).
set -eu
type=${1:-}
case $type in
    full | diff | incr) ;;
    *)
        echo "usage: backup.sh full|diff|incr" >&2
        exit 2
        ;;
esac
rest=${HA_REST_URL:-http://127.0.0.1:8008}
# Patroni answers 200 on /primary on the leader only, and 503 elsewhere;
# no answer at all is an error, not a standby: a backup must not be skipped
# silently because Patroni is down.
role=$(python3 - "$rest" <<'PY'
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(sys.argv[1] + "/primary", timeout=5)
    print("primary")
except urllib.error.HTTPError:
    print("standby")
except OSError as error:
    print(f"unreachable: {error}")
PY
)
case $role in
    primary) ;;
    standby)
        echo "backup.sh: this node is not the primary ($rest/primary); nothing to do"
        exit 0
        ;;
    *)
        echo "backup.sh: cannot ask Patroni whether this node is the primary ($rest/primary): $role" >&2
        exit 1
        ;;
esac
PGPASSFILE=${HA_BACKUP_PGPASS:-/run/wallet-ha/backup.pgpass}
export PGPASSFILE
exec pgbackrest --config="${HA_BACKUP_CONFIG:-/run/wallet-ha/pgbackrest.conf}" --stanza=wallet --type="$type" backup
