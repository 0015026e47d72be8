"""AdminService: projects, API keys, the audit trail and quotas, for the callers `identity.rules` lets in."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import grpc
import structlog

from astrabox.admin.v1 import admin_service_pb2 as pb
from astrabox.admin.v1 import admin_service_pb2_grpc as pb_grpc
from controlplane import fleet_status, quotas, validation
from controlplane.convert import timestamp
from controlplane.drains import DEFAULT_DRAIN_TIMEOUT, MAX_DRAIN_TIMEOUT, Drains, Hold
from controlplane.errors import AgentNotFound, InvalidArgument, ProjectNotFound
from controlplane.identity import audit, callers, keys, store
from controlplane.identity.agent_admission import (
    MAX_JOIN_TOKEN_TTL,
    MIN_JOIN_TOKEN_TTL,
    AgentAdmission,
    fingerprint,
)
from controlplane.identity.callers import Caller, Role
from controlplane.status import maps_errors
from controlplane.store.agent_credentials import AgentCredential
from controlplane.validation import echo, page_size, page_token_invalid

log = structlog.get_logger(__name__)

PROJECT_NAME = re.compile(r"[a-z][a-z0-9-]{0,62}")
MAX_KEY_NAME_CHARS = 128


_CREDENTIAL_HOSTS = {"any": pb.CREDENTIAL_HOSTS_ANY, "dedicated": pb.CREDENTIAL_HOSTS_DEDICATED}
DEFAULT_JOIN_TOKEN_TTL = timedelta(hours=1)


def project_to_proto(record: store.ProjectRecord) -> pb.Project:
    return pb.Project(
        project_id=str(record.project_id),
        name=record.name,
        operator=record.operator,
        create_time=timestamp(record.created_at),
        credential_hosts=_CREDENTIAL_HOSTS[record.credential_hosts],
    )


def key_to_proto(record: store.KeyRecord) -> pb.ApiKey:
    key = pb.ApiKey(
        key_id=record.key_id,
        project_id=str(record.project_id),
        name=record.name,
        role=int(record.role),  # type: ignore[arg-type]  # protoc types enum fields as their own int type
        create_time=timestamp(record.created_at),
        created_by=record.created_by,
    )
    _set_times(key, expire_time=record.expires_at, revoke_time=record.revoked_at, last_use_time=record.last_used_at)
    return key


def _set_times(proto: Any, **times: datetime | None) -> None:
    """Set each Timestamp field of `proto` named in `times` whose time is known; leave the rest unset."""
    for field, value in times.items():
        if value is not None:
            getattr(proto, field).CopyFrom(timestamp(value))


def _project_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidArgument("project_id", f"project_id must be a UUID, got {echo(value)}") from None


class AdminServicer(pb_grpc.AdminServiceServicer):
    def __init__(
        self,
        pool: asyncpg.Pool,
        admission: AgentAdmission,
        drains: Drains,
        startup_deadline: timedelta,
    ) -> None:
        self._pool = pool
        self._admission = admission
        self._drains = drains
        self._startup_deadline = startup_deadline

    async def _managed(self, caller: Caller, project_id: str) -> uuid.UUID:
        """The project a call names (empty: the caller's), if the caller manages it; a project it may
        not manage answers like one that does not exist."""
        if not project_id:
            return caller.project_id
        wanted = _project_id(project_id)
        if not caller.manages(wanted) or await store.find_project(self._pool, wanted) is None:
            raise ProjectNotFound(str(wanted))
        return wanted

    @maps_errors
    async def WhoAmI(self, request: pb.WhoAmIRequest, context: grpc.aio.ServicerContext) -> pb.WhoAmIResponse:
        caller = callers.current()
        project = await store.find_project(self._pool, caller.project_id)
        if project is None:
            raise ProjectNotFound(str(caller.project_id))
        return pb.WhoAmIResponse(
            caller=pb.Caller(
                project=project_to_proto(project),
                role=int(caller.role),  # type: ignore[arg-type]
                key_id=caller.key_id,
                subject=caller.subject,
            )
        )

    @maps_errors
    async def CreateProject(
        self, request: pb.CreateProjectRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateProjectResponse:
        if not PROJECT_NAME.fullmatch(request.name):
            raise InvalidArgument(
                "name",
                f"a project name is 1-63 characters of a-z, 0-9 and '-', starting with a letter; got {echo(request.name)}",
            )
        project = await store.insert_project(self._pool, request.name)
        log.info("project_created", project_id=str(project.project_id), name=project.name, by=callers.current().who)
        return pb.CreateProjectResponse(project=project_to_proto(project))

    @maps_errors
    async def ListProjects(
        self, request: pb.ListProjectsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListProjectsResponse:
        caller = callers.current()
        projects = await store.list_projects(self._pool, only=None if caller.operator else caller.project_id)
        return pb.ListProjectsResponse(projects=[project_to_proto(p) for p in projects])

    @maps_errors
    async def CreateApiKey(
        self, request: pb.CreateApiKeyRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateApiKeyResponse:
        caller = callers.current()
        project_id = await self._managed(caller, request.project_id)
        if not request.name or len(request.name) > MAX_KEY_NAME_CHARS or not request.name.isprintable():
            raise InvalidArgument("name", f"a key needs a name: 1-{MAX_KEY_NAME_CHARS} printable characters")
        if request.role not in {int(role) for role in Role}:
            raise InvalidArgument("role", "role must be ROLE_VIEWER, ROLE_DEVELOPER or ROLE_ADMIN")
        expires_at = None
        if request.HasField("expire_time"):
            expires_at = request.expire_time.ToDatetime(tzinfo=UTC)
            if expires_at <= datetime.now(UTC):
                raise InvalidArgument("expire_time", "expire_time must be in the future")
        new = keys.new_key()
        record = await store.insert_key(
            self._pool,
            key_id=new.key_id,
            project_id=project_id,
            name=request.name,
            role=Role(request.role),
            secret_sha256=new.secret_sha256,
            created_by=caller.who,
            expires_at=expires_at,
        )
        log.info(
            "api_key_created", key_id=new.key_id, project_id=str(project_id), role=record.role.label, by=caller.who
        )
        return pb.CreateApiKeyResponse(key=key_to_proto(record), secret=new.secret)

    @maps_errors
    async def ListApiKeys(
        self, request: pb.ListApiKeysRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListApiKeysResponse:
        project_id = await self._managed(callers.current(), request.project_id)
        return pb.ListApiKeysResponse(keys=[key_to_proto(k) for k in await store.list_keys(self._pool, project_id)])

    @maps_errors
    async def RevokeApiKey(
        self, request: pb.RevokeApiKeyRequest, context: grpc.aio.ServicerContext
    ) -> pb.RevokeApiKeyResponse:
        caller = callers.current()
        if not keys.KEY_ID.fullmatch(request.key_id):
            raise InvalidArgument("key_id", f"key_id is 16 characters of a-z and 2-7, got {echo(request.key_id)}")
        record = await store.revoke_key(self._pool, request.key_id, None if caller.operator else [caller.project_id])
        log.info("api_key_revoked", key_id=record.key_id, project_id=str(record.project_id), by=caller.who)
        return pb.RevokeApiKeyResponse(key=key_to_proto(record))

    async def _readable(self, caller: Caller, project_id: str) -> uuid.UUID:
        """The project a call names (empty: the caller's), if the caller may read it: its own, or any
        for an operator admin; another answers like one that does not exist."""
        if not project_id:
            return caller.project_id
        wanted = _project_id(project_id)
        if wanted == caller.project_id:
            return wanted
        if not caller.operator:
            raise ProjectNotFound(str(wanted))
        return await self._managed(caller, project_id)

    @maps_errors
    async def GetQuotas(self, request: pb.GetQuotasRequest, context: grpc.aio.ServicerContext) -> pb.GetQuotasResponse:
        project_id = await self._readable(callers.current(), request.project_id)
        configured, effective = quotas_to_proto(await quotas.of(self._pool, project_id))
        used = await quotas.usage(self._pool, project_id)
        return pb.GetQuotasResponse(
            project_id=str(project_id),
            configured=configured,
            effective=effective,
            usage=pb.QuotaUsage(
                live_sessions=used.live_sessions,
                sessions_per_minute=used.sessions_per_minute,
                concurrent_commands=used.concurrent_commands,
            ),
        )

    @maps_errors
    async def SetQuotas(self, request: pb.SetQuotasRequest, context: grpc.aio.ServicerContext) -> pb.SetQuotasResponse:
        caller = callers.current()
        project_id = await self._managed(caller, request.project_id)
        values = {
            name: getattr(request.quotas, name) if request.quotas.HasField(name) else None for name in quotas.NAMES
        }
        stored = await quotas.put(self._pool, project_id, values, caller.who)
        log.info("quotas_set", project_id=str(project_id), by=caller.who, **stored.set)
        configured, effective = quotas_to_proto(stored)
        return pb.SetQuotasResponse(project_id=str(project_id), configured=configured, effective=effective)

    @maps_errors
    async def ListAuditRecords(
        self, request: pb.ListAuditRecordsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListAuditRecordsResponse:
        project_id = await self._managed(callers.current(), request.project_id)
        session_id = uuid.UUID(validation.session_id(request.session_id)) if request.session_id else None
        before = None
        if request.page_token:
            if not request.page_token.isdigit() or len(request.page_token) > 19:
                raise page_token_invalid()
            before = int(request.page_token)
        limit = page_size(request.page_size, 50, 500)
        records = await audit.page(self._pool, project_id, session_id, before, limit)
        return pb.ListAuditRecordsResponse(
            records=[audit_record_to_proto(r) for r in records],
            next_page_token=str(records[-1].record_id) if len(records) == limit else "",
        )

    @maps_errors
    async def ListAgents(
        self, request: pb.ListAgentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListAgentsResponse:
        return pb.ListAgentsResponse(
            agents=[agent_to_proto(a) for a in await self._admission.enrolled(store.MAX_LISTED)]
        )

    @maps_errors
    async def RevokeAgent(
        self, request: pb.RevokeAgentRequest, context: grpc.aio.ServicerContext
    ) -> pb.RevokeAgentResponse:
        if not request.agent_id:
            raise InvalidArgument("agent_id", "name the agent to revoke (astrabox agents list shows them)")
        revoked = await self._admission.revoke(request.agent_id)
        log.warning("agent_revoked_by", agent_id=request.agent_id, by=callers.current().who)
        return pb.RevokeAgentResponse(agent=agent_to_proto(revoked))

    @maps_errors
    async def AdmitAgent(
        self, request: pb.AdmitAgentRequest, context: grpc.aio.ServicerContext
    ) -> pb.AdmitAgentResponse:
        if not request.agent_id:
            raise InvalidArgument("agent_id", "name the agent to admit (astrabox hosts list shows the pending ones)")
        admitted = await self._admission.admit_pending(request.agent_id, callers.current().who)
        return pb.AdmitAgentResponse(agent=agent_to_proto(admitted))

    @maps_errors
    async def CreateJoinToken(
        self, request: pb.CreateJoinTokenRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateJoinTokenResponse:
        ttl = request.ttl.ToTimedelta() if request.HasField("ttl") else timedelta(0)
        ttl = ttl or DEFAULT_JOIN_TOKEN_TTL
        if not MIN_JOIN_TOKEN_TTL <= ttl <= MAX_JOIN_TOKEN_TTL:
            raise InvalidArgument(
                "ttl", f"ttl must be 60 seconds to 7 days, got {echo(str(int(ttl.total_seconds())))} seconds"
            )
        project_id = None
        if request.project_id:
            project_id = _project_id(request.project_id)
            if await store.find_project(self._pool, project_id) is None:
                raise ProjectNotFound(str(project_id))
        token, secret = await self._admission.mint_join_token(ttl, project_id, callers.current().who)
        return pb.CreateJoinTokenResponse(
            join_token=pb.JoinToken(
                token_id=token.token_id,
                project_id=str(token.project_id) if token.project_id else "",
                create_time=timestamp(token.created_at),
                expire_time=timestamp(token.expires_at),
                created_by=token.created_by,
            ),
            token=secret,
        )

    @maps_errors
    async def SetCredentialHosts(
        self, request: pb.SetCredentialHostsRequest, context: grpc.aio.ServicerContext
    ) -> pb.SetCredentialHostsResponse:
        project_id = await self._managed(callers.current(), request.project_id)
        wanted = {v: k for k, v in _CREDENTIAL_HOSTS.items()}.get(request.credential_hosts)
        if wanted is None:
            raise InvalidArgument(
                "credential_hosts", "credential_hosts must be CREDENTIAL_HOSTS_ANY or CREDENTIAL_HOSTS_DEDICATED"
            )
        project = await store.set_credential_hosts(self._pool, project_id, wanted)
        if project is None:
            raise ProjectNotFound(str(project_id))
        log.info("credential_hosts_set", project_id=str(project_id), credential_hosts=wanted, by=callers.current().who)
        return pb.SetCredentialHostsResponse(project=project_to_proto(project))

    @maps_errors
    async def DedicateAgent(
        self, request: pb.DedicateAgentRequest, context: grpc.aio.ServicerContext
    ) -> pb.DedicateAgentResponse:
        project_id = None
        if request.project_id:
            project_id = _project_id(request.project_id)
            if await store.find_project(self._pool, project_id) is None:
                raise ProjectNotFound(str(project_id))
        if not request.agent_id or not await self._admission.dedicate(request.agent_id, project_id):
            raise AgentNotFound(request.agent_id)
        log.info("agent_dedicated", agent_id=request.agent_id, project_id=str(project_id), by=callers.current().who)
        return pb.DedicateAgentResponse(agent_id=request.agent_id, project_id=str(project_id) if project_id else "")

    @maps_errors
    async def GetStatus(self, request: pb.GetStatusRequest, context: grpc.aio.ServicerContext) -> pb.GetStatusResponse:
        return await fleet_status.snapshot(self._pool, request, self._startup_deadline)

    @maps_errors
    async def CordonAgent(
        self, request: pb.CordonAgentRequest, context: grpc.aio.ServicerContext
    ) -> pb.CordonAgentResponse:
        hold = await self._drains.cordon(_agent_id(request.agent_id, "cordon"))
        log.info("agent_cordoned_by", agent_id=request.agent_id, by=callers.current().who)
        return pb.CordonAgentResponse(hold=hold_to_proto(hold))

    @maps_errors
    async def UncordonAgent(
        self, request: pb.UncordonAgentRequest, context: grpc.aio.ServicerContext
    ) -> pb.UncordonAgentResponse:
        hold = await self._drains.uncordon(_agent_id(request.agent_id, "uncordon"))
        log.info("agent_uncordoned_by", agent_id=request.agent_id, by=callers.current().who)
        return pb.UncordonAgentResponse(hold=hold_to_proto(hold))

    @maps_errors
    async def DrainAgent(
        self, request: pb.DrainAgentRequest, context: grpc.aio.ServicerContext
    ) -> pb.DrainAgentResponse:
        seconds = request.timeout_seconds
        if seconds < 0 or seconds > MAX_DRAIN_TIMEOUT.total_seconds():
            raise InvalidArgument(
                "timeout_seconds", f"timeout_seconds must be 0-{int(MAX_DRAIN_TIMEOUT.total_seconds())}, got {seconds}"
            )
        timeout = timedelta(seconds=seconds) if seconds else DEFAULT_DRAIN_TIMEOUT
        hold = await self._drains.cordon(_agent_id(request.agent_id, "drain"), drain_for=timeout)
        log.warning("agent_drain_started", agent_id=request.agent_id, by=callers.current().who)
        return pb.DrainAgentResponse(hold=hold_to_proto(hold))


def _agent_id(value: str, verb: str) -> str:
    if not value:
        raise InvalidArgument("agent_id", f"name the agent to {verb} (`astrabox hosts list` shows them)")
    return value


def hold_to_proto(hold: Hold) -> pb.AgentHold:
    proto = pb.AgentHold(agent_id=hold.agent_id)
    if hold.cordoned_at is not None:
        proto.cordon_time.CopyFrom(timestamp(hold.cordoned_at))
    if hold.drain_deadline is not None:
        proto.drain_deadline.CopyFrom(timestamp(hold.drain_deadline))
    return proto


def agent_to_proto(agent: AgentCredential) -> pb.Agent:
    proto = pb.Agent(
        agent_id=agent.agent_id,
        enroll_time=timestamp(agent.enrolled_at),
        admitted_by=agent.admitted_by,
        fingerprint=fingerprint(agent.secret_sha256),
        last_peer=agent.last_peer,
    )
    _set_times(
        proto, revoke_time=agent.revoked_at, admit_time=agent.admitted_at, last_refused_time=agent.last_refused_at
    )
    return proto


def quotas_to_proto(found: quotas.ProjectQuotas) -> tuple[pb.Quotas, pb.Quotas]:
    """(configured, effective): the quotas set for a project, and the limits in force."""
    configured = pb.Quotas(**{name: value for name, value in found.set.items() if value is not None})
    return configured, pb.Quotas(**{name: getattr(found.limits, name) for name in quotas.NAMES})


def audit_record_to_proto(record: audit.AuditRecord) -> pb.AuditRecord:
    return pb.AuditRecord(
        record_id=record.record_id,
        time=timestamp(record.at),
        project_id=str(record.project_id),
        actor=record.actor,
        method=record.method,
        session_id=str(record.session_id) if record.session_id else "",
        details=record.details,
        code=record.code,
    )
