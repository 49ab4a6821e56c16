#!/usr/bin/python3
"""Checks a compose file statically (no Docker engine needed).

Run: /usr/bin/python3 Scripts/check-compose.py [docker-compose.yml]
     /usr/bin/python3 Scripts/check-compose.py --ha deploy/ha/docker-compose.yml

The root file must be valid YAML with the postgres and wallet services, and
the wallet's environment must pass the start-up rules `wallet serve` applies
to App Store settings, so a user who only fills in the placeholders gets a
service that starts and applies Production refunds. Clients come in over
HTTPS: the tls service (built from deploy/tls) publishes its HTTPS and
redirect ports alone, at a fixed address, and reaches every instance; every
instance serves its metrics and probes on WALLET_OPS_LISTEN, publishes no
port, and trusts the proxy's address in WALLET_TRUSTED_PROXIES.

With --ha, the high-availability file must be valid YAML with no single
point of failure: an odd number of etcd members, three at least, each
naming all of them in its initial cluster; at least three Patroni nodes
(services whose command runs `patroni`), each listing every etcd member; at
least two HAProxy instances, each checking every node; PgBouncers, each
reaching the primary through every HAProxy; and at least two service
instances (services named wallet…), each with a PgBouncer of its own listed
first in WALLET_DATABASE_URL (others may follow), a session URL listing at
least two HAProxies' primary port, prepared statements off, and the App
Store rules above. Every file mounted from the repository must exist, every
${NAME} of a template a service renders must be set in its environment, and
each Patroni node's configuration must turn on synchronous_mode and
failsafe_mode and set primary_start_timeout to 0. For backups, each node's
configuration must archive (archive_mode on or always) with `pgbackrest …
--stanza=wallet archive-push`, and every node must render a pgbackrest.conf
to the HA_BACKUP_CONFIG it names and mount one and the same volume at its
BACKUP_REPO_PATH, the repository all of them archive to.
"""
import os
import re
import shlex
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fail(path, message):
    sys.exit(f"{path}: {message}")


def check_app_store(path, name, environment):
    """The start-up rules `wallet serve` applies to the App Store settings."""
    modes = {m.strip() for m in str(environment.get("WALLET_CREDIT_VERIFICATION", "appstore-jws")).split(",")}
    environments = {e.strip() for e in str(environment.get("WALLET_APPLE_ENVIRONMENTS", "Production")).split(",")}
    if modes & {"appstore-jws", "appstore-receipt"}:
        if not environment.get("WALLET_APPLE_BUNDLE_ID"):
            fail(path, f"{name}: an App Store mode needs WALLET_APPLE_BUNDLE_ID")
        if "Production" in environments and not environment.get("WALLET_APPLE_APP_APPLE_ID"):
            fail(path, f"{name}: Production needs WALLET_APPLE_APP_APPLE_ID, or every Production refund is refused")


def ipv4(text):
    parts = str(text).split(".")
    if len(parts) != 4 or not all(p.isdigit() and int(p) < 256 for p in parts):
        return None
    return sum(int(p) << (8 * (3 - i)) for i, p in enumerate(parts))


def trusts(proxies, address):
    """Whether the CIDR list WALLET_TRUSTED_PROXIES covers address."""
    for item in str(proxies).split(","):
        base, _, bits = item.strip().partition("/")
        bits = int(bits) if bits.isdigit() else 32
        mask = (0xFFFFFFFF << (32 - bits)) & 0xFFFFFFFF if bits else 0
        if ipv4(base) is not None and ipv4(address) is not None and ipv4(base) & mask == ipv4(address) & mask:
            return True
    return False


def published_targets(service):
    return [str(m.get("target") if isinstance(m, dict) else str(m).rpartition(":")[2]).split("/")[0]
            for m in service.get("ports", [])]


def check_instance_behind_tls(path, name, service, tls_address):
    """Metrics and probes on the operations port; no port published (the
    TLS proxy is the way in), and the proxy's address trusted."""
    environment = service.get("environment", {})
    if not environment.get("WALLET_OPS_LISTEN"):
        fail(path, f"{name}: set WALLET_OPS_LISTEN, so /metrics is not on the API port")
    published = published_targets(service)
    if published:
        fail(path, f"{name}: publishes {published}; clients must come through the TLS proxy")
    if not trusts(environment.get("WALLET_TRUSTED_PROXIES", ""), tls_address):
        fail(path, f"{name}: WALLET_TRUSTED_PROXIES must cover the TLS proxy's address {tls_address}")


def check_tls(path, services, instances):
    """The TLS proxy of deploy/tls: built from there, at a fixed address,
    publishing its HTTPS and redirect ports alone, and sending to the
    instances (by a service name or a shared network alias). Returns its
    address."""
    tls = services.get("tls")
    if tls is None:
        fail(path, "missing the tls service (HTTPS in front of the service)")
    build = tls.get("build")
    context = build if isinstance(build, str) else (build or {}).get("context", "")
    base = os.path.dirname(os.path.abspath(path))
    if os.path.realpath(os.path.join(base, str(context))) != os.path.realpath(os.path.join(ROOT, "deploy", "tls")):
        fail(path, f"tls: must build from deploy/tls, not {context!r}")
    address = ((tls.get("networks") or {}).get("default") or {}).get("ipv4_address")
    if ipv4(address) is None:
        fail(path, "tls: needs a fixed networks.default.ipv4_address, for WALLET_TRUSTED_PROXIES")
    if sorted(published_targets(tls)) != ["8080", "8443"]:
        fail(path, f"tls: must publish its HTTPS port 8443 and redirect port 8080, publishes {published_targets(tls)}")
    upstream = str((tls.get("environment") or {}).get("WALLET_UPSTREAM", ""))
    host, _, port = upstream.rpartition(":")
    reached = [n for n in instances
               if n == host or host in (((services[n].get("networks") or {}).get("default") or {}).get("aliases") or [])]
    if sorted(reached) != sorted(instances):
        fail(path, f"tls: WALLET_UPSTREAM {upstream!r} must reach every instance {instances}, reaches {reached}")
    for name in instances:
        api_port = str((services[name].get("environment") or {}).get("WALLET_LISTEN", "")).rpartition(":")[2]
        if port != api_port:
            fail(path, f"tls: WALLET_UPSTREAM port {port} is not {name}'s API port {api_port}")
    return address


def check_root(path, compose):
    services = compose.get("services", {})
    missing = {"postgres", "wallet", "tls"} - set(services)
    if missing:
        fail(path, f"missing services {sorted(missing)}")
    environment = services["wallet"].get("environment", {})
    check_app_store(path, "wallet", environment)
    check_instance_behind_tls(path, "wallet", services["wallet"], check_tls(path, services, ["wallet"]))
    print(f"{path}: valid YAML with services {sorted(services)}; App Store settings complete; HTTPS through tls")


def command_words(service):
    command = service.get("command") or []
    if isinstance(command, str):
        command = shlex.split(command)
    # `sh -c "…"`: the script's words count too.
    return [word for part in command for word in shlex.split(part)]


def bind_mounts(service):
    """(source, target) of each mount whose source is a path on the host."""
    mounts = []
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            if volume.get("type") == "bind":
                mounts.append((volume["source"], volume["target"]))
            continue
        source, _, rest = str(volume).partition(":")
        if source.startswith((".", "/", "~")):
            mounts.append((source, rest.split(":")[0]))
    return mounts


def check_patroni_config(path, name, config_path, shown):
    with open(config_path) as file:
        config = yaml.safe_load(file)
    dcs = (config.get("bootstrap") or {}).get("dcs") or {}
    if dcs.get("synchronous_mode") is not True:
        fail(path, f"{name}: {shown} must set bootstrap.dcs.synchronous_mode: true")
    if dcs.get("failsafe_mode") is not True:
        fail(path, f"{name}: {shown} must set bootstrap.dcs.failsafe_mode: true (Patroni 3.0 or later), so a primary "
                   "that reaches every other node keeps running while etcd does not answer")
    timeout = dcs.get("primary_start_timeout")
    # bool is an int in Python; `false` is not a timeout.
    if type(timeout) is not int or timeout != 0:
        fail(path, f"{name}: {shown} must set bootstrap.dcs.primary_start_timeout: 0 "
                   "(the default, 300, restarts a crashed primary in place instead of failing over)")
    parameters = {**(((dcs.get("postgresql") or {}).get("parameters")) or {}),
                  **(((config.get("postgresql") or {}).get("parameters")) or {})}
    # YAML reads a bare `on` as true.
    if parameters.get("archive_mode") not in ("on", "always", True):
        fail(path, f"{name}: {shown} must set archive_mode to on or always, so WAL reaches the backup repository")
    command = shlex.split(str(parameters.get("archive_command", "")))
    if not command or command[0] != "pgbackrest" or "archive-push" not in command or "--stanza=wallet" not in command:
        fail(path, f"{name}: {shown} must set archive_command to pgbackrest --stanza=wallet archive-push \"%p\", "
                   f"not {parameters.get('archive_command')!r}")


def check_backup(path, compose, nodes):
    """Every Patroni node renders a pgBackRest configuration where its
    archive_command looks for it, and mounts one and the same named volume
    at its repository path."""
    services = compose["services"]
    repositories = set()
    for name in nodes:
        service = services[name]
        environment = service.get("environment") or {}
        config = environment.get("HA_BACKUP_CONFIG")
        if not config or config not in command_words(service):
            fail(path, f"{name}: its command must render the pgBackRest configuration to HA_BACKUP_CONFIG ({config!r})")
        repository = environment.get("BACKUP_REPO_PATH")
        volumes = [str(v).split(":") for v in service.get("volumes", []) if not isinstance(v, dict)]
        mounted = [v[0] for v in volumes if len(v) >= 2 and v[1] == repository and not v[0].startswith((".", "/", "~"))]
        if not repository or not mounted:
            fail(path, f"{name}: must mount a named volume at BACKUP_REPO_PATH ({repository!r}), the backup repository")
        if mounted[0] not in (compose.get("volumes") or {}):
            fail(path, f"{name}: volume {mounted[0]} is not declared under volumes")
        repositories.add(mounted[0])
    if len(repositories) != 1:
        fail(path, f"the Patroni nodes must share one backup repository volume, not {sorted(repositories)}")
    return repositories.pop()


def database_hosts(url):
    """(scheme, [(host, port)]) of a libpq URL, which may list several
    hosts: postgresql://user:password@host1:6432,host2:6432/db."""
    scheme, _, rest = str(url).partition("://")
    authority = rest.split("/", 1)[0].rpartition("@")[2]
    hosts = []
    for item in authority.split(","):
        host, _, port = item.rpartition(":") if ":" in item else (item, "", "5432")
        hosts.append((host, int(port) if port.isdigit() else None))
    return scheme, hosts


def check_hosts(path, name, variable, url, candidates, port, at_least):
    """Every host of the URL is one of `candidates` (service names) on
    `port`, and there are at least `at_least` of them. Returns the names."""
    scheme, hosts = database_hosts(url)
    if scheme not in ("postgres", "postgresql") or not hosts:
        fail(path, f"{name}: {variable} must be a postgresql:// URL, not {url!r}")
    for host, host_port in hosts:
        if host not in candidates or host_port != port:
            fail(path, f"{name}: {variable} must list hosts of {sorted(candidates)} on port {port}, not {url!r}")
    names = [host for host, _ in hosts]
    if len(set(names)) < at_least:
        fail(path, f"{name}: {variable} must list at least {at_least} of {sorted(candidates)}, lists {names}")
    return names


def rendered_templates(service):
    """(host file, its target) for each template the command renders with
    wallet-ha-render SOURCE TARGET."""
    words = command_words(service)
    mounts = dict((target, source) for source, target in bind_mounts(service))
    return [(mounts.get(words[i + 1]), words[i + 1]) for i, word in enumerate(words[:-2]) if word == "wallet-ha-render"]


def check_placeholders(path, base, name, service):
    """Every ${NAME} of each template a service renders is set in its
    environment (render.sh stops the container otherwise)."""
    environment = service.get("environment") or {}
    for source, target in rendered_templates(service):
        if source is None:
            fail(path, f"{name}: renders {target}, which no mount provides")
        with open(os.path.join(base, source)) as file:
            needed = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)\}", file.read()))
        missing = sorted(needed - set(environment))
        if missing:
            fail(path, f"{name}: {source} needs {missing} in its environment")


def check_ha(path, compose):
    services = compose.get("services", {})
    base = os.path.dirname(os.path.abspath(path))

    for name, service in services.items():
        for source, _ in bind_mounts(service):
            if not os.path.exists(os.path.join(base, os.path.expanduser(source))):
                fail(path, f"{name}: mounts {source}, which does not exist")
        build = service.get("build")
        if build is not None:
            context = build if isinstance(build, str) else build.get("context", ".")
            dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
            if not os.path.isfile(os.path.join(base, context, dockerfile)):
                fail(path, f"{name}: builds from {os.path.join(context, dockerfile)}, which does not exist")
        check_placeholders(path, base, name, service)

    def running(program):
        return [n for n, s in services.items() if program in command_words(s)]

    # etcd: an odd number of members, three at least, so one can be lost
    # and a quorum remains; each knows all of them.
    members = running("etcd")
    if len(members) < 3 or len(members) % 2 == 0:
        fail(path, f"needs an odd number of etcd members, three at least, has {members}")
    for name in members:
        initial = str((services[name].get("environment") or {}).get("HA_ETCD_INITIAL_CLUSTER", ""))
        named = sorted(item.partition("=")[0] for item in initial.split(",") if item)
        if named != sorted(members):
            fail(path, f"{name}: HA_ETCD_INITIAL_CLUSTER must name every member {sorted(members)}, names {named}")

    # Patroni: three nodes at least, so a synchronous standby remains when
    # one is lost; each reaches every etcd member.
    nodes = running("patroni")
    if len(nodes) < 3:
        fail(path, f"needs at least three Patroni nodes, has {nodes}")
    for name in nodes:
        service = services[name]
        # The mounted file its command names (read directly or rendered).
        words = command_words(service)
        configs = [(source, target) for source, target in bind_mounts(service)
                   if target in words and source.endswith((".yml", ".yaml"))]
        if not configs:
            fail(path, f"{name}: mounts no Patroni configuration that its command reads")
        for source, _ in configs:
            check_patroni_config(path, name, os.path.join(base, source), source)
        etcd_hosts = str((service.get("environment") or {}).get("HA_ETCD_HOSTS", ""))
        listed = sorted(item.rpartition(":")[0] for item in etcd_hosts.split(",") if item)
        if listed != sorted(members):
            fail(path, f"{name}: HA_ETCD_HOSTS must list every etcd member {sorted(members)}, lists {listed}")
    repository = check_backup(path, compose, nodes)

    # HAProxy: two at least, each checking every node.
    proxies = [n for n in running("haproxy") if n != "tls"]
    if len(proxies) < 2:
        fail(path, f"needs at least two HAProxy instances, has {proxies}")
    for name in proxies:
        environment = services[name].get("environment") or {}
        reached = sorted(str(v).rpartition(":")[0] for k, v in environment.items()
                         if re.fullmatch(r"HA_PG[0-9]+_ADDRESS", k))
        if reached != sorted(nodes):
            fail(path, f"{name}: must check every Patroni node {sorted(nodes)}, checks {reached}")

    # PgBouncer: each reaching the primary through every HAProxy.
    bouncers = running("pgbouncer")
    for name in bouncers:
        hosts = str((services[name].get("environment") or {}).get("HA_HAPROXY_HOSTS", "")).split(",")
        if sorted(hosts) != sorted(proxies):
            fail(path, f"{name}: HA_HAPROXY_HOSTS must list every HAProxy {sorted(proxies)}, lists {hosts}")

    # The service: two instances at least, each with a PgBouncer of its own
    # listed first; sessions through the HAProxies.
    instances = [name for name in services if name.startswith("wallet")]
    if len(instances) < 2:
        fail(path, f"needs at least two wallet instances, has {instances}")
    tls_address = check_tls(path, services, instances)
    own = {}
    for name in instances:
        environment = services[name].get("environment") or {}
        for variable in ("WALLET_DATABASE_URL", "WALLET_DATABASE_SESSION_URL", "WALLET_DATABASE_PREPARED_STATEMENTS"):
            if variable not in environment:
                fail(path, f"{name}: {variable} is not set")
        pooled = check_hosts(path, name, "WALLET_DATABASE_URL", environment["WALLET_DATABASE_URL"], bouncers, 6432, 1)
        if pooled[0] in own:
            fail(path, f"{name}: its PgBouncer {pooled[0]} is {own[pooled[0]]}'s too; give each instance its own")
        own[pooled[0]] = name
        check_hosts(path, name, "WALLET_DATABASE_SESSION_URL", environment["WALLET_DATABASE_SESSION_URL"],
                    proxies, 5000, 2)
        # A string: compose refuses a YAML boolean in an environment map.
        if environment["WALLET_DATABASE_PREPARED_STATEMENTS"] != "false":
            fail(path, f'{name}: WALLET_DATABASE_PREPARED_STATEMENTS must be "false" (PgBouncer pools transactions)')
        check_app_store(path, name, environment)
        check_instance_behind_tls(path, name, services[name], tls_address)

    print(f"{path}: valid YAML with services {sorted(services)}; etcd members {members}; Patroni nodes {nodes} "
          f"synchronous with failsafe_mode and primary_start_timeout 0, archiving through pgbackrest to volume "
          f"{repository}; HAProxy {proxies}; instances {instances} each through its own PgBouncer "
          f"({', '.join(f'{own_name}: {bouncer}' for bouncer, own_name in own.items())}); "
          f"templates' placeholders set; mounted files present")


arguments = sys.argv[1:]
high_availability = "--ha" in arguments
arguments = [a for a in arguments if a != "--ha"]
path = arguments[0] if arguments else ("deploy/ha/docker-compose.yml" if high_availability else "docker-compose.yml")
with open(path) as file:
    compose = yaml.safe_load(file)
if not isinstance(compose, dict):
    fail(path, "not a YAML mapping")
if high_availability:
    check_ha(path, compose)
else:
    check_root(path, compose)
