"""`python -m wallet_client`: prints the client's manifest (operations implemented and excluded, problem codes) as JSON."""

from .manifest import manifest_json

print(manifest_json())
