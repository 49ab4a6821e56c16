#!/usr/bin/python3
"""Checks the target graph: every product target depends only on lower levels.

Run: swift package dump-package | /usr/bin/python3 Scripts/check-layers.py

Levels, lowest first (a target may depend only on targets of a lower level):
  0  the C shims, JSON (the strict parser, JSONValue and the one writer),
     Timestamps (the one way a time is written), and WalletClient (the client
     library, which must depend on nothing of ours)
  1  Logging (which writes its lines with JSON) and Locking; neither uses the other;
     GameShopExample (examples/game-shop), which uses WalletClient alone
  2  WalletCore, Postgres, HTTPServer, Crypto, StoreHTTP (calls to the stores' APIs)
  3  store adapters: AppStore, GooglePlay
  4  WalletStore
  5  ServiceSupport: what the service's roles share (metrics, readiness, work
     pools, the problem mapping, the store paths a route and a sweep both take)
  6  the service's roles, none using another: ServiceAPI (the HTTP API),
     ServiceConsole (the support console), ServiceWorkers (background work)
  7  WalletService: the composition root (configuration, buildApplication)
  8  wallet (the command line)
Test targets, test-support targets under Tests/ and the build-time embedding
tool are outside the rule. A product target missing from the table fails the
check, so a new one is placed on purpose. Only the adapter targets (Postgres,
HTTPServer, Crypto) may import a C shim; that is checked in Sources/ too.
"""
import json
import pathlib
import re
import sys

LEVELS = {
    "CLibPQ": 0, "CMicroHTTPD": 0, "COpenSSL": 0, "JSON": 0, "Timestamps": 0, "WalletClient": 0,
    "Logging": 1, "Locking": 1, "GameShopExample": 1,
    "WalletCore": 2, "Postgres": 2, "HTTPServer": 2, "Crypto": 2, "StoreHTTP": 2,
    "AppStore": 3, "GooglePlay": 3,
    "WalletStore": 4,
    "ServiceSupport": 5,
    "ServiceAPI": 6, "ServiceConsole": 6, "ServiceWorkers": 6,
    "WalletService": 7,
    "wallet": 8,
}
OUTSIDE = {"EmbedFilesTool", "EmbedFiles"}
C_SHIMS = {"CLibPQ", "CMicroHTTPD", "COpenSSL"}
ADAPTERS = {"Postgres", "HTTPServer", "Crypto"}

package = json.load(sys.stdin)
problems = []
for target in package["targets"]:
    name = target["name"]
    if target["type"] == "test" or name in OUTSIDE or (target.get("path") or "").startswith("Tests/"):
        continue
    if name not in LEVELS:
        problems.append(f"{name}: not placed in a level (add it to Scripts/check-layers.py)")
        continue
    for dependency in target.get("dependencies", []):
        other = next(iter(dependency.values()))[0]
        if other in OUTSIDE:
            continue
        if other not in LEVELS:
            problems.append(f"{name} depends on {other}, which is not placed in a level")
        elif LEVELS[other] >= LEVELS[name]:
            kind = "sideways" if LEVELS[other] == LEVELS[name] else "upward"
            problems.append(f"{name} (level {LEVELS[name]}) depends {kind} on {other} (level {LEVELS[other]})")
        if other in C_SHIMS and name not in ADAPTERS:
            problems.append(f"{name} depends on the C shim {other}; only {sorted(ADAPTERS)} may")

importing = re.compile(r"^\s*(?:@\w+\s+)*(?:public |package |internal )?import\s+(" + "|".join(C_SHIMS) + r")\b", re.M)
for source in sorted(pathlib.Path("Sources").rglob("*.swift")):
    owner = source.parts[1]
    if owner not in ADAPTERS:
        for match in importing.finditer(source.read_text()):
            problems.append(f"{source}: imports {match.group(1)}; only {sorted(ADAPTERS)} may")

if problems:
    print("target graph:", *problems, sep="\n  ")
    sys.exit(1)
placed = sorted((LEVELS[t["name"]], t["name"]) for t in package["targets"] if t["name"] in LEVELS)
print("target graph: no upward or sideways edge;", ", ".join(f"{n} {l}" for l, n in placed))
