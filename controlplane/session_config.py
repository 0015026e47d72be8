"""A session's configuration: the agent version it pins, with CreateSession's own fields over it;
and the environment version it runs in.

A session started from an agent pins one version of its definition; one
created without an agent runs the engine's defaults. Either way the session
stores the *effective* `AgentSpec` (its engine, permission mode and model
filled in) and every StartRuntime carries it, so a runtime placed again or
restarted runs exactly what the session started with, whatever the agent
definition has become since. Its environment likewise: the pinned version's spec
is copied into the session and every StartRuntime carries that copy
(`runtime_environment`), so a sandbox rebuilt after it was lost, or placed on
another agent, runs in the same environment version.
"""

from __future__ import annotations

from datetime import timedelta

from astrabox.agents.v1 import agent_pb2
from astrabox.environments.v1 import environment_pb2
from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane.agent_definitions.definitions import ResolvedAgent
from controlplane.session import SessionEnvironment


def effective(pinned: ResolvedAgent | None, engine: str, permission_mode: str, model: str) -> agent_pb2.AgentSpec:
    """The pinned spec (or an empty one) with the caller's engine, mode and model over it where given."""
    spec = agent_pb2.AgentSpec()
    if pinned is not None:
        spec.CopyFrom(pinned.spec)
    spec.engine = engine or spec.engine
    spec.permission_mode = permission_mode or spec.permission_mode
    spec.model = model or spec.model
    return spec


def binds_credentials(config: agent_pb2.AgentSpec, environment_spec: bytes | None) -> bool:
    """Whether the session is given secrets of the project's credential store: its environment binds
    one to hosts, or one of its agent's HTTP MCP servers names one. Such a session runs only where
    the project's credential_hosts allows (`controlplane.agents.Agents.place`)."""
    if any(server.WhichOneof("transport") == "http" and server.http.credential for server in config.mcp_servers):
        return True
    if not environment_spec:
        return False
    return bool(environment_pb2.EnvironmentSpec.FromString(environment_spec).credentials)


def isolation(environment_spec: bytes | None) -> str:
    """The isolation the session's environment asks of its agent's sandboxes ("gvisor"); empty: any
    (`controlplane.agents.Agents.place`)."""
    if not environment_spec:
        return ""
    return environment_pb2.EnvironmentSpec.FromString(environment_spec).isolation


def turn_timeout(spec: agent_pb2.AgentSpec) -> timedelta | None:
    """How long one of the session's turns may run; None: no limit."""
    if not spec.limits.HasField("turn_timeout"):
        return None
    limit = spec.limits.turn_timeout.ToTimedelta()
    return limit if limit > timedelta(0) else None


def encode(spec: agent_pb2.AgentSpec) -> bytes:
    """As the sessions table keeps it: equal specs, equal bytes."""
    return spec.SerializeToString(deterministic=True)


def decode(stored: bytes, engine: str, permission_mode: str, model: str) -> agent_pb2.AgentSpec:
    """The stored spec, its engine, mode and model the session's own: the session's mode changes
    over its life (SetPermissionMode), and sessions older than configurations stored none."""
    spec = agent_pb2.AgentSpec.FromString(stored)
    spec.engine, spec.permission_mode, spec.model = engine, permission_mode, model
    return spec


def git_source(stored: bytes) -> environment_pb2.GitSource | None:
    """The session's git repository as a StartRuntime carries it (None: it started without one)."""
    return environment_pb2.GitSource.FromString(stored) if stored else None


def runtime_environment(pinned: SessionEnvironment | None) -> runner_pb2.RuntimeEnvironment | None:
    """What a StartRuntime carries of the session's pinned environment (None: the built-in one)."""
    if pinned is None:
        return None
    return runner_pb2.RuntimeEnvironment(
        environment_id=pinned.environment_id,
        name=pinned.name,
        version=pinned.version,
        spec=environment_pb2.EnvironmentSpec.FromString(pinned.spec),
        build_digest=pinned.build_digest,
    )
