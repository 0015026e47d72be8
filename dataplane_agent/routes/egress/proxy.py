"""The egress proxy: a sandbox's only way out, and where its network policy is enforced.

A sandbox has its own empty network namespace (local driver: bwrap --unshare-net; docker: network
none): no route anywhere, UDP and raw sockets included. The agent listens on one unix socket that
every sandbox sees at /run/astrabox/egress.sock; a relay inside the sandbox turns it into
127.0.0.1:41801, and a session whose network mode is not NONE gets HTTP_PROXY/HTTPS_PROXY/ALL_PROXY
pointing there (`env`), its token as the proxy credentials (astrabox:<token>). NO_PROXY=127.0.0.1
keeps the model relay (127.0.0.1:41800) direct; a sandbox's own loopback is all 127.0.0.1 reaches.

Per connection: one request head (bounded: line, size, header count; an idle deadline), its
Proxy-Authorization checked (no valid token: 407, never forwarded), then either
  - CONNECT host:port (HTTPS, git, pip, npm): a blind tunnel once allowed, or
  - an absolute-form plain HTTP request: sent upstream in origin form, hop-by-hop and Proxy-*
    headers dropped, one request per connection.
A connection is allowed when the session's policy (policy.py) admits the host and port the sandbox
asked for, and every address the proxy resolves the name to is one the agent connects to for a
sandbox (not loopback, private, link-local, ... unless in --egress-allowed-networks). The proxy
connects to the address it checked: no second resolution, no rebinding gap.

A refusal is answered (403, or 502 when the upstream cannot be reached) with a one-line plain-text
body saying what was refused, why and how to allow it, and reported as the session's
EgressRefused output (rate-limited: reports.py).

Credentials: a binding's secret goes only into requests to one of its hosts on its port
(`CredentialBinding.matches`), replacing the header of that name the sandbox sent:
  - over TLS: a CONNECT to exactly such a host:port is intercepted (interception.py: the agent's CA,
    trusted by the sandbox through a bundle beside the socket), the proxy's own TLS to the host
    verified, and the one request inside gets the secret. Any other CONNECT, the bound host on
    another port included, is a blind tunnel: nothing added, nothing read;
  - over plain HTTP only for a binding with `allow_plain_http` (which the control plane allows for
    non-public hosts only), and only when the address the proxy connected to is loopback or private
    (`credential_reach.non_public_address`): a name that resolved to a public address gets none.
    Any other plain-HTTP request, to a bound host included, is sent as the sandbox wrote it, its
    own Authorization (or other) header untouched: the proxy adds nothing and takes nothing away,
    so the sandbox can never make it put a secret on an unencrypted connection.
Without an `Interception` (none given) only `allow_plain_http` bindings apply.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.mcp_destinations import Network, refused_kind
from dataplane_agent.routes.egress.bindings import BindingSource, CredentialBinding
from dataplane_agent.routes.egress.interception import Interception, trust_env
from dataplane_agent.routes.egress.policy import NONE, EgressPolicy
from dataplane_agent.routes.egress.reports import RefusalReports
from dataplane_agent.routes.listener import SandboxSocket
from dataplane_agent.routes.tokens import SessionTokens
from dataplane_agent.sandboxes.base import EGRESS_PORT
from serverkit import credential_reach
from serverkit.host_patterns import HostPattern, canonical_host
from serverkit.waits import bounded

log = structlog.get_logger(__name__)

SOCKET_NAME = "egress.sock"
_PROXY_USER = "astrabox"
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "te", "trailer", "upgrade", "transfer-encoding", "content-length", "host"}
)
_METHOD = re.compile(r"[A-Z]{1,16}")
# Visible ASCII only: no spaces, no control characters (CR/LF smuggled into a target above all).
_TARGET = re.compile(r"[\x21-\x7e]{1,4096}")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_REASONS = {400: "Bad Request", 403: "Forbidden", 407: "Proxy Authentication Required", 502: "Bad Gateway"}
_REASONS |= {503: "Service Unavailable"}

Report = Callable[[str, pb.EgressRefused], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class ProxyLimits:
    """Bounds on what one sandbox connection may ask of the proxy."""

    max_head: int = 32 * 1024
    max_headers: int = 100
    # CONNECT targets and Host names; DNS names are at most 253 characters.
    max_authority: int = 300
    head_timeout: float = 30.0
    resolve_timeout: float = 10.0
    connect_timeout: float = 30.0
    # A tunnel or a response with nothing moving either way for this long is closed.
    idle_timeout: float = 300.0
    connections_per_session: int = 64
    connections: int = 1024


class Refused(Exception):
    """A request the proxy answers itself; `report`: the policy refused it (an EgressRefused)."""

    def __init__(self, status: int, message: str, *, host: str = "", port: int = 0, report: bool = False) -> None:
        super().__init__(message)
        self.status, self.host, self.port, self.report = status, host, port, report


@dataclass(slots=True)
class _Request:
    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]

    def get(self, name: str) -> str:
        return next((value for key, value in self.headers if key.lower() == name), "")


def proxy_env(token: str) -> dict[str, str]:
    """The environment that sends a sandbox's HTTP(S) clients through the proxy."""
    url = f"http://{_PROXY_USER}:{token}@127.0.0.1:{EGRESS_PORT}"
    env = dict.fromkeys(("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"), url)
    return env | {"NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}


class EgressProxy:
    """The agent's side of every sandbox's way to the network."""

    def __init__(
        self,
        directory: Path,
        bindings: BindingSource,
        *,
        allowed_networks: Iterable[Network] = (),
        registries: Iterable[HostPattern] = (),
        report: Report | None = None,
        limits: ProxyLimits = ProxyLimits(),
        interception: Interception | None = None,
    ) -> None:
        self._socket = SandboxSocket(directory, SOCKET_NAME, limit=limits.max_head)
        self._bindings = bindings
        self._allowed_networks = tuple(allowed_networks)
        self.registries = tuple(registries)
        self._report = report
        self._limits = limits
        self._interception = interception
        self._tokens = SessionTokens()
        self._policies: dict[str, EgressPolicy] = {}
        # Owners that are no session (a layer build's setup script): no credentials, no reports.
        self._builds: set[str] = set()
        self._reports = RefusalReports()
        self._open: dict[str, int] = {}

    @property
    def socket(self) -> Path:
        """The unix socket, on the host; its directory holds nothing else."""
        return self._socket.path

    def register(self, session_id: str, policy: EgressPolicy) -> None:
        """From now on the session's connections are judged by `policy`."""
        self._policies[session_id] = policy

    def register_build(self, owner: str, policy: EgressPolicy) -> None:
        """A layer build's sandbox (`owner`, no session) goes out under `policy`, with no credential
        (a layer is shared by every environment of its build digest, across projects: no secret may
        go into one) and no refusal reported (there is no session to report it to; the setup
        script sees the refusal and fails the build with it)."""
        self._builds.add(owner)
        self._policies[owner] = policy

    def forget(self, session_id: str) -> None:
        """The session is gone from this agent: its token is refused from now on."""
        self._policies.pop(session_id, None)
        if session_id in self._builds:
            self._builds.discard(session_id)
            return
        self._reports.forget(session_id)
        # Its secrets leave this process's memory too, where the source keeps them.
        forget = getattr(self._bindings, "forget", None)
        if callable(forget):
            forget(session_id)

    def policy(self, session_id: str) -> EgressPolicy:
        return self._policies.get(session_id, NONE)

    def env(self, session_id: str) -> dict[str, str]:
        """What the session's engine and commands need to go through the proxy; nothing for a
        session without network access."""
        if not self.policy(session_id).open:
            return {}
        trust = trust_env() if self._interception is not None else {}
        return {**proxy_env(self._tokens.token(session_id)), **trust}

    async def start(self) -> None:
        if self._interception is not None:
            self._socket.directory.mkdir(parents=True, exist_ok=True)
            await asyncio.to_thread(self._interception.write_bundle, self._socket.directory)
        await self._socket.start(self._serve)
        log.info("egress_proxy_started", socket=str(self.socket))

    async def stop(self) -> None:
        if not await self._socket.stop():
            return
        log.info("egress_proxy_stopped", socket=str(self.socket))

    async def __aenter__(self) -> EgressProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- one sandbox connection -------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session_id = ""
        try:
            if self._socket.open_connections > self._limits.connections:
                raise Refused(503, "the egress proxy has too many connections open; try again later")
            request = await bounded(self._read_request(reader), self._limits.head_timeout)
            if request is None:
                return
            session_id = self._session(request)
            if self._open.get(session_id, 0) >= self._limits.connections_per_session:
                session_id = ""
                raise Refused(503, "this session has too many connections open through the egress proxy")
            self._open[session_id] = self._open.get(session_id, 0) + 1
            await self._handle(session_id, request, reader, writer)
        except Refused as refused:
            await self._refuse(session_id, refused, writer)
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, OSError):
            pass
        except asyncio.CancelledError:  # the proxy is stopping; the connection ends here
            pass
        finally:
            if session_id:
                left = self._open.get(session_id, 1) - 1
                if left:
                    self._open[session_id] = left
                else:
                    self._open.pop(session_id, None)
            writer.close()
            with contextlib.suppress(Exception):
                await bounded(writer.wait_closed(), 1)

    async def _read_request(self, reader: asyncio.StreamReader) -> _Request | None:
        line = await self._line(reader)
        if not line:
            return None
        parts = line.decode("latin-1").rstrip("\r\n").split(" ")
        if len(parts) != 3 or not _METHOD.fullmatch(parts[0]) or not _TARGET.fullmatch(parts[1]):
            raise Refused(400, "a malformed request line (the egress proxy speaks HTTP/1.1 proxy requests)")
        if parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
            raise Refused(400, "only HTTP/1.0 and HTTP/1.1 requests are proxied")
        headers: list[tuple[str, str]] = []
        size = len(line)
        while True:
            line = await self._line(reader)
            size += len(line)
            if size > self._limits.max_head:
                raise Refused(400, f"the request head is larger than {self._limits.max_head} bytes")
            if line in (b"\r\n", b"\n"):
                return _Request(parts[0], parts[1], parts[2], headers)
            if not line:
                raise asyncio.IncompleteReadError(b"", None)
            name, colon, value = line.decode("latin-1").rstrip("\r\n").partition(":")
            if not colon or not _TARGET.fullmatch(name) or _CONTROL.search(value):
                raise Refused(400, "a malformed request header")
            headers.append((name, value.strip()))
            if len(headers) > self._limits.max_headers:
                raise Refused(400, f"more than {self._limits.max_headers} request headers")

    async def _line(self, reader: asyncio.StreamReader) -> bytes:
        try:
            return await reader.readline()
        except ValueError:  # longer than the reader's limit
            raise Refused(400, f"a request line longer than {self._limits.max_head} bytes") from None

    def _session(self, request: _Request) -> str:
        scheme, _, credentials = request.get("proxy-authorization").partition(" ")
        token = ""
        if scheme.lower() == "basic":
            with contextlib.suppress(ValueError):
                user, _, token = base64.b64decode(credentials.strip(), validate=True).decode().partition(":")
                token = token if user == _PROXY_USER else ""
        session_id = self._tokens.owner_of(token) if token else None
        if session_id is None:
            log.info("egress_refused_unauthenticated", method=request.method)
            raise Refused(407, "the egress proxy needs this session's proxy credentials (HTTP_PROXY has them)")
        return session_id

    async def _handle(
        self, session_id: str, request: _Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if request.method == "CONNECT":
            host, port = self._authority(request.target, default_port=None)
            if self._interception is not None and self.policy(session_id).refusal(host, port) is None:
                bindings = await self._matching(session_id, host, port, tls=True)
                if bindings:
                    await self._intercept(session_id, host, port, bindings, reader, writer)
                    return
            up_reader, up_writer = await self._open_upstream(session_id, host, port)
            try:
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                await writer.drain()
                log.debug("egress_tunnel", session_id=session_id, host=host, port=port)
                await self._pipe(reader, writer, up_reader, up_writer)
            finally:
                up_writer.close()
            return
        if not request.target.lower().startswith("http://"):
            raise Refused(400, "send an absolute http:// URL to the proxy, or CONNECT for https")
        rest = request.target[len("http://") :]
        authority, slash, path = rest.partition("/")
        authority, _, _ = authority.partition("?")
        if "@" in authority:
            raise Refused(400, "user information in a proxied URL is not forwarded")
        host, port = self._authority(authority, default_port=80)
        origin = "/" + path if slash else "/" + rest[len(authority) :].lstrip("/")
        framing = _framing(request)
        # The policy first (in _open_upstream): a host it refuses is refused as such and reported,
        # whether or not the control plane can give the session's credentials, and costs no call.
        up_reader, up_writer = await self._open_upstream(session_id, host, port)
        try:
            bindings = await self._matching(session_id, host, port, tls=False)
            if bindings and not _non_public_peer(up_writer):
                log.warning("egress_plain_credential_withheld", session_id=session_id, host=host, port=port)
                bindings = []
            up_writer.write(_upstream_head(request, origin, authority, framing, bindings))
            await self._send_body(request, framing, reader, writer, up_writer)
            log.debug("egress_request", session_id=session_id, host=host, port=port, method=request.method)
            await self._pipe(reader, writer, up_reader, up_writer, client_sends=False)
        finally:
            up_writer.close()

    async def _intercept(
        self,
        session_id: str,
        host: str,
        port: int,
        bindings: Sequence[CredentialBinding],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        """One HTTPS request to a host with a credential binding: the sandbox's TLS ends here (a leaf
        of the agent's CA), the proxy's own TLS to the host verifies it, the credential goes in."""
        assert self._interception is not None
        up_reader, up_writer = await self._open_upstream(session_id, host, port)
        try:
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            await writer.drain()
            canonical = canonical_host(host) or host
            await bounded(writer.start_tls(self._interception.for_host(canonical)), self._limits.head_timeout)
            request = await bounded(self._read_request(reader), self._limits.head_timeout)
            if request is None:
                return
            if not request.target.startswith("/"):
                raise Refused(400, "inside a tunnel, send an origin-form request (GET /path)")
            framing = _framing(request)
            try:
                await bounded(
                    up_writer.start_tls(self._interception.upstream(), server_hostname=canonical),
                    self._limits.connect_timeout,
                )
            except (OSError, TimeoutError) as error:
                raise Refused(502, f"{host}:{port}'s TLS could not be verified: {error or 'timed out'}") from None
            authority = host if port == 443 else f"{host}:{port}"
            up_writer.write(_upstream_head(request, request.target, authority, framing, bindings))
            await self._send_body(request, framing, reader, writer, up_writer)
            log.debug("egress_request", session_id=session_id, host=host, port=port, method=request.method, tls=True)
            await self._pipe(reader, writer, up_reader, up_writer, client_sends=False)
        finally:
            up_writer.close()

    def _authority(self, authority: str, *, default_port: int | None) -> tuple[str, int]:
        if len(authority) > self._limits.max_authority:
            raise Refused(400, f"a host longer than {self._limits.max_authority} characters")
        if authority.startswith("["):
            host, bracket, rest = authority[1:].partition("]")
            port_text = rest[1:] if bracket and rest.startswith(":") else ("" if bracket and not rest else "x")
        else:
            host, _, port_text = authority.rpartition(":") if ":" in authority else (authority, "", "")
        if not port_text and default_port is not None:
            port = default_port
        elif port_text.isdigit() and 1 <= int(port_text) <= 65535:
            port = int(port_text)
        else:
            raise Refused(400, f"{authority[:80]!r} is not host:port with a port from 1 to 65535")
        if canonical_host(host) is None:
            raise Refused(400, f"{authority[:80]!r} does not name a host")
        return host, port

    async def _send_body(
        self,
        request: _Request,
        framing: tuple[str, int],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        """Stream the request's body upstream as it comes (never held whole: a push may be large),
        in its own framing, checked on the way."""
        timeout = self._limits.idle_timeout
        kind, length = framing
        if kind != "none" and "100-continue" in request.get("expect").lower():
            # Answered here: the upstream's own 100 is not relayed before the body is sent.
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await writer.drain()
        if kind == "length":
            while length > 0:
                data = await bounded(reader.read(min(length, 65536)), timeout)
                if not data:
                    raise asyncio.IncompleteReadError(b"", length)
                length -= len(data)
                up_writer.write(data)
                await up_writer.drain()
        elif kind == "chunked":
            while True:
                size_line = await bounded(reader.readline(), timeout)
                try:
                    size = int(size_line.split(b";")[0].strip(), 16)
                except ValueError:
                    raise Refused(400, "a malformed chunked body") from None
                if size < 0:
                    raise Refused(400, "a malformed chunked body")
                up_writer.write(b"%x\r\n" % size)
                if size == 0:
                    # Trailers are not forwarded: the chunked body ends here.
                    while (await bounded(reader.readline(), timeout)) not in (b"\r\n", b"\n", b""):
                        pass
                    up_writer.write(b"\r\n")
                    break
                while size > 0:
                    data = await bounded(reader.read(min(size, 65536)), timeout)
                    if not data:
                        raise asyncio.IncompleteReadError(b"", size)
                    size -= len(data)
                    up_writer.write(data)
                    await up_writer.drain()
                if await bounded(reader.readexactly(2), timeout) != b"\r\n":
                    raise Refused(400, "a malformed chunked body")
                up_writer.write(b"\r\n")
        await up_writer.drain()

    async def _matching(self, session_id: str, host: str, port: int, *, tls: bool) -> list[CredentialBinding]:
        """The bindings whose secret a request to `host`:`port` gets: inside intercepted TLS
        (`tls`), or in plain HTTP."""
        if session_id in self._builds or not self.policy(session_id).binds(host, port, tls=tls):
            return []
        try:
            bindings = await self._bindings.bindings(session_id)
        except Exception as error:  # the message never holds a secret (BindingSource's contract)
            raise Refused(502, f"the credentials bound to {host} could not be had: {error}") from None
        return [binding for binding in bindings if binding.matches(host, port, tls=tls)]

    async def _open_upstream(
        self, session_id: str, host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to `host`:`port` if the session may have one: Refused saying why not."""
        where = f"{host}:{port}"
        reason = self.policy(session_id).refusal(host, port)
        if reason is not None:
            raise Refused(403, f"{where} is refused: {reason}", host=host, port=port, report=True)
        addresses = await self._resolve(host, port)
        for address in addresses:
            if (kind := refused_kind(address, self._allowed_networks)) is not None:
                raise Refused(
                    403,
                    f"{where} is refused: it resolves to {address}, a {kind} address"
                    " (an operator may allow its network with --egress-allowed-networks)",
                    host=host,
                    port=port,
                    report=True,
                )
        error: OSError | TimeoutError | None = None
        for address in addresses:
            try:
                return await bounded(
                    asyncio.open_connection(str(address), port, limit=self._limits.max_head),
                    self._limits.connect_timeout,
                )
            except (OSError, TimeoutError) as failure:
                error = failure
        raise Refused(502, f"{where} could not be reached: {error or 'timed out'}")

    async def _resolve(self, host: str, port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        canonical = canonical_host(host) or ""
        with contextlib.suppress(ValueError):
            return [ipaddress.ip_address(canonical)]
        try:
            async with asyncio.timeout(self._limits.resolve_timeout):
                infos = await asyncio.get_running_loop().getaddrinfo(canonical, port, type=socket.SOCK_STREAM)
        except (OSError, TimeoutError) as error:
            raise Refused(502, f"{host} could not be resolved: {error or 'timed out'}") from None
        addresses = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos))
        if not addresses:
            raise Refused(502, f"{host} has no address")
        return addresses

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
        *,
        client_sends: bool = True,
    ) -> None:
        """Copy both ways until either side closes or nothing moves for the idle timeout."""
        timeout = self._limits.idle_timeout

        async def copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            while data := await bounded(source.read(65536), timeout):
                sink.write(data)
                await sink.drain()
            if sink.can_write_eof():
                with contextlib.suppress(OSError):
                    sink.write_eof()

        downstream = asyncio.ensure_future(copy(up_reader, writer))
        upstream = asyncio.ensure_future(copy(reader, up_writer)) if client_sends else None
        try:
            await downstream
        finally:
            if upstream is not None:
                upstream.cancel()
                with contextlib.suppress(BaseException):
                    await upstream

    async def _refuse(self, session_id: str, refused: Refused, writer: asyncio.StreamWriter) -> None:
        message = f"astrabox egress: {refused}"
        if refused.report and session_id and session_id not in self._builds:
            log.info("egress_refused", session_id=session_id, host=refused.host, port=refused.port)
            suppressed = self._reports.take(session_id)
            if suppressed is not None and self._report is not None:
                body = pb.EgressRefused(
                    host=refused.host[:253], port=refused.port, reason=str(refused)[:500], suppressed=suppressed
                )
                try:
                    await self._report(session_id, body)
                except Exception as error:
                    log.warning("egress_refusal_not_reported", session_id=session_id, error=str(error))
        body_bytes = (message + "\n").encode("utf-8", "replace")
        head = f"HTTP/1.1 {refused.status} {_REASONS.get(refused.status, 'Error')}\r\n"
        if refused.status == 407:
            head += 'proxy-authenticate: Basic realm="astrabox"\r\n'
        head += (
            f"content-type: text/plain; charset=utf-8\r\ncontent-length: {len(body_bytes)}\r\nconnection: close\r\n\r\n"
        )
        with contextlib.suppress(ConnectionError, OSError):
            writer.write(head.encode("latin-1") + body_bytes)
            await bounded(writer.drain(), 5)


def _non_public_peer(writer: asyncio.StreamWriter) -> bool:
    """Whether the upstream connection's address is loopback or private (a plain-HTTP credential
    goes nowhere else, whatever the name it was bound to resolved to)."""
    peer = writer.get_extra_info("peername")
    try:
        return credential_reach.non_public_address(ipaddress.ip_address(str(peer[0]).split("%", 1)[0]))
    except (TypeError, IndexError, ValueError):
        return False


def _framing(request: _Request) -> tuple[str, int]:
    """How the request's body is delimited: ("chunked", 0), ("length", n) or ("none", 0)."""
    if "chunked" in request.get("transfer-encoding").lower():
        return "chunked", 0
    length = request.get("content-length")
    if not length:
        return "none", 0
    if not length.isdigit() or len(length) > 15:
        raise Refused(400, "a malformed content-length")
    return ("length", int(length)) if int(length) else ("none", 0)


def _upstream_head(
    request: _Request,
    origin: str,
    authority: str,
    framing: tuple[str, int],
    bindings: Sequence[CredentialBinding],
) -> bytes:
    replaced = {name.lower(): (name, value) for name, value in (b.header_line() for b in bindings)}
    lines = [f"{request.method} {origin} HTTP/1.1", f"Host: {authority}"]
    for name, value in request.headers:
        lower = name.lower()
        if lower in _HOP_BY_HOP or lower == "expect" or lower.startswith("proxy-") or lower in replaced:
            continue
        lines.append(f"{name}: {value}")
    lines += [f"{name}: {value}" for name, value in replaced.values()]
    kind, length = framing
    if kind == "chunked":
        lines.append("Transfer-Encoding: chunked")
    elif kind == "length" or request.method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {length}")
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
