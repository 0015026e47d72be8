"""Every refusal the agent's workspace service can send a client is documented in the proto."""

from __future__ import annotations

import re
from pathlib import Path

import grpc

from dataplane_agent.workspace import service as workspace
from tests.controlplane.test_input_fuzz import documented_reasons

AGENT = Path(workspace.__file__).parent


def test_every_workspace_reason_is_documented_with_its_code() -> None:
    documented = documented_reasons()
    pairs = set(workspace._REFUSALS.values())
    source = Path(workspace.__file__).read_text()
    pairs |= {
        (grpc.StatusCode[code], reason)
        for code, reason in re.findall(r'WorkspaceError\(\s*grpc\.StatusCode\.([A-Z_]+),\s*"([A-Z_]+)"', source)
    }
    reasons = set(re.findall(r'ArchiveRefused\("([A-Z_]+)"', (AGENT / "archives.py").read_text()))
    pairs |= {(workspace._ARCHIVE_CODES.get(reason, grpc.StatusCode.INVALID_ARGUMENT), reason) for reason in reasons}
    assert len(pairs) >= 15
    for code, reason in pairs:
        assert code in documented.get(reason, set()), f"{reason} ({code.name}) is not in the proto's list"
