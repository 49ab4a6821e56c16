"""The client's manifest against the service's own API document."""

from __future__ import annotations

import copy
import inspect
import json
import subprocess
import sys
from typing import Any

import pytest

from wallet_client import WalletClient, manifest
from wallet_client.errors import PROBLEM_TYPES, ProblemError


@pytest.fixture(scope="module")
def document(app: WalletClient) -> dict[str, Any]:
    return app.get_openapi_document()


def test_every_operation_and_problem_code_is_covered(document: dict[str, Any]) -> None:
    report = manifest.compare(document)
    assert report.complete, report.describe()
    assert not report.stale_operations and not report.stale_problem_codes, report.describe()


def test_manifest_is_consistent() -> None:
    assert not set(manifest.IMPLEMENTED_OPERATIONS) & set(manifest.EXCLUDED_OPERATIONS)
    for operation_id, method in manifest.IMPLEMENTED_OPERATIONS.items():
        assert callable(getattr(WalletClient, method, None)), f"{operation_id}: WalletClient.{method} is missing"
    assert all(reason for reason in manifest.EXCLUDED_OPERATIONS.values())
    assert manifest.manifest()["problem_codes"] == sorted(PROBLEM_TYPES)


def test_manifest_is_printed_as_json() -> None:
    printed = subprocess.run([sys.executable, "-m", "wallet_client"], capture_output=True, timeout=30, check=True)
    assert json.loads(printed.stdout) == manifest.manifest()


def test_problem_classes_are_named_after_their_codes() -> None:
    for code, cls in PROBLEM_TYPES.items():
        assert issubclass(cls, ProblemError)
        assert cls.__name__ == "".join(part.capitalize() for part in code.split("_")) + "Error"
        assert inspect.getdoc(cls)


def test_the_check_fails_on_a_doctored_document(document: dict[str, Any]) -> None:
    doctored = copy.deepcopy(document)
    doctored["paths"]["/v1/refunds"] = {
        "post": {"operationId": "createRefund", "responses": {"201": {"description": "Refunded."}}},
    }
    schemas = doctored["components"]["schemas"]
    schemas["RefundWindowClosedProblem"] = {
        "allOf": [
            {"$ref": "#/components/schemas/Problem"},
            {"properties": {"code": {"const": "refund_window_closed"}, "status": {"const": 409}}},
        ]
    }
    schemas["RefundRefusedProblem"] = {
        "allOf": [
            {"$ref": "#/components/schemas/Problem"},
            {"properties": {"code": {"type": "string", "enum": ["refund_pending", "verification_failed"]}}},
        ]
    }
    report = manifest.compare(doctored)
    assert not report.complete
    assert report.missing_operations == {"createRefund"}
    assert report.missing_problem_codes == {"refund_window_closed", "refund_pending"}
    assert "createRefund" in report.describe() and "refund_window_closed" in report.describe()

    # And a document that lost something shows it as stale.
    shrunk = copy.deepcopy(document)
    del shrunk["paths"]["/v1/grants"]
    assert manifest.compare(shrunk).stale_operations == {"createGrant"}
