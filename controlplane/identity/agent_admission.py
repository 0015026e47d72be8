"""Which agents may connect: each agent_id bound to the credential it enrolled with.

An agent makes its credential once and presents it in every Hello
(`dataplane_agent.relay.credential`). The first Hello of an agent_id needs the
enrollment token and binds the credential to that id; every later one is
admitted by the credential alone. So a holder of the enrollment token cannot
connect under an enrolled agent's id and take over its sessions: a Hello with
another credential for that id is refused (PERMISSION_DENIED, AGENT_ID_BOUND)
and logged. A revoked agent is refused (UNAUTHENTICATED, AGENT_REVOKED);
revoking also ends its lease, so its stream closes at its next heartbeat and
its sessions are placed elsewhere on their next message.

An empty enrollment token admits anyone who reaches the port, so the control
plane refuses to start with one unless it listens on loopback only
(`require_token_off_loopback`).
"""

from __future__ import annotations

import hmac
import ipaddress
import uuid

import asyncpg
import structlog

from controlplane import store
from controlplane.errors import AgentIdBound, AgentNotFound, Unauthenticated
from controlplane.identity import keys

log = structlog.get_logger(__name__)

# An agent's credential is 43 characters (32 random bytes, base64url); longer is no credential.
MAX_CREDENTIAL_CHARS = 256


class AgentAdmission:
    def __init__(self, pool: asyncpg.Pool, enrollment_token: str) -> None:
        self._pool = pool
        self._token = enrollment_token.encode()

    async def admit(self, agent_id: str, credential: str, enrollment_token: str, peer: str) -> None:
        """Return if the agent may connect; raise the refusal otherwise."""
        if not credential or len(credential) > MAX_CREDENTIAL_CHARS:
            raise Unauthenticated(
                "AGENT_CREDENTIAL_MISSING", "Hello carries no agent credential: upgrade the agent, which makes one"
            )
        bound = await store.agent_credentials.find(self._pool, agent_id)
        if bound is None:
            if not hmac.compare_digest(enrollment_token.encode(), self._token):
                raise Unauthenticated(
                    "ENROLLMENT_TOKEN_INVALID", "the enrollment token is not valid for this control plane"
                )
            bound = await store.agent_credentials.enrol(self._pool, agent_id, keys.digest(credential))
            if keys.matches(credential, bound.secret_sha256):
                log.info("agent_enrolled", agent_id=agent_id, peer=peer)
        if bound.revoked_at is not None:
            log.warning("revoked_agent_refused", agent_id=agent_id, peer=peer)
            raise Unauthenticated("AGENT_REVOKED", f"agent {agent_id} was revoked")
        if not keys.matches(credential, bound.secret_sha256):
            log.warning("agent_impersonation_refused", agent_id=agent_id, peer=peer)
            raise AgentIdBound(agent_id)

    async def verify(self, agent_id: str, credential: str, peer: str) -> None:
        """Return if `credential` is the one `agent_id` enrolled with and the agent is not revoked
        (calls other than Connect: nothing is enrolled here); UNAUTHENTICATED otherwise."""
        if not credential or len(credential) > MAX_CREDENTIAL_CHARS or not agent_id:
            raise Unauthenticated("AGENT_CREDENTIAL_MISSING", "the call carries no agent id and credential")
        bound = await store.agent_credentials.find(self._pool, agent_id)
        if bound is None or not keys.matches(credential, bound.secret_sha256):
            log.warning("agent_credential_refused", agent_id=agent_id[:128], peer=peer)
            raise Unauthenticated("AGENT_CREDENTIAL_INVALID", "the agent credential is not valid for this agent id")
        if bound.revoked_at is not None:
            raise Unauthenticated("AGENT_REVOKED", f"agent {agent_id} was revoked")

    async def revoke(self, agent_id: str) -> store.agent_credentials.AgentCredential:
        """Refuse the agent from now on and end its lease (its stream closes at its next heartbeat)."""
        async with self._pool.acquire() as conn, conn.transaction():
            revoked = await store.agent_credentials.revoke(conn, agent_id)
            if revoked is None:
                raise AgentNotFound(agent_id)
            await store.agents.expire(conn, agent_id)
        log.warning("agent_revoked", agent_id=agent_id)
        return revoked

    async def dedicate(self, agent_id: str, project_id: uuid.UUID | None) -> bool:
        """Dedicate the agent to the project (None: the shared pool); False when it never connected."""
        return await store.agents.dedicate(self._pool, agent_id, project_id)

    async def enrolled(self, limit: int) -> list[store.agent_credentials.AgentCredential]:
        return await store.agent_credentials.listed(self._pool, limit)


def loopback_only(host: str) -> bool:
    """Whether a listen host accepts connections from this machine only."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
