#!/usr/bin/python3
"""Checks docker-compose.yml statically (no Docker engine needed).

Run: /usr/bin/python3 Scripts/check-compose.py [docker-compose.yml]

It must be valid YAML with the postgres and wallet services, and the wallet's
environment must pass the start-up rules `wallet serve` applies to App Store
settings, so a user who only fills in the placeholders gets a service that
starts and applies Production refunds.
"""
import sys

import yaml

path = sys.argv[1] if len(sys.argv) > 1 else "docker-compose.yml"
with open(path) as file:
    compose = yaml.safe_load(file)
services = compose.get("services", {})
missing = {"postgres", "wallet"} - set(services)
if missing:
    sys.exit(f"{path}: missing services {sorted(missing)}")
environment = services["wallet"].get("environment", {})
modes = {m.strip() for m in str(environment.get("WALLET_CREDIT_VERIFICATION", "appstore-jws")).split(",")}
environments = {e.strip() for e in str(environment.get("WALLET_APPLE_ENVIRONMENTS", "Production")).split(",")}
if modes & {"appstore-jws", "appstore-receipt"}:
    if not environment.get("WALLET_APPLE_BUNDLE_ID"):
        sys.exit(f"{path}: an App Store mode needs WALLET_APPLE_BUNDLE_ID")
    if "Production" in environments and not environment.get("WALLET_APPLE_APP_APPLE_ID"):
        sys.exit(f"{path}: Production needs WALLET_APPLE_APP_APPLE_ID, or every Production refund is refused")
print(f"{path}: valid YAML with services {sorted(services)}; App Store settings complete")
