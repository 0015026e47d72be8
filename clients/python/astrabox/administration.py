"""AdminService from a client: who am I, projects, API keys, audit and quotas (`client.admin`).

me = await client.admin.whoami()
key = await client.admin.create_api_key("ci", role="developer")
print(key.secret)                          # shown once
await client.admin.revoke_api_key(key.key.key_id)
print((await client.admin.get_quotas()).effective.live_sessions)
await client.admin.set_quotas(project_id, live_sessions=10)   # operator admins; the rest: defaults
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

import grpc

from astrabox.admin.v1 import admin_service_pb2 as admin
from astrabox.admin.v1 import admin_service_pb2_grpc as admin_grpc

__all__ = ["QUOTAS", "Admin", "role_value"]

QUOTAS = ("live_sessions", "sessions_per_minute", "message_bytes", "upload_bytes", "concurrent_commands")
"""The quotas a project has (the fields of `Quotas` in admin_service.proto)."""

R = TypeVar("R")


class Unary(Protocol):
    """Makes one unary call with the client's key and timeout, retrying an `idempotent` one while the
    server is unavailable; AstraBoxError when it fails."""

    async def __call__(self, method: Callable[..., Awaitable[R]], request: Any, *, idempotent: bool = True) -> R: ...


def role_value(role: int | str) -> int:
    """A Role number from "viewer", "ROLE_DEVELOPER", 3 …"""
    if isinstance(role, int):
        return role
    name = role.upper()
    return admin.Role.Value(name if name.startswith("ROLE_") else f"ROLE_{name}")


class Admin:
    """AdminService's calls; made by `AstraBoxClient.admin`, with the client's channel and key."""

    def __init__(self, channel: grpc.aio.Channel, unary: Unary) -> None:
        self._stub = admin_grpc.AdminServiceStub(channel)  # type: ignore[no-untyped-call]
        # The client's way of making a call: its key, its timeout, its errors (`AstraBoxClient._unary`).
        self._unary = unary

    async def whoami(self) -> admin.Caller:
        """The project, role and key of this client's credential."""
        caller: admin.Caller = (await self._unary(self._stub.WhoAmI, admin.WhoAmIRequest())).caller
        return caller

    async def create_project(self, name: str) -> admin.Project:
        """A new project named `name` (operator admins only)."""
        project: admin.Project = (
            # Not repeated: a retry of one that was made would answer PROJECT_EXISTS.
            await self._unary(self._stub.CreateProject, admin.CreateProjectRequest(name=name), idempotent=False)
        ).project
        return project

    async def list_projects(self) -> list[admin.Project]:
        """Every project for an operator admin; this key's own otherwise."""
        return list((await self._unary(self._stub.ListProjects, admin.ListProjectsRequest())).projects)

    async def create_api_key(
        self, name: str, *, role: int | str, project_id: str = "", expires: datetime | None = None
    ) -> admin.CreateApiKeyResponse:
        """A new key (`.secret` is the whole key, returned only now) in `project_id` (default: this key's)."""
        request = admin.CreateApiKeyRequest(project_id=project_id, name=name, role=role_value(role))  # type: ignore[arg-type]
        if expires is not None:
            request.expire_time.FromDatetime(expires)
        # Not repeated: a retry of one that was made would make a second key.
        response: admin.CreateApiKeyResponse = await self._unary(self._stub.CreateApiKey, request, idempotent=False)
        return response

    async def list_api_keys(self, project_id: str = "") -> list[admin.ApiKey]:
        """The keys of `project_id` (default: this key's project), newest first; never their secrets."""
        request = admin.ListApiKeysRequest(project_id=project_id)
        return list((await self._unary(self._stub.ListApiKeys, request)).keys)

    async def revoke_api_key(self, key_id: str) -> admin.ApiKey:
        """Revoke the key `key_id`; it stops working on every replica within seconds."""
        key: admin.ApiKey = (await self._unary(self._stub.RevokeApiKey, admin.RevokeApiKeyRequest(key_id=key_id))).key
        return key

    async def list_audit_records(
        self, project_id: str = "", *, session_id: str = "", page_size: int = 0, page_token: str = ""
    ) -> admin.ListAuditRecordsResponse:
        """One page of the audit trail of `project_id` (default: this key's), newest first."""
        request = admin.ListAuditRecordsRequest(
            project_id=project_id, session_id=session_id, page_size=page_size, page_token=page_token
        )
        response: admin.ListAuditRecordsResponse = await self._unary(self._stub.ListAuditRecords, request)
        return response

    async def list_agents(self) -> list[admin.Agent]:
        """The data-plane agents that enrolled, newest first (operator admins)."""
        return list((await self._unary(self._stub.ListAgents, admin.ListAgentsRequest())).agents)

    async def revoke_agent(self, agent_id: str) -> admin.Agent:
        """Revoke an agent: its stream closes, its id is refused, its sessions move on (operator admins)."""
        request = admin.RevokeAgentRequest(agent_id=agent_id)
        agent: admin.Agent = (await self._unary(self._stub.RevokeAgent, request)).agent
        return agent

    async def admit_agent(self, agent_id: str) -> admin.Agent:
        """Admit a pending agent: from its next Hello it is given work (operator admins). Compare its
        `fingerprint` (list_agents) with the one the agent logged first."""
        agent: admin.Agent = (
            await self._unary(self._stub.AdmitAgent, admin.AdmitAgentRequest(agent_id=agent_id))
        ).agent
        return agent

    async def create_join_token(
        self, ttl: timedelta | None = None, project_id: str = ""
    ) -> admin.CreateJoinTokenResponse:
        """A join token that admits the first new agent presenting it, once, within `ttl` (default an
        hour), dedicated to `project_id` if given (operator admins). `.token` is shown only now."""
        request = admin.CreateJoinTokenRequest(project_id=project_id)
        if ttl is not None:
            request.ttl.FromTimedelta(ttl)
        response: admin.CreateJoinTokenResponse = await self._unary(self._stub.CreateJoinToken, request)
        return response

    async def set_credential_hosts(self, credential_hosts: str, project_id: str = "") -> admin.Project:
        """Where the project's sessions that bind credentials may run: "any" (its dedicated agents,
        then the shared pool) or "dedicated" (only its own agents)."""
        request = admin.SetCredentialHostsRequest(
            project_id=project_id, credential_hosts=f"CREDENTIAL_HOSTS_{credential_hosts.upper()}"
        )
        project: admin.Project = (await self._unary(self._stub.SetCredentialHosts, request)).project
        return project

    async def dedicate_agent(self, agent_id: str, project_id: str = "") -> admin.DedicateAgentResponse:
        """Dedicate an agent to a project ("": back to the shared pool) (operator admins)."""
        request = admin.DedicateAgentRequest(agent_id=agent_id, project_id=project_id)
        response: admin.DedicateAgentResponse = await self._unary(self._stub.DedicateAgent, request)
        return response

    async def get_status(self, *, page_size: int = 0, page_token: str = "") -> admin.GetStatusResponse:
        """The installation now (operator admins): one page of agents (`.agents`, by id; the next
        page's token in `.next_page_token`), `.sessions_by_state` and what is `.stuck`, with why."""
        request = admin.GetStatusRequest(page_size=page_size, page_token=page_token)
        response: admin.GetStatusResponse = await self._unary(self._stub.GetStatus, request)
        return response

    async def cordon_agent(self, agent_id: str) -> admin.AgentHold:
        """Cordon an agent: it takes no new session; what runs there goes on (operator admins)."""
        request = admin.CordonAgentRequest(agent_id=agent_id)
        hold: admin.AgentHold = (await self._unary(self._stub.CordonAgent, request)).hold
        return hold

    async def uncordon_agent(self, agent_id: str) -> admin.AgentHold:
        """Return a cordoned or draining agent to placement, ending its drain (operator admins)."""
        request = admin.UncordonAgentRequest(agent_id=agent_id)
        hold: admin.AgentHold = (await self._unary(self._stub.UncordonAgent, request)).hold
        return hold

    async def drain_agent(self, agent_id: str, *, timeout_seconds: int = 0) -> admin.AgentHold:
        """Drain an agent: cordon it and move its sessions off as each falls idle; turns still
        running after `timeout_seconds` (0: 30 minutes) are interrupted (operator admins)."""
        request = admin.DrainAgentRequest(agent_id=agent_id, timeout_seconds=timeout_seconds)
        hold: admin.AgentHold = (await self._unary(self._stub.DrainAgent, request)).hold
        return hold

    async def get_quotas(self, project_id: str = "") -> admin.GetQuotasResponse:
        """The quotas of `project_id` (default: this key's): `.configured` (unset: the default),
        `.effective` (the limits in force) and `.usage` (what is in use now)."""
        response: admin.GetQuotasResponse = await self._unary(
            self._stub.GetQuotas, admin.GetQuotasRequest(project_id=project_id)
        )
        return response

    async def set_quotas(
        self,
        project_id: str = "",
        *,
        live_sessions: int | None = None,
        sessions_per_minute: int | None = None,
        message_bytes: int | None = None,
        upload_bytes: int | None = None,
        concurrent_commands: int | None = None,
    ) -> admin.SetQuotasResponse:
        """Set every quota of `project_id` (default: this key's); one left None returns to its default.
        Operator admins only: a project's own admin cannot raise its limits."""
        given = {
            "live_sessions": live_sessions,
            "sessions_per_minute": sessions_per_minute,
            "message_bytes": message_bytes,
            "upload_bytes": upload_bytes,
            "concurrent_commands": concurrent_commands,
        }
        quotas = admin.Quotas(**{name: value for name, value in given.items() if value is not None})
        request = admin.SetQuotasRequest(project_id=project_id, quotas=quotas)
        response: admin.SetQuotasResponse = await self._unary(self._stub.SetQuotas, request)
        return response
