"""RunnerService.ResolveCredentials: the secrets a session needs, for the agent the session is placed
on and for no one else: those its pinned environment binds to hosts (for the agent's egress proxy)
and those its agent's HTTP MCP servers name (for the agent to send them).

The calling agent proves who it is as in Connect's Hello, by its enrolled credential, carried in
the call's metadata (`astrabox-agent-id`, `astrabox-agent-credential`): a wrong or missing one is
UNAUTHENTICATED, and nothing is enrolled by this call. A session that is not placed on that agent
(or does not exist) is PERMISSION_DENIED, alike, so an agent cannot probe other sessions; so is
an agent not dedicated to the session's project when the project gives credentials only to its
dedicated hosts (credential_hosts "dedicated"), and a pending agent (`identity.agent_admission`). The
secrets are opened for the answer only; the log line names the credentials, never what they hold.
"""

from __future__ import annotations

import uuid

import asyncpg
import grpc
import structlog

from astrabox.agents.v1 import agent_pb2
from astrabox.environments.v1 import environment_pb2
from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane import store, validation
from controlplane.credential_store.credentials import CredentialStore
from controlplane.errors import CredentialsHostNotDedicated, SessionNotOnAgent
from controlplane.identity import store as identity_store
from controlplane.identity.agent_admission import AgentAdmission
from controlplane.status import maps_errors

log = structlog.get_logger(__name__)

AGENT_ID_METADATA = "astrabox-agent-id"
AGENT_CREDENTIAL_METADATA = "astrabox-agent-credential"


class CredentialResolver:
    def __init__(self, pool: asyncpg.Pool, admission: AgentAdmission, credentials: CredentialStore) -> None:
        self._pool = pool
        self._admission = admission
        self._credentials = credentials

    @maps_errors
    async def ResolveCredentials(
        self, request: runner_pb2.ResolveCredentialsRequest, context: grpc.aio.ServicerContext
    ) -> runner_pb2.ResolveCredentialsResponse:
        metadata = {key: value for key, value in context.invocation_metadata() or () if isinstance(value, str)}
        agent_id = metadata.get(AGENT_ID_METADATA, "")
        await self._admission.verify(agent_id, metadata.get(AGENT_CREDENTIAL_METADATA, ""), context.peer())
        session_id = validation.session_id(request.session_id)
        holder = await store.sessions.credential_holder(self._pool, uuid.UUID(session_id))
        if holder is None or holder["agent_id"] != agent_id:
            log.warning("credentials_refused_to_agent", agent_id=agent_id, session_id=session_id)
            raise SessionNotOnAgent(session_id, agent_id)
        if (
            not holder["dedicated_host"]
            and await identity_store.credential_hosts(self._pool, holder["project_id"]) == "dedicated"
        ):
            log.warning("credentials_refused_to_shared_host", agent_id=agent_id, session_id=session_id)
            raise CredentialsHostNotDedicated(session_id, agent_id)
        stored_environment, stored_agent = holder["environment_spec"], holder["config"]
        environment = (
            environment_pb2.EnvironmentSpec.FromString(bytes(stored_environment)) if stored_environment else None
        )
        agent = agent_pb2.AgentSpec.FromString(bytes(stored_agent)) if stored_agent else None
        found = await self._credentials.resolve(holder["project_id"], environment, agent)
        bound = {b.credential for b in environment.credentials} if environment else set()
        named = {s.http.credential for s in agent.mcp_servers if s.http.credential} if agent else set()
        log.info(
            "credentials_resolved",
            agent_id=agent_id,
            session_id=session_id,
            credentials=[r.name for r in found.bindings],
            mcp_servers=[m.server for m in found.mcp],
            missing=sorted((bound | named) - {r.name for r in found.bindings} - {m.name for m in found.mcp}),
        )
        return runner_pb2.ResolveCredentialsResponse(
            credentials=[
                runner_pb2.ResolvedCredential(
                    name=r.name,
                    hosts=r.hosts,
                    scheme=r.scheme,
                    header=r.header,
                    secret=r.secret,
                    port=r.port,
                    allow_plain_http=r.allow_plain_http,
                )
                for r in found.bindings
            ],
            mcp_credentials=[
                runner_pb2.ResolvedMcpCredential(server=m.server, name=m.name, secret=m.secret) for m in found.mcp
            ],
        )
