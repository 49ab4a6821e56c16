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
# Patroni answers 200 on /primary on the leader only.
if ! python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/primary", timeout=5)' "$rest" 2>/dev/null; then
    echo "backup.sh: this node is not the primary ($rest/primary); nothing to do"
    exit 0
fi
PGPASSFILE=${HA_BACKUP_PGPASS:-/run/wallet-ha/backup.pgpass}
export PGPASSFILE
exec pgbackrest --config="${HA_BACKUP_CONFIG:-/run/wallet-ha/pgbackrest.conf}" --stanza=wallet --type="$type" backup
