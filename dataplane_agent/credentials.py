"""A session's credentials, as the control plane gives them (RunnerService.ResolveCredentials) to the
agent the session is placed on: the one place the agent gets secrets from, for both of their users.

- The egress proxy (`routes/egress`) adds the secrets the session's environment binds to hosts:
  `ResolvedCredentials.bindings` is its `BindingSource`.
- An HTTP MCP server of the session's agent is sent the credential it names
  (`engines/http_mcp.py`): `ResolvedCredentials.mcp_secret`.

Both name credentials of the project's encrypted store (`astrabox credentials put`); the agent keeps
no secret on its disk. The call proves the agent's identity as its Hello does (its enrolled
credential, in the metadata `astrabox-agent-id` / `astrabox-agent-credential`), over the same
target and TLS as the relay's stream. A session's answer is kept for a short time (`ttl`, 60 s) so
that a busy sandbox does not cost a call per request, and one call at a time per session fills it;
a credential replaced or deleted in the control plane reaches the proxy within that time. An MCP
server's secret is asked for again at every use (`mcp_secret` does not read the kept answer, it
refreshes it): a rotated credential is sent from the next call on. Any failure is
CredentialUnavailable, whose message holds the status and reason, never a secret: the proxy then
sends no credential (and says so) rather than guess. Only a request to a host the session's
environment binds a credential to asks at all (`EgressPolicy.binds`): a session binding none goes
out while the control plane is away.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import grpc
import structlog

from astrabox.environments.v1 import environment_pb2
from astrabox.runner.v1 import runner_service_pb2 as pb
from astrabox.runner.v1 import runner_service_pb2_grpc as pb_grpc
from dataplane_agent.keyed_locks import KeyedLocks
from dataplane_agent.routes.egress.bindings import CredentialBinding, Scheme
from serverkit import credential_reach, host_patterns

log = structlog.get_logger(__name__)

AGENT_ID_METADATA = "astrabox-agent-id"
AGENT_CREDENTIAL_METADATA = "astrabox-agent-credential"
DEFAULT_TTL_SECONDS = 60.0
CALL_TIMEOUT_SECONDS = 10.0

_SCHEMES = {
    # The proto's "treated as BEARER": what a binding written without a scheme carries.
    environment_pb2.CREDENTIAL_SCHEME_UNSPECIFIED: Scheme.BEARER,
    environment_pb2.CREDENTIAL_SCHEME_BEARER: Scheme.BEARER,
    environment_pb2.CREDENTIAL_SCHEME_BASIC: Scheme.BASIC,
    environment_pb2.CREDENTIAL_SCHEME_HEADER: Scheme.HEADER,
}


class CredentialUnavailable(Exception):
    """The credential cannot be had now; the message says why, never what it holds."""


@dataclass(frozen=True, slots=True)
class ControlPlaneLink:
    """Where the control plane is and who this agent is (as the relay's `RelayConfig` says)."""

    target: str
    agent_id: str
    credential: str = field(repr=False)
    # TLS to the control plane, verified with these PEM root certificates; None: plaintext.
    root_certificates: bytes | None = None


@dataclass(frozen=True, slots=True)
class SessionCredentials:
    """One answer of the control plane for a session."""

    bindings: tuple[CredentialBinding, ...] = ()
    # The secret each HTTP MCP server is sent, by the server's name.
    mcp: Mapping[str, str] = field(default_factory=dict, repr=False)


def binding(resolved: pb.ResolvedCredential) -> CredentialBinding:
    """The proxy's form of one resolved credential; CredentialUnavailable when it cannot be used."""
    scheme = _SCHEMES.get(resolved.scheme)
    if scheme is None:
        raise CredentialUnavailable(f"credential {resolved.name!r} has no scheme this agent knows")
    # 0: a control plane that does not say, whose bindings all mean HTTPS on 443.
    port = credential_reach.port(resolved.port)
    if not 1 <= port <= 65535:
        raise CredentialUnavailable(f"credential {resolved.name!r} is bound to port {port}, which is none")
    try:
        hosts = tuple(host_patterns.parse(h) for h in resolved.hosts)
    except host_patterns.HostPatternError as error:
        raise CredentialUnavailable(
            f"credential {resolved.name!r} is bound to a host pattern that is not one: {error}"
        ) from None
    return CredentialBinding(
        name=resolved.name,
        hosts=credential_reach.pinned(hosts, port),
        scheme=scheme,
        header=resolved.header if scheme is Scheme.HEADER else "Authorization",
        secret=resolved.secret,
        port=port,
        allow_plain_http=resolved.allow_plain_http,
    )


class ResolvedCredentials:
    """Sessions' credentials from the control plane, kept per session for `ttl` seconds."""

    def __init__(
        self, link: ControlPlaneLink, ttl: float = DEFAULT_TTL_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._link = link
        self._ttl = ttl
        self._clock = clock
        self._cache: dict[str, tuple[float, SessionCredentials]] = {}
        self._locks = KeyedLocks()
        self._channel: grpc.aio.Channel | None = None

    async def bindings(self, session_id: str) -> Sequence[CredentialBinding]:
        """The session's credential bindings, as the egress proxy asks for them (`BindingSource`)."""
        return (await self._credentials(session_id, fresh=False)).bindings

    async def mcp_secret(self, session_id: str, server: str, credential: str) -> str:
        """The secret of `credential`, which the session's HTTP MCP server `server` names, asked for
        now; CredentialUnavailable when the control plane gives none (the project holds no such
        credential) or cannot be asked."""
        secret = (await self._credentials(session_id, fresh=True)).mcp.get(server)
        if secret is None:
            raise CredentialUnavailable(
                f"the project holds no credential {credential[:64]!r} (put it with `astrabox credentials put"
                f" {credential[:64]}`)"
            )
        return secret

    def forget(self, session_id: str) -> None:
        """Drop the session's credentials (its runtime ended): the next use asks again."""
        self._cache.pop(session_id, None)

    async def close(self) -> None:
        self._cache.clear()
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    async def _credentials(self, session_id: str, *, fresh: bool) -> SessionCredentials:
        async with self._locks.hold(session_id):
            cached = self._cache.get(session_id)
            if not fresh and cached is not None and cached[0] > self._clock():
                return cached[1]
            found = await self._resolve(session_id)
            self._cache[session_id] = (self._clock() + self._ttl, found)
            return found

    async def _resolve(self, session_id: str) -> SessionCredentials:
        link = self._link
        stub = pb_grpc.RunnerServiceStub(self._connected())  # type: ignore[no-untyped-call]
        try:
            answer: pb.ResolveCredentialsResponse = await stub.ResolveCredentials(
                pb.ResolveCredentialsRequest(session_id=session_id),
                metadata=((AGENT_ID_METADATA, link.agent_id), (AGENT_CREDENTIAL_METADATA, link.credential)),
                timeout=CALL_TIMEOUT_SECONDS,
            )
        except grpc.aio.AioRpcError as error:
            # The control plane's messages never hold a secret; the text is cut all the same.
            detail = (error.details() or "")[:300]
            log.warning("credentials_not_resolved", session_id=session_id, code=error.code().name, detail=detail)
            raise CredentialUnavailable(
                f"the control plane did not give session {session_id}'s credentials: {error.code().name}: {detail}"
            ) from None
        found = SessionCredentials(
            bindings=tuple(binding(r) for r in answer.credentials),
            mcp={m.server: m.secret for m in answer.mcp_credentials},
        )
        log.info(
            "credentials_resolved",
            session_id=session_id,
            credentials=[b.name for b in found.bindings],
            mcp_servers=sorted(found.mcp),
        )
        return found

    def _connected(self) -> grpc.aio.Channel:
        if self._channel is None:
            if self._link.root_certificates is None:
                self._channel = grpc.aio.insecure_channel(self._link.target)
            else:
                tls = grpc.ssl_channel_credentials(root_certificates=self._link.root_certificates)
                self._channel = grpc.aio.secure_channel(self._link.target, tls)
        return self._channel
