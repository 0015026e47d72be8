"""Which agents may connect and be given work: each agent_id bound to the credential it enrolled
with, and admitted by an operator before it gets anything.

An agent makes its credential once and presents it in every Hello
(`dataplane_agent.relay.credential`). The first Hello of an agent_id binds the credential to that
id; every later one is recognised by the credential alone. So a holder of the enrollment token
cannot connect under an enrolled agent's id and take over its sessions: a Hello with another
credential for that id is refused (PERMISSION_DENIED, AGENT_ID_BOUND) and logged. A revoked agent
is refused (UNAUTHENTICATED, AGENT_REVOKED); revoking also ends its lease, so its stream closes at
its next heartbeat and its sessions are placed elsewhere on their next message.

Holding the enrollment token once is not enough to receive other people's work: an agent that
enrols with it alone is PENDING. Its Hello is refused (PERMISSION_DENIED, AGENT_PENDING_ADMISSION)
until an operator admits it (`astrabox hosts admit ID`, AdminService.AdmitAgent, audited), so it
holds no lease, is placed no session, is sent no command or workspace request, and
ResolveCredentials refuses it too. The operator tells their host from another by the credential's
fingerprint, which the agent logs at start and `astrabox hosts list` shows. A join token
(`astrabox hosts join-token --ttl 1h [--project P]`) admits the agent that first presents it, once,
before it expires, and may dedicate it to a project; it needs no enrollment token. With
`--agent-admission automatic` every agent with the enrollment token is admitted at once: for an
installation whose every agent host may run every project's work (one team), never with an empty
token.

An empty enrollment token admits anyone who reaches the port to the pending list, so the control
plane refuses to start with one unless it listens on loopback only (`server.serve`).
"""

from __future__ import annotations

import enum
import hmac
import ipaddress
import uuid
from datetime import timedelta

import asyncpg
import structlog

from controlplane import store
from controlplane.errors import AgentIdBound, AgentNotFound, AgentPendingAdmission, Unauthenticated
from controlplane.identity import keys

log = structlog.get_logger(__name__)

# An agent's credential is 43 characters (32 random bytes, base64url); longer is no credential.
MAX_CREDENTIAL_CHARS = 256
# A join token's life: at least a minute, at most a week.
MIN_JOIN_TOKEN_TTL = timedelta(minutes=1)
MAX_JOIN_TOKEN_TTL = timedelta(days=7)


class Admission(enum.Enum):
    """What the enrollment token alone gives a new agent."""

    MANUAL = "manual"  # pending, until an operator admits it
    AUTOMATIC = "automatic"  # admitted at once


def fingerprint(secret_sha256: bytes) -> str:
    """How an operator tells one agent's credential from another's: the start of its SHA-256,
    which the agent computes from its own credential alike (nothing to guess the credential by)."""
    return "SHA256:" + secret_sha256.hex()[:16]


class AgentAdmission:
    def __init__(self, pool: asyncpg.Pool, enrollment_token: str, admission: Admission = Admission.MANUAL) -> None:
        self._pool = pool
        self._token = enrollment_token.encode()
        self._admission = admission

    async def admit(
        self, agent_id: str, credential: str, enrollment_token: str, peer: str, join_token: str = ""
    ) -> store.agent_credentials.AgentCredential:
        """The agent's record if it may connect and be given work; raise the refusal otherwise."""
        if not credential or len(credential) > MAX_CREDENTIAL_CHARS:
            raise Unauthenticated(
                "AGENT_CREDENTIAL_MISSING", "Hello carries no agent credential: upgrade the agent, which makes one"
            )
        bound = await store.agent_credentials.find(self._pool, agent_id)
        if bound is None:
            if join_token:
                bound = await self._join(agent_id, credential, join_token, peer)
            elif not hmac.compare_digest(enrollment_token.encode(), self._token):
                raise Unauthenticated(
                    "ENROLLMENT_TOKEN_INVALID", "the enrollment token is not valid for this control plane"
                )
            else:
                automatic = "automatic" if self._admission is Admission.AUTOMATIC else None
                bound = await store.agent_credentials.enrol(self._pool, agent_id, keys.digest(credential), automatic)
                if keys.matches(credential, bound.secret_sha256):
                    log.info(
                        "agent_enrolled",
                        agent_id=agent_id,
                        peer=peer,
                        admitted=bound.admitted_at is not None,
                        fingerprint=fingerprint(bound.secret_sha256),
                    )
        if bound.revoked_at is not None:
            log.warning("revoked_agent_refused", agent_id=agent_id, peer=peer)
            raise Unauthenticated("AGENT_REVOKED", f"agent {agent_id} was revoked")
        if not keys.matches(credential, bound.secret_sha256):
            log.warning("agent_impersonation_refused", agent_id=agent_id, peer=peer)
            raise AgentIdBound(agent_id)
        if bound.admitted_at is None and join_token:
            bound = await self._join(agent_id, credential, join_token, peer)
        if bound.admitted_at is None:
            await store.agent_credentials.note_refused(self._pool, agent_id, peer)
            log.warning(
                "agent_pending_admission", agent_id=agent_id, peer=peer, fingerprint=fingerprint(bound.secret_sha256)
            )
            raise AgentPendingAdmission(agent_id, fingerprint(bound.secret_sha256))
        return bound

    async def _join(
        self, agent_id: str, credential: str, join_token: str, peer: str
    ) -> store.agent_credentials.AgentCredential:
        """Spend the join token on the agent: enrolled (or, pending, admitted) in one transaction.
        UNAUTHENTICATED, JOIN_TOKEN_INVALID, when the token is malformed, unknown, used or expired."""
        parsed = keys.parse_join_token(join_token)
        async with self._pool.acquire() as conn, conn.transaction():
            digest = await store.agent_join_tokens.digest(conn, parsed[0]) if parsed else None
            if parsed is None or digest is None or not keys.matches(parsed[1], digest):
                log.warning("join_token_refused", agent_id=agent_id, peer=peer)
                raise Unauthenticated(
                    "JOIN_TOKEN_INVALID",
                    "the join token is not one this control plane minted, or it was used or has expired: mint"
                    " another with `astrabox hosts join-token`",
                )
            bound = await store.agent_credentials.find(conn, agent_id)
            if bound is not None and not keys.matches(credential, bound.secret_sha256):
                raise AgentIdBound(agent_id)  # the token stays unspent
            token = await store.agent_join_tokens.use(conn, parsed[0], agent_id)
            by = f"join:{token.token_id}"
            if bound is None:
                bound = await store.agent_credentials.enrol(
                    conn, agent_id, keys.digest(credential), by, token.project_id
                )
                if not keys.matches(credential, bound.secret_sha256):
                    raise AgentIdBound(agent_id)  # a racing Hello bound the id first: the token stays unspent
            else:
                admitted = await store.agent_credentials.admit(conn, agent_id, by, token.project_id)
                assert admitted is not None
                bound = admitted
        log.info(
            "agent_joined",
            agent_id=agent_id,
            peer=peer,
            token_id=token.token_id,
            project_id=str(token.project_id) if token.project_id else None,
            fingerprint=fingerprint(bound.secret_sha256),
        )
        return bound

    async def verify(self, agent_id: str, credential: str, peer: str) -> None:
        """Return if `credential` is the one `agent_id` enrolled with, and the agent is admitted and
        not revoked (calls other than Connect: nothing is enrolled here); refuse otherwise."""
        if not credential or len(credential) > MAX_CREDENTIAL_CHARS or not agent_id:
            raise Unauthenticated("AGENT_CREDENTIAL_MISSING", "the call carries no agent id and credential")
        bound = await store.agent_credentials.find(self._pool, agent_id)
        if bound is None or not keys.matches(credential, bound.secret_sha256):
            log.warning("agent_credential_refused", agent_id=agent_id[:128], peer=peer)
            raise Unauthenticated("AGENT_CREDENTIAL_INVALID", "the agent credential is not valid for this agent id")
        if bound.revoked_at is not None:
            raise Unauthenticated("AGENT_REVOKED", f"agent {agent_id} was revoked")
        if bound.admitted_at is None:
            raise AgentPendingAdmission(agent_id, fingerprint(bound.secret_sha256))

    async def admit_pending(self, agent_id: str, admitted_by: str) -> store.agent_credentials.AgentCredential:
        """An operator admits the agent (admitting an admitted one changes nothing); AgentNotFound when
        it never enrolled. A revoked agent stays refused."""
        admitted = await store.agent_credentials.admit(self._pool, agent_id, admitted_by)
        if admitted is None:
            raise AgentNotFound(agent_id)
        log.warning(
            "agent_admitted", agent_id=agent_id, by=admitted_by, fingerprint=fingerprint(admitted.secret_sha256)
        )
        return admitted

    async def mint_join_token(
        self, ttl: timedelta, project_id: uuid.UUID | None, created_by: str
    ) -> tuple[store.agent_join_tokens.JoinToken, str]:
        """A new join token's record and the token itself (shown once; only its digest is kept)."""
        new = keys.new_key(keys.JOIN_PREFIX)
        token = await store.agent_join_tokens.insert(
            self._pool, new.key_id, new.secret_sha256, project_id, created_by, ttl
        )
        log.info("join_token_minted", token_id=new.key_id, by=created_by, expires_at=token.expires_at.isoformat())
        return token, new.secret

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
