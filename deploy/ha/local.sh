#!/usr/bin/env bash
# The high-availability database layout on this machine's loopback, from
# Debian's packages and without containers: three etcd members, three
# Patroni nodes running PostgreSQL 15, two HAProxy instances and two
# PgBouncer instances, one for each service instance (see README.md beside
# this file).
#
# Run: deploy/ha/local.sh up|down|status|backup [TYPE]
#
#   up      starts whatever is not running, waits until every component
#           answers (a primary, a streaming synchronous standby and a second
#           streaming standby; both HAProxies routing to them; both
#           PgBouncers reaching the primary), writes $WALLET_HA_DIR/env and
#           prints the URLs
#   status  each component with its pid and port, whether it answers, and
#           `patronictl list`; exit status 0 only when everything answers
#   backup  on the primary, a pgBackRest backup of TYPE full (the default),
#           diff or incr; or `check` (a WAL switch that must reach the
#           repository) or `info` (the backups and the archive's range)
#   down    stops everything and removes $WALLET_HA_DIR
#
# State (configuration, data, sockets, pid files, logs, and the pgBackRest
# repository every node archives to, backup/repo) lives under WALLET_HA_DIR,
# /tmp/wallet-ha by default; `down` removes the backups with it. The
# addresses are fixed:
#
#   127.0.0.1:2379, 2380     etcd member etcd1: client and peer
#   127.0.0.1:22379, 22380   etcd member etcd2
#   127.0.0.1:32379, 32380   etcd member etcd3
#   127.0.0.1:5441, 8008     node pg1: PostgreSQL and Patroni REST API
#   127.0.0.1:5442, 8009     node pg2
#   127.0.0.1:5443, 8010     node pg3
#   127.0.0.1:5000, 5001     haproxy1: the primary, the replicas
#   127.0.0.2:5000, 5001     haproxy2 (127.0.0.2 is loopback too)
#   127.0.0.1:6432           pgbouncer1 (transaction pooling), for the first
#                            service instance, reaching either HAProxy
#   127.0.0.1:6433           pgbouncer2, for the second
#
# As root it installs missing Debian packages and runs every component as
# the postgres user; otherwise it runs them as the current user.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir=${WALLET_HA_DIR:-/tmp/wallet-ha}
python=/usr/bin/python3
pg_bin=/usr/lib/postgresql/15/bin

members=(etcd1 etcd2 etcd3)
declare -A etcd_port=([etcd1]=2379 [etcd2]=22379 [etcd3]=32379) \
    etcd_peer_port=([etcd1]=2380 [etcd2]=22380 [etcd3]=32380)
nodes=(pg1 pg2 pg3)
declare -A pg_port=([pg1]=5441 [pg2]=5442 [pg3]=5443) rest_port=([pg1]=8008 [pg2]=8009 [pg3]=8010)
# Each node talks to its own etcd member first.
declare -A node_member=([pg1]=etcd1 [pg2]=etcd2 [pg3]=etcd3)
proxies=(haproxy1 haproxy2)
declare -A proxy_host=([haproxy1]=127.0.0.1 [haproxy2]=127.0.0.2)
primary_port=5000
replica_port=5001
bouncers=(pgbouncer1 pgbouncer2)
declare -A bouncer_port=([pgbouncer1]=6432 [pgbouncer2]=6433)
# Every address:port the layout listens on.
all_addresses=()
for name in "${members[@]}"; do all_addresses+=("127.0.0.1:${etcd_port[$name]}" "127.0.0.1:${etcd_peer_port[$name]}"); done
for name in "${nodes[@]}"; do all_addresses+=("127.0.0.1:${pg_port[$name]}" "127.0.0.1:${rest_port[$name]}"); done
for name in "${proxies[@]}"; do all_addresses+=("${proxy_host[$name]}:$primary_port" "${proxy_host[$name]}:$replica_port"); done
for name in "${bouncers[@]}"; do all_addresses+=("127.0.0.1:${bouncer_port[$name]}"); done

packages=(patroni etcd-server haproxy pgbouncer postgresql-15 postgresql-client-15 iproute2 pgbackrest)

# Seconds each wait may take before it gives up.
etcd_ready_seconds_max=20
cluster_ready_seconds_max=60
haproxy_ready_seconds_max=15
bouncer_ready_seconds_max=15
stop_seconds_max=30
etcd_stop_seconds_max=3

# The role the service logs in as; post-bootstrap.sh creates it.
wallet_password=wallet
# Each service instance lists its own PgBouncer first and the other second:
# libpq tries them in order, so an instance whose PgBouncer is gone keeps
# working through the other. Sessions go to either HAProxy the same way.
bouncer_url="postgresql://wallet:$wallet_password@127.0.0.1:6432,127.0.0.1:6433/wallet"
bouncer2_url="postgresql://wallet:$wallet_password@127.0.0.1:6433,127.0.0.1:6432/wallet"
session_url="postgresql://wallet:$wallet_password@127.0.0.1:$primary_port,127.0.0.2:$primary_port/wallet"
replica_url="postgresql://wallet:$wallet_password@127.0.0.1:$replica_port,127.0.0.2:$replica_port/wallet"

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

# Whether something listens on ADDRESS:PORT, on that address or on every
# address.
address_listening() {
    local port=${1##*:} local_address
    for local_address in $(ss -Hltn "sport = :$port" | awk '{print $4}'); do
        case $local_address in
            "$1" | "0.0.0.0:$port" | "*:$port" | "[::]:$port") return 0 ;;
        esac
    done
    return 1
}

# start NAME ADDRESSES COMMAND...: runs COMMAND in a session of its own, as
# the owner, with a clean environment plus component_env, its output appended
# to log/NAME.log. ADDRESSES (address:port, space-separated) must be free.
start() {
    local name=$1 addresses=$2 address pid
    shift 2
    for address in $addresses; do
        if address_listening "$address"; then
            die "$name: $address is already in use by another process (see: ss -ltnp 'sport = :${address##*:}'); a system service from the Debian package, perhaps"
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

# probe etcd [MEMBER] | cluster | leader | routes HAPROXY: asks the etcd
# members (all, or one), the Patroni REST APIs or an HAProxy's stats socket.
# Prints one line; exit status 0 when healthy.
probe() {
    local member rest_ports=() etcd_ports=()
    for member in "${nodes[@]}"; do rest_ports+=("${rest_port[$member]}"); done
    for member in "${members[@]}"; do etcd_ports+=("$member=${etcd_port[$member]}"); done
    HA_PROBE_RUN=$run HA_PROBE_REST_PORTS="${rest_ports[*]}" HA_PROBE_ETCD="${etcd_ports[*]}" \
        "$python" - "$@" <<'PY'
import csv, json, os, socket, sys, urllib.request

what, argument = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else None)
run = os.environ["HA_PROBE_RUN"]
rest_ports = os.environ["HA_PROBE_REST_PORTS"].split()
etcd_ports = dict(item.split("=") for item in os.environ["HA_PROBE_ETCD"].split())

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
    """(leader, synchronous standby) when every node runs: a running leader,
    and every other node streaming from it, one of them synchronously."""
    members = (cluster() or {}).get("members", [])
    leaders = [m for m in members if m.get("role") == "leader" and m.get("state") == "running"]
    replicas = [m for m in members if m.get("role") in ("replica", "sync_standby")
                and m.get("state") in ("running", "streaming")]
    if len(leaders) != 1 or len(members) != len(rest_ports) or len(replicas) != len(rest_ports) - 1:
        return None, members
    leader = get(leaders[0]["api_url"])
    streaming = {r.get("application_name"): r.get("sync_state") for r in leader.get("replication", [])
                 if r.get("state") == "streaming"}
    if any(m["name"] not in streaming for m in replicas):
        return None, members
    standby = next((m["name"] for m in replicas if m.get("role") == "sync_standby"
                    and streaming[m["name"]] == "sync"), None)
    return (leaders[0]["name"], standby) if standby else None, members

def routes(proxy):
    """Servers an HAProxy sends connections to, per listener; "UP 1/2" is an
    up server that failed one check and still gets connections."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(2)
        connection.connect(f"{run}/{proxy}.sock")
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

def etcd_healthy(port):
    try:
        return get(f"http://127.0.0.1:{port}/health").get("health") == "true"
    except (OSError, ValueError):
        return False

try:
    if what == "etcd":
        # One member, or all: each answers healthy once the members agree on
        # a Raft leader.
        ports = [etcd_ports[argument]] if argument else list(etcd_ports.values())
        healthy = [port for port in ports if etcd_healthy(port)]
        ok = len(healthy) == len(ports)
        print("healthy" if argument and ok else f"{len(healthy)} of {len(ports)} members healthy")
    elif what == "cluster":
        pair, members = health()
        ok = pair is not None
        if ok:
            others = sorted(m["name"] for m in members if m["name"] not in pair)
            print(f"primary {pair[0]}, streaming synchronous standby {pair[1]}, streaming standby {', '.join(others)}")
        else:
            print("; ".join(f"{m.get('name')} {m.get('role')} {m.get('state')}" for m in members) or "no members")
    elif what == "leader":
        leaders = [m["name"] for m in (cluster() or {}).get("members", []) if m.get("role") == "leader"]
        ok = len(leaders) == 1
        print(leaders[0] if ok else "no leader")
    elif what == "routes":
        # Healthy: port 5000 leads to the Patroni leader only, and port 5001
        # to the two standbys only.
        up = routes(argument)
        pair, members = health()
        standbys = sorted(m["name"] for m in members if pair and m["name"] != pair[0])
        ok = pair is not None and up["primary"] == [pair[0]] and sorted(up["replicas"]) == standbys
        print(f"5000 -> {','.join(up['primary']) or 'none'}; 5001 -> {','.join(up['replicas']) or 'none'}")
    else:
        sys.exit(f"unknown probe {what}")
except (OSError, ValueError, KeyError) as error:
    print(f"no answer ({error})")
    ok = False
sys.exit(0 if ok else 1)
PY
}

# bouncer_answers NAME: SELECT 1 as wallet through that PgBouncer alone.
bouncer_answers() {
    PGCONNECT_TIMEOUT=2 "$pg_bin/psql" "postgresql://wallet:$wallet_password@127.0.0.1:${bouncer_port[$1]}/wallet" \
        --no-psqlrc -tAc 'SELECT 1' 2>&1
}

bouncers_answer() {
    local name
    for name in "${bouncers[@]}"; do bouncer_answers "$name" >/dev/null || return 1; done
}

routes_healthy() {
    local name
    for name in "${proxies[@]}"; do probe routes "$name" >/dev/null || return 1; done
}

bouncer_status() {
    local answer
    answer=$(bouncer_answers "$1") || { echo "$answer"; return 1; }
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
    local superuser_password replication_password rest_password node member name initial_cluster=() etcd_hosts
    superuser_password=$(secret)
    replication_password=$(secret)
    rest_password=$(secret)

    for member in "${members[@]}"; do initial_cluster+=("$member=http://127.0.0.1:${etcd_peer_port[$member]}"); done
    for member in "${members[@]}"; do
        HA_ETCD_NAME=$member HA_ETCD_DATA_DIR=$dir/data/$member \
            HA_ETCD_LISTEN_CLIENT=127.0.0.1:${etcd_port[$member]} HA_ETCD_CLIENT_ADDRESS=127.0.0.1:${etcd_port[$member]} \
            HA_ETCD_LISTEN_PEER=127.0.0.1:${etcd_peer_port[$member]} HA_ETCD_PEER_ADDRESS=127.0.0.1:${etcd_peer_port[$member]} \
            HA_ETCD_INITIAL_CLUSTER=$(IFS=,; echo "${initial_cluster[*]}") \
            "$here/render.sh" "$here/etcd.yml" "$conf/$member.yml"
    done

    for node in "${nodes[@]}"; do
        # The node's own etcd member first, then the others.
        etcd_hosts=127.0.0.1:${etcd_port[${node_member[$node]}]}
        for member in "${members[@]}"; do
            [[ $member == "${node_member[$node]}" ]] || etcd_hosts+=",127.0.0.1:${etcd_port[$member]}"
        done
        HA_NODE=$node \
            HA_PG_LISTEN=127.0.0.1:${pg_port[$node]} HA_PG_ADDRESS=127.0.0.1:${pg_port[$node]} \
            HA_REST_LISTEN=127.0.0.1:${rest_port[$node]} HA_REST_ADDRESS=127.0.0.1:${rest_port[$node]} \
            HA_ETCD_HOSTS=$etcd_hosts HA_DATA_DIR=$dir/data/$node HA_RUN_DIR=$run \
            HA_POST_BOOTSTRAP=$conf/post-bootstrap.sh \
            HA_SUPERUSER_PASSWORD=$superuser_password HA_REPLICATION_PASSWORD=$replication_password \
            HA_REST_PASSWORD=$rest_password HA_BACKUP_CONFIG=$conf/pgbackrest-$node.conf \
            "$here/render.sh" "$here/patroni.yml" "$conf/$node.yml"
        # One repository, which every node reaches as a directory of this
        # machine; each node's own data directory, port and lock directory.
        BACKUP_REPO_PATH=$dir/backup/repo BACKUP_PG_DATA=$dir/data/$node BACKUP_PG_SOCKET_DIR=$run \
            BACKUP_PG_PORT=${pg_port[$node]} BACKUP_LOG_DIR=$log BACKUP_LOCK_DIR=$run/pgbackrest-$node \
            "$here/render.sh" "$here/../backup/pgbackrest.conf" "$conf/pgbackrest-$node.conf"
    done
    # The superuser's password, for pgBackRest's connection when it backs up.
    HA_SUPERUSER_PASSWORD=$superuser_password "$here/render.sh" "$here/backup.pgpass" "$conf/backup.pgpass"
    install -m 700 "$here/post-bootstrap.sh" "$conf/post-bootstrap.sh"

    for name in "${proxies[@]}"; do
        HA_HAPROXY_NAME=$name HA_HAPROXY_LISTEN=${proxy_host[$name]} HA_RUN_DIR=$run \
            HA_PG1_ADDRESS=127.0.0.1:${pg_port[pg1]} HA_PG1_REST_PORT=${rest_port[pg1]} \
            HA_PG2_ADDRESS=127.0.0.1:${pg_port[pg2]} HA_PG2_REST_PORT=${rest_port[pg2]} \
            HA_PG3_ADDRESS=127.0.0.1:${pg_port[pg3]} HA_PG3_REST_PORT=${rest_port[pg3]} \
            "$here/render.sh" "$here/haproxy.cfg" "$conf/$name.cfg"
    done

    for name in "${bouncers[@]}"; do
        HA_BOUNCER_LISTEN=127.0.0.1 HA_BOUNCER_PORT=${bouncer_port[$name]} \
            HA_HAPROXY_HOSTS="${proxy_host[haproxy1]},${proxy_host[haproxy2]}" HA_RUN_DIR=$run HA_CONF_DIR=$conf \
            "$here/render.sh" "$here/pgbouncer.ini" "$conf/$name.ini"
    done
    HA_WALLET_PASSWORD=$wallet_password "$here/render.sh" "$here/userlist.txt" "$conf/userlist.txt"

    [[ $owner == "$(id -un)" ]] || chown -R "$owner:" "$dir"
}

write_env() {
    cat >"$dir/env" <<EOF
# Written by deploy/ha/local.sh up. Use: . $dir/env
# WALLET_DATABASE_URL is a first service instance's (pgbouncer1, then
# pgbouncer2); WALLET_HA_DATABASE_URL_2 a second instance's (the other order).
export WALLET_DATABASE_URL=$bouncer_url
export WALLET_HA_DATABASE_URL_2=$bouncer2_url
export WALLET_DATABASE_SESSION_URL=$session_url
export WALLET_DATABASE_PREPARED_STATEMENTS=false
export WALLET_HA_DIR=$dir
export WALLET_HA_PATRONICTL="patronictl -c $conf/pg1.yml"
EOF
    chmod 644 "$dir/env"
}

print_urls() {
    cat <<EOF
first instance:       $bouncer_url
second instance:      $bouncer2_url
primary, no pooling:  $session_url
replicas:             $replica_url
patronictl:           patronictl -c $conf/pg1.yml list
environment:          . $dir/env
EOF
}

# --- commands -----------------------------------------------------------

everything_answers() {
    local name
    for name in "${members[@]}" "${nodes[@]}" "${proxies[@]}" "${bouncers[@]}"; do
        component_pid "$name" >/dev/null || return 1
    done
    probe etcd >/dev/null && routes_healthy && bouncers_answer
}

up() {
    local started name
    started=$(now)
    check_directory
    install_packages
    if [[ -e $marker ]] && everything_answers; then
        echo "already running ($dir)"
        print_urls
        return 0
    fi
    # A directory the two-node layout left has its own passwords in its
    # clusters: configuring over it would lock the new settings out of them.
    if [[ -e $conf/pgbouncer.ini && ! -e $conf/pgbouncer2.ini ]]; then
        echo "local.sh: $dir holds the earlier two-node layout; run deploy/ha/local.sh down first" >&2
        return 1
    fi
    [[ -e $conf/pgbouncer2.ini ]] || configure

    # Every member before the wait: one member alone has no quorum.
    component_env=()
    for name in "${members[@]}"; do
        if ! component_pid "$name" >/dev/null; then
            start "$name" "127.0.0.1:${etcd_port[$name]} 127.0.0.1:${etcd_peer_port[$name]}" \
                /usr/bin/etcd --config-file "$conf/$name.yml"
        fi
    done
    await "etcd (every member healthy)" "$etcd_ready_seconds_max" "${members[*]}" probe etcd
    echo "etcd: $(probe etcd)"

    for name in "${nodes[@]}"; do
        component_env=(HA_WALLET_PASSWORD="$wallet_password" HA_BACKUP_CONFIG="$conf/pgbackrest-$name.conf")
        if ! component_pid "$name" >/dev/null; then
            start "$name" "127.0.0.1:${pg_port[$name]} 127.0.0.1:${rest_port[$name]}" /usr/bin/patroni "$conf/$name.yml"
        fi
    done
    await "Patroni cluster (a primary, a streaming synchronous standby and a streaming standby)" \
        "$cluster_ready_seconds_max" "${nodes[*]}" probe cluster
    echo "patroni: $(probe cluster)"

    component_env=()
    for name in "${proxies[@]}"; do
        if ! component_pid "$name" >/dev/null; then
            start "$name" "${proxy_host[$name]}:$primary_port ${proxy_host[$name]}:$replica_port" \
                /usr/sbin/haproxy -db -f "$conf/$name.cfg"
        fi
    done
    for name in "${proxies[@]}"; do
        await "$name routing ${proxy_host[$name]}:$primary_port to the primary and :$replica_port to the standbys" \
            "$haproxy_ready_seconds_max" "$name ${nodes[*]}" probe routes "$name"
        echo "$name: $(probe routes "$name")"
    done

    for name in "${bouncers[@]}"; do
        if ! component_pid "$name" >/dev/null; then
            start "$name" "127.0.0.1:${bouncer_port[$name]}" /usr/sbin/pgbouncer "$conf/$name.ini"
        fi
    done
    for name in "${bouncers[@]}"; do
        await "$name on 127.0.0.1:${bouncer_port[$name]} (SELECT 1 as wallet)" "$bouncer_ready_seconds_max" \
            "$name ${proxies[*]}" bouncer_answers "$name"
    done

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
        printf '%-10s pid %-8s %-30s %s\n' "$name" "$pid" "$ports" "${answer//$'\n'/ }"
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
    for name in "${members[@]}"; do
        line "$name" "127.0.0.1:${etcd_port[$name]}" probe etcd "$name"
    done
    for name in "${nodes[@]}"; do
        line "$name" "127.0.0.1:${pg_port[$name]} REST :${rest_port[$name]}" node_state "$name"
    done
    for name in "${proxies[@]}"; do
        line "$name" "${proxy_host[$name]}:$primary_port,$replica_port" probe routes "$name"
    done
    for name in "${bouncers[@]}"; do
        line "$name" "127.0.0.1:${bouncer_port[$name]}" bouncer_status "$name"
    done
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
    for name in "${bouncers[@]}" "${proxies[@]}"; do
        pid=$(component_pid "$name") && pids+=("$pid")
    done
    stop_pids "$stop_seconds_max" "pgbouncer, haproxy" "${pids[@]}"
    # The standbys first, together: stopping, each waits for the primary to
    # take it out of the synchronous set, and a primary stopped first would
    # hand over to one of them. With no leader known, all at once.
    local leader
    leader=$(probe leader 2>/dev/null) || leader=
    pids=()
    for name in "${nodes[@]}"; do
        [[ $name == "$leader" ]] && continue
        pid=$(component_pid "$name") && pids+=("$pid")
    done
    [[ -n $leader ]] && stop_pids "$stop_seconds_max" "patroni (standbys)" "${pids[@]}" && pids=()
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
    pids=()
    for name in "${members[@]}"; do
        pid=$(component_pid "$name") && pids+=("$pid")
    done
    # Nothing needs etcd's state once Patroni is gone, and three members
    # stopping together wait on one another for a quorum: a short grace.
    stop_pids "$etcd_stop_seconds_max" etcd "${pids[@]}"

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

    local address busy=()
    for address in "${all_addresses[@]}"; do address_listening "$address" && busy+=("$address"); done
    [[ ${#busy[@]} == 0 ]] ||
        die "the layout is stopped, but other processes listen on ${busy[*]} (ss -ltnp); $dir kept until they are gone"
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
