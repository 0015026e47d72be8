"""How the tests' control planes let in the agents the tests start themselves.

Agents are admitted by an operator, or by a join token, before they get any work
(`controlplane.identity.agent_admission`); the tests that are about something else run their
control planes with `--agent-admission automatic` and an enrollment token their agents present,
as a single-team installation would. tests/controlplane/test_agent_admission.py tests admission.
"""

from __future__ import annotations

TOKEN = "test-enrollment-token-0123456789abcdef"
# ControlPlaneSettings keywords.
AUTOMATIC = {"enrollment_token": TOKEN, "agent_admission": "automatic"}
# The environment of a control plane process, and of an agent process.
CONTROLPLANE_ENV = {"ASTRABOX_ENROLLMENT_TOKEN": TOKEN, "ASTRABOX_AGENT_ADMISSION": "automatic"}
AGENT_ENV = {"ASTRABOX_ENROLLMENT_TOKEN": TOKEN}
