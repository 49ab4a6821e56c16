#!/usr/bin/env bash
# The high-availability database layout on this machine's loopback, from
# Debian's packages and without containers: etcd, two Patroni nodes running
# PostgreSQL 15, HAProxy and PgBouncer (see README.md beside this file).
#
# Run: deploy/ha/local.sh up|down|status|backup [TYPE]
#
#   up      starts whatever is not running, waits until a primary, a
#           streaming synchronous standby and both proxies answer, writes
#           $WALLET_HA_DIR/env and prints the URLs
#   status  each component with its pid and port, whether it answers, and
#           `patronictl list`; exit status 0 only when everything answers
#   backup  on the primary, a pgBackRest backup of TYPE full (the default),
#           diff or incr; or `check` (a WAL switch that must reach the
#           repository) or `info` (the backups and the archive's range)
#   down    stops everything and removes $WALLET_HA_DIR
#
# State (configuration, data, sockets, pid files, logs, and the pgBackRest
# repository both nodes archive to, backup/repo) lives under WALLET_HA_DIR,
# /tmp/wallet-ha by default; `down` removes the backups with it. The ports
# are fixed:
#
#   2379, 2380   etcd client and peer
#   5441, 8008   node pg1: PostgreSQL and Patroni REST API
#   5442, 8009   node pg2: PostgreSQL and Patroni REST API
#   5000, 5001   HAProxy: the primary, the replicas
#   6432         PgBouncer (transaction pooling), in front of port 5000
#
# As root it installs missing Debian packages and runs every component as
# the postgres user; otherwise it runs them as the current user.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir=${WALLET_HA_DIR:-/tmp/wallet-ha}
python=/usr/bin/python3
pg_bin=/usr/lib/postgresql/15/bin

nodes=(pg1 pg2)
declare -A pg_port=([pg1]=5441 [pg2]=5442) rest_port=([pg1]=8008 [pg2]=8009)
etcd_port=2379
etcd_peer_port=2380
primary_port=5000
replica_port=5001
bouncer_port=6432
all_ports=("$etcd_port" "$etcd_peer_port" 5441 5442 8008 8009 "$primary_port" "$replica_port" "$bouncer_port")

packages=(patroni etcd-server haproxy pgbouncer postgresql-15 postgresql-client-15 iproute2 pgbackrest)

# Seconds each wait may take before it gives up.
etcd_ready_seconds_max=15
cluster_ready_seconds_max=60
haproxy_ready_seconds_max=15
bouncer_ready_seconds_max=15
stop_seconds_max=30

# The role the service logs in as; post-bootstrap.sh creates it.
wallet_password=wallet
bouncer_url="postgresql://wallet:$wallet_password@127.0.0.1:$bouncer_port/wallet"
session_url="postgresql://wallet:$wallet_password@127.0.0.1:$primary_port/wallet"
replica_url="postgresql://wallet:$wallet_password@127.0.0.1:$replica_port/wallet"

conf=$dir/conf
run=$dir/run
log=$dir/log
# Marks a directory this script made, so `down` never removes anything else.
marker=$dir/.wallet-ha
# Extra environment variables for the next component `start` runs.
component_env=()

die() {
    echo "local.sh: $*" >&2
    exit 1
}

# Microseconds since the epoch.
now() {
    echo "${EPOCHREALTIME/[.,]/}"
}

# Seconds, with one decimal, since $1 (a value of `now`).
elapsed_since() {
    local micros=$(($(now) - $1))
    printf '%d.%d' $((micros / 1000000)) $((micros % 1000000 / 100000))
}

if [[ $(id -u) == 0 ]]; then
    owner=postgres
    # setpriv execs in place (runuser would stay as a parent process), so the
    # pid recorded is the component's own.
    as_owner=(setpriv --reuid=postgres --regid=postgres --init-groups --)
else
    owner=$(id -un)
    as_owner=()
fi

check_directory() {
    local allowed='^/[A-Za-z0-9._/-]+$' dots='(^|/)\.\.?(/|$)'
    [[ $dir =~ $allowed && ! $dir =~ $dots && $dir != / ]] ||
        die "WALLET_HA_DIR must be an absolute path of letters, digits and ._/- (it is '$dir')"
    if [[ -e $dir && ! -e $marker ]] && [[ -n $(ls -A "$dir" 2>/dev/null) ]]; then
        die "$dir exists and was not made by local.sh; choose another WALLET_HA_DIR"
    fi
}

install_packages() {
    local missing=() package status
    for package in "${packages[@]}"; do
        status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
        [[ $status == "install ok installed" ]] || missing+=("$package")
    done
    [[ ${#missing[@]} == 0 ]] && return 0
    if [[ $(id -u) == 0 ]]; then
        echo "installing: ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
    else
        echo "missing Debian packages; run:"
        echo "  sudo apt-get install -y ${missing[*]}"
        exit 1
    fi
}

# --- processes ----------------------------------------------------------

# Whether pid $1 is a live process (a zombie is not).
pid_alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat%% *} != Z ]]
}

# The pid of component NAME when it runs: its pid file names a live process
# whose command line names this layout's configuration.
component_pid() {
    local pid cmdline
    pid=$(cat "$run/$1.pid" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ ]] && pid_alive "$pid" || return 1
    cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
    [[ $cmdline == *"$conf/"* ]] || return 1
    echo "$pid"
}

port_listening() {
    [[ -n $(ss -Hltn "sport = :$1") ]]
}

# start NAME PORTS COMMAND...: runs COMMAND in a session of its own, as the
# owner, with a clean environment plus component_env, its output appended to
# log/NAME.log. PORTS (space-separated) must be free.
start() {
    local name=$1 ports=$2 port pid
    shift 2
    for port in $ports; do
        if port_listening "$port"; then
            die "$name: port $port is already in use by another process (see: ss -ltnp 'sport = :$port'); a system service from the Debian package, perhaps"
        fi
    done
    # Not a process group leader here, so setsid execs in place too.
    setsid "${as_owner[@]}" env -i PATH=/usr/bin:/bin HOME="$run" LANG=C.UTF-8 TZ=UTC "${component_env[@]}" "$@" \
        >>"$log/$name.log" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$run/$name.pid"
    echo "$name: started, pid $pid"
}

# await LABEL SECONDS WATCHED CHECK...: runs CHECK until it succeeds. Gives
# up, naming LABEL and the logs of WATCHED (component names), after SECONDS,
# or as soon as a watched component has exited.
await() {
    local label=$1 seconds=$2 watched=$3 name logs=()
    shift 3
    local deadline=$(($(now) + seconds * 1000000))
    for name in $watched; do logs+=("$log/$name.log"); done
    until "$@" >/dev/null 2>&1; do
        for name in $watched; do
            component_pid "$name" >/dev/null || die "$label: $name exited; see ${logs[*]}"
        done
        (($(now) < deadline)) || die "$label: not ready after $seconds s; see ${logs[*]}"
        sleep 0.2
    done
}

# stop_pids SECONDS LABEL PID...: SIGTERM, then SIGKILL to what is left
# after SECONDS; returns when all have exited.
stop_pids() {
    local seconds=$1 label=$2 pid left
    shift 2
    [[ $# == 0 ]] && return 0
    kill -TERM "$@" 2>/dev/null || true
    local deadline=$(($(now) + seconds * 1000000))
    while :; do
        left=()
        for pid in "$@"; do pid_alive "$pid" && left+=("$pid"); done
        [[ ${#left[@]} == 0 ]] && return 0
        if (($(now) >= deadline)); then
            echo "$label: still running after $seconds s; killing pid ${left[*]}" >&2
            kill -KILL "${left[@]}" 2>/dev/null || true
            break
        fi
        sleep 0.1
    done
    deadline=$(($(now) + 5 * 1000000))
    for pid in "${left[@]}"; do
        while pid_alive "$pid"; do
            (($(now) < deadline)) || die "$label: pid $pid survives SIGKILL"
            sleep 0.1
        done
    done
}

# The postmaster of node NAME, from its data directory, when it runs.
postmaster_pid() {
    local pid
    pid=$(head -n 1 "$dir/data/$1/postmaster.pid" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ ]] && pid_alive "$pid" || return 1
    [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == "$pg_bin/postgres" ]] || return 1
    echo "$pid"
}

# --- probes -------------------------------------------------------------

# probe etcd | cluster | leader | routes: asks etcd, the Patroni REST APIs or the
# HAProxy stats socket. Prints one line; exit status 0 when healthy.
probe() {
    "$python" - "$@" "$run" "${rest_port[pg1]}" "${rest_port[pg2]}" <<'PY'
import csv, json, socket, sys, urllib.request

what, run, rest_ports = sys.argv[1], sys.argv[2], sys.argv[3:]

def get(url):
    with urllib.request.urlopen(url, timeout=2) as response:
        return json.load(response)

def cluster():
    for port in rest_ports:
        try:
            return get(f"http://127.0.0.1:{port}/cluster")
        except OSError:
            continue
    return None

def health():
    """Names of the leader and of the streaming synchronous standby, or None."""
    members = (cluster() or {}).get("members", [])
    leaders = [m for m in members if m.get("role") == "leader" and m.get("state") == "running"]
    standbys = [m for m in members if m.get("role") == "sync_standby" and m.get("state") in ("running", "streaming")]
    if len(leaders) != 1 or not standbys:
        return None, members
    leader = get(leaders[0]["api_url"])
    streaming = {r.get("application_name") for r in leader.get("replication", [])
                 if r.get("state") == "streaming" and r.get("sync_state") == "sync"}
    standby = next((m["name"] for m in standbys if m["name"] in streaming), None)
    return (leaders[0]["name"], standby) if standby else None, members

def routes():
    """Servers HAProxy sends connections to, per listener; "UP 1/2" is an
    up server that failed one check and still gets connections."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(2)
        connection.connect(f"{run}/haproxy.sock")
        connection.sendall(b"show stat\n")
        data = b""
        while chunk := connection.recv(65536):
            data += chunk
    rows = csv.DictReader(data.decode().lstrip("# ").splitlines())
    up = {"primary": [], "replicas": []}
    for row in rows:
        if row["pxname"] in up and row["svname"] not in ("FRONTEND", "BACKEND") and row["status"].startswith("UP"):
            up[row["pxname"]].append(row["svname"])
    return up

try:
    if what == "etcd":
        ok = get("http://127.0.0.1:2379/health").get("health") == "true"
        print("healthy" if ok else "unhealthy")
    elif what == "cluster":
        pair, members = health()
        ok = pair is not None
        if ok:
            print(f"primary {pair[0]}, streaming synchronous standby {pair[1]}")
        else:
            print("; ".join(f"{m.get('name')} {m.get('role')} {m.get('state')}" for m in members) or "no members")
    elif what == "leader":
        leaders = [m["name"] for m in (cluster() or {}).get("members", []) if m.get("role") == "leader"]
        ok = len(leaders) == 1
        print(leaders[0] if ok else "no leader")
    elif what == "routes":
        # Healthy: port 5000 leads to the Patroni leader only, and port 5001
        # to the standby only.
        up = routes()
        pair, _ = health()
        ok = pair is not None and up["primary"] == [pair[0]] and up["replicas"] == [pair[1]]
        print(f"5000 -> {','.join(up['primary']) or 'none'}; 5001 -> {','.join(up['replicas']) or 'none'}")
    else:
        sys.exit(f"unknown probe {what}")
except (OSError, ValueError, KeyError) as error:
    print(f"no answer ({error})")
    ok = False
sys.exit(0 if ok else 1)
PY
}

bouncer_answers() {
    PGCONNECT_TIMEOUT=2 "$pg_bin/psql" "$bouncer_url" --no-psqlrc -tAc 'SELECT 1' 2>&1
}

bouncer_status() {
    local answer
    answer=$(bouncer_answers) || { echo "$answer"; return 1; }
    echo "SELECT 1 as wallet on the primary"
}

# --- configuration ------------------------------------------------------

secret() {
    od -An -N16 -tx1 /dev/urandom | tr -d ' \n'
}

# Renders every configuration file from the templates beside this script,
# with fresh passwords. Runs once, on the first `up`.
configure() {
    mkdir -p "$conf" "$run" "$log" "$dir/data" "$dir/backup/repo"
    touch "$marker"
    chmod 700 "$dir" "$conf" "$run" "$dir/data" "$dir/backup" "$dir/backup/repo"
    local superuser_password replication_password rest_password node
    superuser_password=$(secret)
    replication_password=$(secret)
    rest_password=$(secret)

    HA_ETCD_DATA_DIR=$dir/data/etcd HA_ETCD_LISTEN_HOST=127.0.0.1 HA_ETCD_HOST=127.0.0.1 \
        "$here/render.sh" "$here/etcd.yml" "$conf/etcd.yml"

    for node in "${nodes[@]}"; do
        HA_NODE=$node \
            HA_PG_LISTEN=127.0.0.1:${pg_port[$node]} HA_PG_ADDRESS=127.0.0.1:${pg_port[$node]} \
            HA_REST_LISTEN=127.0.0.1:${rest_port[$node]} HA_REST_ADDRESS=127.0.0.1:${rest_port[$node]} \
            HA_ETCD_ADDRESS=127.0.0.1:$etcd_port HA_DATA_DIR=$dir/data/$node HA_RUN_DIR=$run \
            HA_POST_BOOTSTRAP=$conf/post-bootstrap.sh \
            HA_SUPERUSER_PASSWORD=$superuser_password HA_REPLICATION_PASSWORD=$replication_password \
            HA_REST_PASSWORD=$rest_password HA_BACKUP_CONFIG=$conf/pgbackrest-$node.conf \
            "$here/render.sh" "$here/patroni.yml" "$conf/$node.yml"
        # One repository, which both nodes reach as a directory of this
        # machine; each node's own data directory, port and lock directory.
        BACKUP_REPO_PATH=$dir/backup/repo BACKUP_PG_DATA=$dir/data/$node BACKUP_PG_SOCKET_DIR=$run \
            BACKUP_PG_PORT=${pg_port[$node]} BACKUP_LOG_DIR=$log BACKUP_LOCK_DIR=$run/pgbackrest-$node \
            "$here/render.sh" "$here/../backup/pgbackrest.conf" "$conf/pgbackrest-$node.conf"
    done
    # The superuser's password, for pgBackRest's connection when it backs up.
    HA_SUPERUSER_PASSWORD=$superuser_password "$here/render.sh" "$here/backup.pgpass" "$conf/backup.pgpass"
    install -m 700 "$here/post-bootstrap.sh" "$conf/post-bootstrap.sh"

    HA_HAPROXY_LISTEN=127.0.0.1 HA_RUN_DIR=$run \
        HA_PG1_ADDRESS=127.0.0.1:${pg_port[pg1]} HA_PG1_REST_PORT=${rest_port[pg1]} \
        HA_PG2_ADDRESS=127.0.0.1:${pg_port[pg2]} HA_PG2_REST_PORT=${rest_port[pg2]} \
        "$here/render.sh" "$here/haproxy.cfg" "$conf/haproxy.cfg"

    HA_BOUNCER_LISTEN=127.0.0.1 HA_HAPROXY_HOST=127.0.0.1 HA_RUN_DIR=$run HA_CONF_DIR=$conf \
        "$here/render.sh" "$here/pgbouncer.ini" "$conf/pgbouncer.ini"
    HA_WALLET_PASSWORD=$wallet_password "$here/render.sh" "$here/userlist.txt" "$conf/userlist.txt"

    [[ $owner == "$(id -un)" ]] || chown -R "$owner:" "$dir"
}

write_env() {
    cat >"$dir/env" <<EOF
# Written by deploy/ha/local.sh up. Use: . $dir/env
export WALLET_DATABASE_URL=$bouncer_url
export WALLET_DATABASE_SESSION_URL=$session_url
export WALLET_DATABASE_PREPARED_STATEMENTS=false
export WALLET_HA_DIR=$dir
export WALLET_HA_PATRONICTL="patronictl -c $conf/pg1.yml"
EOF
    chmod 644 "$dir/env"
}

print_urls() {
    cat <<EOF
through PgBouncer:    $bouncer_url
primary, no pooling:  $session_url
replicas:             $replica_url
patronictl:           patronictl -c $conf/pg1.yml list
environment:          . $dir/env
EOF
}

# --- commands -----------------------------------------------------------

everything_answers() {
    local name
    for name in etcd pg1 pg2 haproxy pgbouncer; do component_pid "$name" >/dev/null || return 1; done
    probe routes >/dev/null && bouncer_answers >/dev/null
}

up() {
    local started node
    started=$(now)
    check_directory
    install_packages
    if [[ -e $marker ]] && everything_answers; then
        echo "already running ($dir)"
        print_urls
        return 0
    fi
    [[ -e $conf/pgbouncer.ini ]] || configure

    component_env=()
    if ! component_pid etcd >/dev/null; then
        start etcd "$etcd_port $etcd_peer_port" /usr/bin/etcd --config-file "$conf/etcd.yml"
    fi
    await "etcd on 127.0.0.1:$etcd_port" "$etcd_ready_seconds_max" etcd probe etcd

    for node in "${nodes[@]}"; do
        component_env=(HA_WALLET_PASSWORD="$wallet_password" HA_BACKUP_CONFIG="$conf/pgbackrest-$node.conf")
        if ! component_pid "$node" >/dev/null; then
            start "$node" "${pg_port[$node]} ${rest_port[$node]}" /usr/bin/patroni "$conf/$node.yml"
        fi
    done
    await "Patroni cluster (a primary and a streaming synchronous standby)" "$cluster_ready_seconds_max" "pg1 pg2" \
        probe cluster
    echo "patroni: $(probe cluster)"

    component_env=()
    if ! component_pid haproxy >/dev/null; then
        start haproxy "$primary_port $replica_port" /usr/sbin/haproxy -db -f "$conf/haproxy.cfg"
    fi
    await "HAProxy routing port $primary_port to the primary and $replica_port to the standby" "$haproxy_ready_seconds_max" "haproxy pg1 pg2" \
        probe routes
    echo "haproxy: $(probe routes)"

    if ! component_pid pgbouncer >/dev/null; then
        start pgbouncer "$bouncer_port" /usr/sbin/pgbouncer "$conf/pgbouncer.ini"
    fi
    await "PgBouncer on 127.0.0.1:$bouncer_port (SELECT 1 as wallet)" "$bouncer_ready_seconds_max" "pgbouncer haproxy" \
        bouncer_answers

    write_env
    echo "up in $(elapsed_since "$started") s ($dir)"
    print_urls
}

status() {
    local healthy=0 name pid state
    if [[ ! -e $marker ]]; then
        echo "not running ($dir does not exist)"
        return 1
    fi
    # line NAME PORTS CHECK...: one line per component.
    line() {
        local name=$1 ports=$2 answer
        shift 2
        pid=$(component_pid "$name") || pid=-
        if [[ $pid == - ]]; then
            answer="not running"
            healthy=1
        elif answer=$("$@" 2>&1); then
            answer="answers: $answer"
        else
            answer="does not answer: ${answer:-no output}"
            healthy=1
        fi
        printf '%-10s pid %-8s %-26s %s\n' "$name" "$pid" "$ports" "${answer//$'\n'/ }"
    }
    node_state() {
        local node=$1 role
        role=$("$python" -c 'import json, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=2) as response: node = json.load(response)
print(node.get("role"), node.get("state"))' "http://127.0.0.1:${rest_port[$node]}/patroni" 2>/dev/null) || {
            echo "REST API silent"
            return 1
        }
        if ! "$pg_bin/pg_isready" -q -h 127.0.0.1 -p "${pg_port[$node]}" -t 2; then
            echo "$role; PostgreSQL not accepting connections"
            return 1
        fi
        echo "$role; PostgreSQL pid $(postmaster_pid "$node" || echo ?) accepting connections"
    }
    line etcd "127.0.0.1:$etcd_port" probe etcd
    for name in "${nodes[@]}"; do
        line "$name" "127.0.0.1:${pg_port[$name]} REST :${rest_port[$name]}" node_state "$name"
    done
    line haproxy "127.0.0.1:$primary_port,$replica_port" probe routes
    line pgbouncer "127.0.0.1:$bouncer_port" bouncer_status
    if state=$(probe cluster); then echo "cluster:   $state"; else echo "cluster:   not ready: $state"; healthy=1; fi
    echo
    timeout 10 patronictl -c "$conf/pg1.yml" list || healthy=1
    return "$healthy"
}

down() {
    local started name pids=() pid
    started=$(now)
    check_directory
    if [[ ! -e $dir ]]; then
        echo "nothing to stop ($dir does not exist)"
        return 0
    fi
    for name in pgbouncer haproxy; do
        pid=$(component_pid "$name") && stop_pids "$stop_seconds_max" "$name" "$pid"
    done
    # The standby first: stopping, it waits for the primary to take it out
    # of the synchronous set, and a primary stopped first would hand over to
    # it. With no leader known, both at once.
    local leader
    leader=$(probe leader 2>/dev/null) || leader=
    for name in "${nodes[@]}"; do
        [[ $name == "$leader" ]] && continue
        pid=$(component_pid "$name") && pids+=("$pid")
    done
    [[ -n $leader ]] && stop_pids "$stop_seconds_max" "patroni (standby)" "${pids[@]}" && pids=()
    pid=$(component_pid "$leader") && pids+=("$pid")
    stop_pids "$stop_seconds_max" "patroni" "${pids[@]}"
    # A PostgreSQL left behind by a Patroni that had to be killed.
    pids=()
    for name in "${nodes[@]}"; do
        pid=$(postmaster_pid "$name") && pids+=("$pid")
    done
    if [[ ${#pids[@]} -gt 0 ]]; then
        kill -QUIT "${pids[@]}" 2>/dev/null || true
        stop_pids 10 "postgres" "${pids[@]}"
    fi
    pid=$(component_pid etcd) && stop_pids "$stop_seconds_max" etcd "$pid"

    # A program of the layout still naming this directory (a pg_basebackup,
    # a post-bootstrap psql) lost its parent, so it goes too.
    pids=()
    local exe cmdline
    for pid in /proc/[0-9]*; do
        pid=${pid#/proc/}
        exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || continue
        [[ $exe == "$pg_bin/"* || $exe == /usr/bin/etcd || $exe == /usr/sbin/haproxy || $exe == /usr/sbin/pgbouncer ]] ||
            continue
        cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || continue
        [[ $cmdline == *"$dir/"* ]] && pids+=("$pid")
    done
    [[ ${#pids[@]} -gt 0 ]] && stop_pids 5 "leftover" "${pids[@]}"

    local port busy=()
    for port in "${all_ports[@]}"; do port_listening "$port" && busy+=("$port"); done
    [[ ${#busy[@]} == 0 ]] ||
        die "the layout is stopped, but other processes listen on port ${busy[*]} (ss -ltnp); $dir kept until they are gone"
    rm -rf "$dir"
    echo "down in $(elapsed_since "$started") s; removed $dir"
}

# backup TYPE: pgBackRest on the node that is primary, as the owner, with
# the superuser's password file.
backup() {
    local type=${1:-full} leader command
    [[ $type =~ ^(full|diff|incr|check|info)$ ]] || die "backup: TYPE is full, diff, incr, check or info, not '$type'"
    [[ -e $marker ]] || die "not running ($dir does not exist)"
    leader=$(probe leader) || die "backup: no primary ($leader)"
    case $type in
        check | info) command=("$type") ;;
        *) command=(backup "--type=$type") ;;
    esac
    echo "backup: $type on $leader"
    "${as_owner[@]}" env -i PATH=/usr/bin:/bin PGPASSFILE="$conf/backup.pgpass" \
        pgbackrest --config="$conf/pgbackrest-$leader.conf" --stanza=wallet "${command[@]}"
}

case ${1:-} in
    up) up ;;
    down) down ;;
    status) status ;;
    backup) backup "${2:-full}" ;;
    *)
        echo "usage: $0 up|down|status|backup [full|diff|incr|check|info]" >&2
        exit 2
        ;;
esac
