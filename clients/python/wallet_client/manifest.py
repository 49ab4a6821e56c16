"""What this client covers of the API document, and the check against it.

`IMPLEMENTED_OPERATIONS` maps each operationId the client implements to its
method of `WalletClient`; `EXCLUDED_OPERATIONS` maps each one it leaves out on
purpose to the reason; `KNOWN_PROBLEM_CODES` are the problem codes it raises
typed errors for. `compare(document)` reports what an OpenAPI document has
that the client neither implements nor excludes.

`python -m wallet_client` prints the manifest as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import PROBLEM_TYPES

__all__ = [
    "IMPLEMENTED_OPERATIONS",
    "EXCLUDED_OPERATIONS",
    "KNOWN_PROBLEM_CODES",
    "ContractReport",
    "compare",
    "document_operation_ids",
    "document_problem_codes",
    "manifest",
    "manifest_json",
]

IMPLEMENTED_OPERATIONS: Mapping[str, str] = {
    "createCredit": "create_credit",
    "createDebit": "create_debit",
    "createGrant": "create_grant",
    "getWallet": "get_wallet",
    "listEntries": "list_entries",
    "listHolds": "list_holds",
    "listCredits": "list_credits",
    "getAccountTokens": "get_account_tokens",
    "getCredit": "get_credit",
    "createHold": "create_hold",
    "captureHold": "capture_hold",
    "releaseHold": "release_hold",
    "getHold": "get_hold",
    "listEvents": "list_events",
    "getHealth": "get_health",
    "getReadiness": "get_readiness",
    "getOpenAPIDocument": "get_openapi_document",
}

EXCLUDED_OPERATIONS: Mapping[str, str] = {
    "getMetrics": "Prometheus scrapes it; no game server or app backend calls it",
    "receiveAppStoreNotification": "Apple's App Store Server Notifications call it, not a game server",
    "receiveGooglePlayNotification": "Google Play's Pub/Sub push calls it, not a game server",
}

KNOWN_PROBLEM_CODES: frozenset[str] = frozenset(PROBLEM_TYPES)

_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def document_operation_ids(document: Mapping[str, Any]) -> set[str]:
    """Every operationId under the document's `paths`."""
    found: set[str] = set()
    paths = document.get("paths")
    if not isinstance(paths, Mapping):
        return found
    for item in paths.values():
        if not isinstance(item, Mapping):
            continue
        for method in _METHODS:
            operation = item.get(method)
            if isinstance(operation, Mapping) and isinstance(operation.get("operationId"), str):
                found.add(operation["operationId"])
    return found


def document_problem_codes(document: Mapping[str, Any]) -> set[str]:
    """The `const` and `enum` values of `code` in every `*Problem` schema of `components.schemas`."""
    found: set[str] = set()
    components = document.get("components")
    schemas = components.get("schemas") if isinstance(components, Mapping) else None
    if not isinstance(schemas, Mapping):
        return found
    for name, schema in schemas.items():
        if isinstance(name, str) and name.endswith("Problem"):
            _collect_codes(schema, found)
    return found


def _collect_codes(node: Any, found: set[str]) -> None:
    if isinstance(node, Mapping):
        properties = node.get("properties")
        if isinstance(properties, Mapping):
            code = properties.get("code")
            if isinstance(code, Mapping):
                if isinstance(code.get("const"), str):
                    found.add(code["const"])
                enum = code.get("enum")
                if isinstance(enum, list):
                    found.update(value for value in enum if isinstance(value, str))
        for value in node.values():
            _collect_codes(value, found)
    elif isinstance(node, list):
        for value in node:
            _collect_codes(value, found)


@dataclass(frozen=True)
class ContractReport:
    """How a document and this client compare.

    `missing_*`: in the document, neither implemented nor excluded (the
    client is behind). `stale_*`: in the client, gone from the document.
    """

    missing_operations: frozenset[str]
    missing_problem_codes: frozenset[str]
    stale_operations: frozenset[str]
    stale_problem_codes: frozenset[str]

    @property
    def complete(self) -> bool:
        """True when the client covers every operation and problem code of the document."""
        return not self.missing_operations and not self.missing_problem_codes

    def describe(self) -> str:
        lines = []
        for label, names in (
            ("operations in the document the client neither implements nor excludes", self.missing_operations),
            ("problem codes in the document the client does not know", self.missing_problem_codes),
            ("operations the client lists that the document no longer has", self.stale_operations),
            ("problem codes the client knows that the document no longer has", self.stale_problem_codes),
        ):
            if names:
                lines.append(f"{label}: {', '.join(sorted(names))}")
        return "\n".join(lines) or "the client matches the document"


def compare(
    document: Mapping[str, Any],
    *,
    implemented: Iterable[str] | None = None,
    excluded: Iterable[str] | None = None,
    known_codes: Iterable[str] | None = None,
) -> ContractReport:
    """Compares an OpenAPI document with this client's manifest (or the lists given)."""
    covered = set(IMPLEMENTED_OPERATIONS if implemented is None else implemented)
    covered |= set(EXCLUDED_OPERATIONS if excluded is None else excluded)
    codes = set(KNOWN_PROBLEM_CODES if known_codes is None else known_codes)
    operations = document_operation_ids(document)
    problems = document_problem_codes(document)
    return ContractReport(
        missing_operations=frozenset(operations - covered),
        missing_problem_codes=frozenset(problems - codes),
        stale_operations=frozenset(covered - operations),
        stale_problem_codes=frozenset(codes - problems),
    )


def manifest() -> dict[str, Any]:
    """The manifest as plain JSON values."""
    return {
        "client": "python",
        "implemented_operations": dict(sorted(IMPLEMENTED_OPERATIONS.items())),
        "excluded_operations": dict(sorted(EXCLUDED_OPERATIONS.items())),
        "problem_codes": sorted(KNOWN_PROBLEM_CODES),
    }


def manifest_json() -> str:
    """The manifest as a JSON document."""
    return json.dumps(manifest(), indent=2)
