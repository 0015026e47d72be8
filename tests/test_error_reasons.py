"""Every ErrorInfo reason a client can receive is listed in its service's proto header."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.reasons import CLIENT_SERVICES, ROOT, SERVICE_PROTOS, all_documented, documented

# What any call can be refused with, whichever service: authentication, roles, bounds, the database.
SHARED = {
    "CREDENTIALS_MISSING",
    "CREDENTIALS_INVALID",
    "CREDENTIALS_EXPIRED",
    "CREDENTIALS_REVOKED",
    "CREDENTIALS_UNVERIFIABLE",
    "ROLE_INSUFFICIENT",
    "MALFORMED_REQUEST",
    "FIELD_TOO_LONG",
    "DATABASE_UNAVAILABLE",
    "DATABASE_CONFLICT",
    "INTERNAL",
}


def _proto(name: str) -> Path:
    [path] = [p for p in SERVICE_PROTOS if p.stem == name]
    return path


@pytest.mark.parametrize("service", CLIENT_SERVICES)
def test_each_client_facing_service_lists_the_reasons_every_call_may_get(service: str) -> None:
    missing = SHARED - documented(_proto(service))
    assert not missing, f"{service}.proto's header does not list {sorted(missing)}"


def _class_reasons(path: Path) -> set[str]:
    """`reason = "…"` of every error class in a module."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Assign)
            and [getattr(t, "id", "") for t in node.targets] == ["reason"]
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            found.add(node.value.value)
    return found


def test_every_domain_error_of_the_control_plane_is_documented_in_a_service() -> None:
    missing = _class_reasons(ROOT / "controlplane" / "errors.py") - all_documented()
    assert not missing, f"reasons no service proto's header lists: {sorted(missing)}"
