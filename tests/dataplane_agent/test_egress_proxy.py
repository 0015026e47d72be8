"""The egress proxy, reached from inside real local sandboxes (bubblewrap, their own empty network
namespace) and, for hostile inputs, on its socket directly.

The origin servers listen on the test process's 127.0.0.1, which the proxy is allowed to reach only
where a test passes `--egress-allowed-networks 127.0.0.0/8`. Sandboxes name them `localhost`: curl
then sends the request to the proxy (NO_PROXY=127.0.0.1 keeps only the model relay direct), and the
proxy, not the sandbox, resolves the name.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import ssl
import subprocess
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from astrabox.environments.v1 import environment_pb2 as env_pb
from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.credentials import CredentialUnavailable, binding
from dataplane_agent.engines.mcp_destinations import parse_networks
from dataplane_agent.routes.egress.bindings import BindingSource, CredentialBinding, NoBindings, Scheme
from dataplane_agent.routes.egress.interception import Interception
from dataplane_agent.routes.egress.policy import EgressPolicy
from dataplane_agent.routes.egress.proxy import EgressProxy
from dataplane_agent.sandboxes.base import Sandbox, SandboxSpec
from dataplane_agent.sandboxes.local import LocalSandboxDriver
from serverkit.host_patterns import parse

SECRET = "ghp-bound-secret-0123456789abcdef"


@dataclass
class Origin:
    """An HTTP server on the host's loopback that records what reaches it."""

    port: int
    heads: list[str] = field(default_factory=list)


@pytest.fixture
async def origin() -> AsyncIterator[Origin]:
    record = Origin(0)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            chunk = await reader.read(4096)
            if not chunk:
                break
            head += chunk
        record.heads.append(head.decode("latin-1"))
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 12\r\nconnection: close\r\n\r\nhello origin")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    record.port = server.sockets[0].getsockname()[1]
    try:
        yield record
    finally:
        server.close()


@dataclass
class Reports:
    items: list[tuple[str, pb.EgressRefused]] = field(default_factory=list)

    async def __call__(self, session_id: str, refused: pb.EgressRefused) -> None:
        self.items.append((session_id, refused))


class StaticBindings:
    """Part C's credential source stands in here: fixed bindings per session."""

    def __init__(self, bindings: dict[str, Sequence[CredentialBinding]]) -> None:
        self._bindings = bindings

    async def bindings(self, session_id: str) -> Sequence[CredentialBinding]:
        return self._bindings.get(session_id, ())


@pytest.fixture
def driver(sandbox_root: Path, bwrap: str) -> LocalSandboxDriver:
    return LocalSandboxDriver(sandbox_root, bwrap=bwrap)


@pytest.fixture
def reports() -> Reports:
    return Reports()


def _proxy(tmp_path: Path, reports: Reports, *, loopback: bool = True, bindings: BindingSource | None = None):  # type: ignore[no-untyped-def]
    return EgressProxy(
        tmp_path / "egress",
        bindings or NoBindings(),
        allowed_networks=parse_networks("127.0.0.0/8" if loopback else ""),
        report=reports,
    )


def _policy(mode: int, *hosts: str, bound: Sequence[str] = (), port: int = 0, plain: bool = False) -> EgressPolicy:
    """The policy of an environment allowing `hosts` and binding a credential to the `bound` ones on
    `port` (0: 443), plain HTTP too with `plain`."""
    spec = env_pb.EnvironmentSpec(network=env_pb.NetworkPolicy(mode=mode, allowed_hosts=list(hosts)))
    if bound:
        spec.credentials.append(
            env_pb.CredentialBinding(credential="github", hosts=list(bound), port=port, allow_plain_http=plain)
        )
    return EgressPolicy.from_proto(spec, None, ())


LIMITED, NONE, UNRESTRICTED = env_pb.NETWORK_MODE_LIMITED, env_pb.NETWORK_MODE_NONE, env_pb.NETWORK_MODE_UNRESTRICTED


async def _sandbox(driver: LocalSandboxDriver, proxy: EgressProxy, session_id: str) -> Sandbox:
    return await driver.create(SandboxSpec(session_id=session_id, agent_id="agent-1", egress_socket=proxy.socket))


async def _sh(
    driver: LocalSandboxDriver, sandbox: Sandbox, script: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    launcher = await driver.launcher(sandbox, ["/bin/sh", "-c"], env)
    return await asyncio.to_thread(subprocess.run, [str(launcher), script], capture_output=True, text=True, timeout=60)


def _curl(url: str, *extra: str) -> str:
    return " ".join(["curl -sS -m 20 -w '\\n%{http_code}'", *extra, f"'{url}'"])


async def test_limited_reaches_the_allowed_host_and_refuses_another_port(
    driver: LocalSandboxDriver, origin: Origin, reports: Reports, tmp_path: Path
) -> None:
    async with _proxy(tmp_path, reports) as proxy:
        proxy.register("limited", _policy(LIMITED, f"localhost:{origin.port}"))
        sandbox = await _sandbox(driver, proxy, "limited")
        other = origin.port + 1 if origin.port < 65535 else origin.port - 1

        allowed = await _sh(driver, sandbox, _curl(f"http://localhost:{origin.port}/hello"), proxy.env("limited"))
        refused = await _sh(driver, sandbox, _curl(f"http://localhost:{other}/hello"), proxy.env("limited"))

    assert allowed.stdout.splitlines() == ["hello origin", "200"], allowed.stderr
    assert origin.heads[0].startswith("GET /hello HTTP/1.1\r\n")  # origin form, upstream
    assert "proxy-authorization" not in origin.heads[0].lower()  # the session's token stays here
    body, status = [line for line in refused.stdout.splitlines() if line]
    assert status == "403"
    assert body == (
        f"astrabox egress: localhost:{other} is refused: not in this environment's allowed_hosts"
        " (add it to the environment's network policy)"
    )
    assert [(sid, r.host, r.port, r.suppressed) for sid, r in reports.items] == [("limited", "localhost", other, 0)]
    assert "allowed_hosts" in reports.items[0][1].reason


async def test_https_clients_tunnel_through_connect(
    driver: LocalSandboxDriver, origin: Origin, reports: Reports, tmp_path: Path
) -> None:
    # The origin speaks plain HTTP, but curl's --proxytunnel makes the CONNECT an HTTPS client makes.
    async with _proxy(tmp_path, reports) as proxy:
        proxy.register("tunnel", _policy(LIMITED, f"localhost:{origin.port}"))
        sandbox = await _sandbox(driver, proxy, "tunnel")
        tunneled = await _sh(
            driver, sandbox, _curl(f"http://localhost:{origin.port}/t", "--proxytunnel"), proxy.env("tunnel")
        )
        refused = await _sh(driver, sandbox, _curl("http://localhost:1/t", "--proxytunnel"), proxy.env("tunnel"))

    assert tunneled.stdout.splitlines() == ["hello origin", "200"], tunneled.stderr
    assert origin.heads[0].startswith("GET /t HTTP/1.1\r\n")
    assert "CONNECT tunnel failed, response 403" in refused.stderr


async def test_none_reaches_nothing(
    driver: LocalSandboxDriver, origin: Origin, reports: Reports, tmp_path: Path
) -> None:
    async with _proxy(tmp_path, reports) as proxy:
        proxy.register("closed", _policy(NONE))
        proxy.register("opened", _policy(LIMITED, f"localhost:{origin.port}"))
        kept_env = proxy.env("opened")
        proxy.register("opened", _policy(NONE))  # its policy changed: the token it holds opens nothing
        sandbox = await _sandbox(driver, proxy, "closed")

        no_env = proxy.env("closed")
        direct = await _sh(driver, sandbox, _curl(f"http://localhost:{origin.port}/"), no_env)
        with_token = await _sh(driver, sandbox, _curl(f"http://localhost:{origin.port}/"), kept_env)

    assert no_env == {}
    assert direct.returncode != 0 and origin.heads == []
    assert with_token.stdout.splitlines()[-1] == "403"
    assert "network mode NONE" in with_token.stdout
    assert origin.heads == []


async def test_nothing_bypasses_the_proxy(
    driver: LocalSandboxDriver, origin: Origin, reports: Reports, tmp_path: Path
) -> None:
    received: list[bytes] = []

    class Udp(asyncio.DatagramProtocol):
        def datagram_received(self, data: bytes, addr: object) -> None:
            received.append(data)

    transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(Udp, local_addr=("127.0.0.1", 0))
    udp_port = transport.get_extra_info("sockname")[1]
    try:
        async with _proxy(tmp_path, reports) as proxy:
            proxy.register("tight", _policy(LIMITED, f"localhost:{origin.port}"))
            sandbox = await _sandbox(driver, proxy, "tight")
            env = proxy.env("tight")
            raw = await _sh(
                driver,
                sandbox,
                f"bash -c 'exec 3<>/dev/tcp/127.0.0.1/{origin.port}' 2>/dev/null && echo TCP-REACHED;"
                f" bash -c 'echo ping >/dev/udp/127.0.0.1/{udp_port}' 2>/dev/null; echo done",
                env,
            )
            # NO_PROXY=127.0.0.1: curl tries the sandbox's own loopback, where nothing listens.
            direct = await _sh(driver, sandbox, _curl(f"http://127.0.0.1:{origin.port}/"), env)
            by_address = await _sh(driver, sandbox, _curl(f"http://127.0.0.1:{origin.port}/", "--noproxy ''"), env)
            await asyncio.sleep(0.2)  # a datagram that got out would have arrived by now
    finally:
        transport.close()

    assert "TCP-REACHED" not in raw.stdout
    assert received == []
    # `localhost:port` is allowed, 127.0.0.1 is not (a name matches only a name).
    assert by_address.stdout.splitlines()[-1] == "403"
    assert f"127.0.0.1:{origin.port} is refused" in by_address.stdout
    assert direct.returncode != 0 and direct.stdout.splitlines()[-1] == "000"
    assert origin.heads == []


async def test_a_name_resolving_to_a_private_address_is_refused(
    driver: LocalSandboxDriver, origin: Origin, reports: Reports, tmp_path: Path
) -> None:
    async with _proxy(tmp_path, reports, loopback=False) as proxy:
        proxy.register("open", _policy(UNRESTRICTED))
        sandbox = await _sandbox(driver, proxy, "open")
        result = await _sh(driver, sandbox, _curl(f"http://localhost:{origin.port}/"), proxy.env("open"))

    assert result.stdout.splitlines()[-1] == "403"
    assert "resolves to 127.0.0.1, a loopback address" in result.stdout
    assert "--egress-allowed-networks" in result.stdout
    assert origin.heads == []
    assert "loopback" in reports.items[0][1].reason


async def _raw(proxy: EgressProxy, data: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(proxy.socket))
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 20)
    finally:
        writer.close()


def _auth(proxy: EgressProxy, session_id: str) -> str:
    url = proxy.env(session_id)["HTTP_PROXY"]
    userinfo = url.removeprefix("http://").rpartition("@")[0]
    return "Proxy-Authorization: Basic " + base64.b64encode(userinfo.encode()).decode()


async def test_requests_without_the_sessions_token_get_407(origin: Origin, reports: Reports, tmp_path: Path) -> None:
    async with _proxy(tmp_path, reports) as proxy:
        proxy.register("s1", _policy(UNRESTRICTED))
        target = f"GET http://localhost:{origin.port}/ HTTP/1.1\r\nHost: localhost\r\n"
        missing = await _raw(proxy, (target + "\r\n").encode())
        wrong = await _raw(proxy, (target + "Proxy-Authorization: Basic YXN0cmFib3g6Z3Vlc3M=\r\n\r\n").encode())
        forged = _auth(proxy, "s1").replace("Basic ", "Basic x")
        mangled = await _raw(proxy, (target + forged + "\r\n\r\n").encode())
        right = await _raw(proxy, (target + _auth(proxy, "s1") + "\r\n\r\n").encode())

    for answer in (missing, wrong, mangled):
        assert answer.startswith(b"HTTP/1.1 407 "), answer
        assert b"proxy credentials" in answer
    assert right.startswith(b"HTTP/1.1 200 OK")
    assert len(origin.heads) == 1


@pytest.mark.parametrize(
    ("request_text", "expected"),
    [
        ("GET http://localhost/ HTTP/1.1\r\n" + "X-Pad: " + "a" * 40000 + "\r\n\r\n", b"32768 bytes"),
        ("\x00\x01garbage\r\n\r\n", b"malformed request line"),
        ("CONNECT localhost:99999 HTTP/1.1\r\n{auth}\r\n\r\n", b"port from 1 to 65535"),
        ("GET http://localhost/%0d%0aX-Evil:%201 HTTP/1.1\r\nX-A: b\rX-Evil: 1\r\n{auth}\r\n\r\n", b"malformed"),
        ("GET http://local host/ HTTP/1.1\r\n{auth}\r\n\r\n", b"malformed request line"),
        ("GET http://localhost/a\rX-Evil: 1 HTTP/1.1\r\n{auth}\r\n\r\n", b"malformed request line"),
        ("CONNECT localhost:443\rX-Evil: 1 HTTP/1.1\r\n{auth}\r\n\r\n", b"malformed request line"),
        ("CONNECT " + "a" * 400 + ":443 HTTP/1.1\r\n{auth}\r\n\r\n", b"longer than"),
        ("GET http://localhost/ HTTP/1.1\r\n" + "X: y\r\n" * 150 + "{auth}\r\n\r\n", b"more than 100"),
        ("GET https://localhost/ HTTP/1.1\r\n{auth}\r\n\r\n", b"CONNECT for https"),
        ("GET http://user:pw@localhost/ HTTP/1.1\r\n{auth}\r\n\r\n", b"user information"),
    ],
)
async def test_hostile_requests_are_refused_cleanly(
    request_text: str, expected: bytes, origin: Origin, reports: Reports, tmp_path: Path
) -> None:
    async with _proxy(tmp_path, reports) as proxy:
        proxy.register("s1", _policy(UNRESTRICTED))
        answer = await _raw(proxy, request_text.replace("{auth}", _auth(proxy, "s1")).encode("latin-1"))

    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert expected in answer
    assert origin.heads == []


async def test_refusals_are_reported_at_a_bounded_rate(reports: Reports, tmp_path: Path) -> None:
    async with _proxy(tmp_path, reports) as proxy:
        proxy.register("noisy", _policy(LIMITED, "example.com"))
        auth = _auth(proxy, "noisy")
        answers = [
            await _raw(proxy, f"CONNECT refused.example:{443 + i} HTTP/1.1\r\n{auth}\r\n\r\n".encode())
            for i in range(50)
        ]
        pending = proxy._reports.pending("noisy")

    assert all(a.startswith(b"HTTP/1.1 403 ") for a in answers)  # every refusal is answered
    assert len(reports.items) == 10  # the burst, then none until 10 s pass
    assert len(reports.items) + sum(r.suppressed for _, r in reports.items) + pending == 50


async def test_a_plain_http_binding_to_a_loopback_host_reaches_it_and_nothing_else(
    driver: LocalSandboxDriver, origin: Origin, reports: Reports, tmp_path: Path
) -> None:
    binding = CredentialBinding(
        "github", (parse("localhost"),), Scheme.BEARER, "", SECRET, port=origin.port, allow_plain_http=True
    )
    async with _proxy(tmp_path, reports, bindings=StaticBindings({"bound": [binding]})) as proxy:
        bound = f"localhost:{origin.port}"
        proxy.register(
            "bound", _policy(LIMITED, bound, "localhost:1", bound=["localhost"], port=origin.port, plain=True)
        )
        sandbox = await _sandbox(driver, proxy, "bound")
        env = proxy.env("bound")
        sent = await _sh(
            driver,
            sandbox,
            _curl(f"http://localhost:{origin.port}/repo", "-H 'Authorization: Bearer from-the-sandbox'")
            + "; echo; sleep 1 & cat /proc/[0-9]*/environ | tr '\\0' '\\n'; env; grep -rl ghp-bound /workspace /home /tmp /etc /run 2>/dev/null",
            env,
        )
        elsewhere = await _sh(driver, sandbox, _curl("http://localhost:1/"), env)

    assert sent.stdout.splitlines()[:2] == ["hello origin", "200"], sent.stderr
    head = origin.heads[0]
    assert f"Authorization: Bearer {SECRET}\r\n" in head
    assert "from-the-sandbox" not in head  # replaced, not doubled
    assert "HTTP_PROXY=" in sent.stdout  # the environments were read
    assert SECRET not in sent.stdout + sent.stderr + elsewhere.stdout + elsewhere.stderr
    assert repr(binding).find(SECRET) == -1
    assert all(SECRET not in r.SerializeToString().decode("latin-1") for _, r in reports.items)
    assert len(origin.heads) == 1


async def _tls_origin(context: ssl.SSLContext, heads: list[str]) -> tuple[asyncio.Server, int]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        heads.append(head.decode("latin-1"))
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\nconnection: close\r\n\r\nhello tls!")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
    return server, server.sockets[0].getsockname()[1]


async def test_https_to_a_bound_host_gets_the_credential_and_any_other_https_is_a_blind_tunnel(
    driver: LocalSandboxDriver, reports: Reports, tmp_path: Path
) -> None:
    # The origins' own CA (an Interception serves as a test CA), which the proxy is told to trust
    # (--egress-ca-file) and the sandbox is not, unless a test hands it the file.
    origins_ca = Interception()
    bound_heads: list[str] = []
    other_heads: list[str] = []
    bound, bound_port = await _tls_origin(origins_ca.for_host("localhost"), bound_heads)
    other, other_port = await _tls_origin(origins_ca.for_host("localhost"), other_heads)
    binding = CredentialBinding("github", (parse("localhost"),), Scheme.BEARER, "", SECRET, port=bound_port)
    try:
        async with EgressProxy(
            tmp_path / "egress",
            StaticBindings({"tls": [binding]}),
            allowed_networks=parse_networks("127.0.0.0/8"),
            report=reports,
            interception=Interception(extra_roots=origins_ca.ca_pem),
        ) as proxy:
            bound_host = f"localhost:{bound_port}"
            policy = _policy(LIMITED, bound_host, f"localhost:{other_port}", bound=["localhost"], port=bound_port)
            proxy.register("tls", policy)
            sandbox = await _sandbox(driver, proxy, "tls")
            (sandbox.workspace / "origins-ca.pem").write_bytes(origins_ca.ca_pem)
            env = proxy.env("tls")
            to_bound = await _sh(
                driver,
                sandbox,
                _curl(f"https://localhost:{bound_port}/repo", "-H 'Authorization: Bearer from-the-sandbox'")
                + "; echo; env; cat /run/astrabox/egress-ca.pem",
                env,
            )
            untrusted = await _sh(driver, sandbox, _curl(f"https://localhost:{other_port}/"), env)
            trusted = await _sh(
                driver, sandbox, _curl(f"https://localhost:{other_port}/", "--cacert /workspace/origins-ca.pem"), env
            )
    finally:
        bound.close()
        other.close()

    assert to_bound.stdout.splitlines()[:2] == ["hello tls!", "200"], to_bound.stderr
    assert f"Authorization: Bearer {SECRET}\r\n" in bound_heads[0]
    assert "from-the-sandbox" not in bound_heads[0]
    assert "SSL_CERT_FILE=/run/astrabox/egress-ca.pem" in to_bound.stdout
    assert "BEGIN CERTIFICATE" in to_bound.stdout  # the bundle is there, and holds no secret
    assert SECRET not in to_bound.stdout + to_bound.stderr
    # Not intercepted: the sandbox sees the origin's own certificate, which only its CA vouches for.
    # (curl's handshake fails: OpenSSL names it "certificate verify failed" or an ASN.1 error.)
    assert untrusted.returncode == 35 and untrusted.stdout.splitlines()[-1] == "000", untrusted.stderr
    assert trusted.stdout.splitlines() == ["hello tls!", "200"], trusted.stderr
    assert len(other_heads) == 1 and "authorization" not in other_heads[0].lower()


async def test_a_binding_reaches_only_https_to_its_host_and_port(
    driver: LocalSandboxDriver, origin: Origin, reports: Reports, tmp_path: Path
) -> None:
    """What any code in the sandbox can try with a bound host: plain HTTP to it, HTTPS to it on
    another port, a CONNECT tunnel to its plain-HTTP port, and the binding written without a port
    (as stored before ports existed). Only the HTTPS request to the bound host and port carries the
    secret; the others reach their origins with the sandbox's own headers and nothing more."""
    origins_ca = Interception()
    bound_heads: list[str] = []
    other_heads: list[str] = []
    bound, bound_port = await _tls_origin(origins_ca.for_host("localhost"), bound_heads)
    other, other_port = await _tls_origin(origins_ca.for_host("localhost"), other_heads)
    # As the agent reads the control plane's answers: with a port, on the plain origin's port without
    # allow_plain_http, and without one (an older binding: 443).
    exact = binding(pb.ResolvedCredential(name="github", hosts=["localhost"], secret=SECRET, port=bound_port))
    same_port = binding(pb.ResolvedCredential(name="github", hosts=["localhost"], secret=SECRET, port=origin.port))
    legacy = binding(pb.ResolvedCredential(name="github", hosts=["localhost"], secret=SECRET))
    assert legacy.port == 443 and not legacy.allow_plain_http
    sources = StaticBindings({"exact": [exact], "same-port": [same_port], "legacy": [legacy]})
    own = "-H 'Authorization: Bearer from-the-sandbox'"
    try:
        async with EgressProxy(
            tmp_path / "egress",
            sources,
            allowed_networks=parse_networks("127.0.0.0/8"),
            report=reports,
            interception=Interception(extra_roots=origins_ca.ca_pem),
        ) as proxy:
            proxy.register("exact", _policy(LIMITED, "localhost", bound=["localhost"], port=bound_port))
            proxy.register("same-port", _policy(LIMITED, "localhost", bound=["localhost"], port=origin.port))
            proxy.register("legacy", _policy(LIMITED, "localhost", bound=["localhost"]))
            sandbox = await _sandbox(driver, proxy, "exact")
            (sandbox.workspace / "origins-ca.pem").write_bytes(origins_ca.ca_pem)
            trusting_the_origins = "--cacert /workspace/origins-ca.pem"
            results = {}
            for session in ("exact", "same-port", "legacy"):
                env = proxy.env(session)
                results[session, "plain"] = await _sh(
                    driver, sandbox, _curl(f"http://localhost:{origin.port}/{session}/plain", own), env
                )
                if session != "same-port":  # there a CONNECT is intercepted: TLS, which this origin lacks
                    results[session, "tunnel"] = await _sh(
                        driver,
                        sandbox,
                        _curl(f"http://localhost:{origin.port}/{session}/tunnel", own, "--proxytunnel"),
                        env,
                    )
                results[session, "other port"] = await _sh(
                    driver, sandbox, _curl(f"https://localhost:{other_port}/{session}", own, trusting_the_origins), env
                )
            results["exact", "tls"] = await _sh(
                driver, sandbox, _curl(f"https://localhost:{bound_port}/repo", own), proxy.env("exact")
            )
    finally:
        bound.close()
        other.close()

    elsewhere = origin.heads + other_heads
    assert not [head for head in elsewhere if SECRET in head]
    for (session, what), result in results.items():
        assert result.stdout.splitlines()[-1] == "200", (session, what, result.stdout, result.stderr)
        assert SECRET not in result.stdout + result.stderr
    # The one request that carries the secret, exactly once, the sandbox's own header replaced.
    assert len(bound_heads) == 1
    authorizations = [line for line in bound_heads[0].split("\r\n") if line.lower().startswith("authorization:")]
    assert authorizations == [f"Authorization: Bearer {SECRET}"]
    # Everything else reached its origin as the sandbox wrote it: 5 plain or tunneled, 3 on the other port.
    assert len(origin.heads) == 5 and len(other_heads) == 3
    assert all("Authorization: Bearer from-the-sandbox\r\n" in head for head in elsewhere), elsewhere


async def test_request_bodies_stream_through_whole_in_either_framing(
    driver: LocalSandboxDriver, reports: Reports, tmp_path: Path
) -> None:
    received: list[tuple[str, int, str]] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        lower = head.lower()
        digest = hashlib.sha256()
        if "transfer-encoding: chunked" in lower:
            framing = "chunked"
            while size := int((await reader.readline()).split(b";")[0], 16):
                digest.update(await reader.readexactly(size))
                await reader.readexactly(2)
            await reader.readline()
        else:
            framing = "length"
            length = int(lower.split("content-length: ", 1)[1].split("\r\n", 1)[0])
            digest.update(await reader.readexactly(length))
        received.append((framing, len(head), digest.hexdigest()))
        answer = digest.hexdigest().encode()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s" % (len(answer), answer))
        await writer.drain()
        writer.close()

    origin = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = origin.sockets[0].getsockname()[1]
    try:
        async with _proxy(tmp_path, reports) as proxy:
            proxy.register("up", _policy(LIMITED, f"localhost:{port}"))
            sandbox = await _sandbox(driver, proxy, "up")
            payload = bytes(range(256)) * 40000  # ~10 MB: curl asks for 100-continue
            (sandbox.workspace / "payload.bin").write_bytes(payload)
            env = proxy.env("up")
            url = f"http://localhost:{port}/upload"
            by_length = await _sh(driver, sandbox, _curl(url, "--data-binary @payload.bin"), env)
            chunked = await _sh(
                driver, sandbox, _curl(url, "-H 'Transfer-Encoding: chunked' --data-binary @payload.bin"), env
            )
    finally:
        origin.close()

    expected = hashlib.sha256(payload).hexdigest()
    assert by_length.stdout.splitlines() == [expected, "200"], by_length.stderr
    assert chunked.stdout.splitlines() == [expected, "200"], chunked.stderr
    assert [framing for framing, _, _ in received] == ["length", "chunked"]


class UnavailableBindings:
    """The control plane cannot be asked (down, or the agent's credential refused)."""

    def __init__(self) -> None:
        self.calls = 0

    async def bindings(self, session_id: str) -> Sequence[CredentialBinding]:
        self.calls += 1
        raise CredentialUnavailable("the control plane did not give session's credentials: UNAVAILABLE")


async def test_a_refused_host_is_refused_and_reported_even_when_credentials_cannot_be_had(
    origin: Origin, reports: Reports, tmp_path: Path
) -> None:
    """The policy decides before credentials are asked for: a host the environment does not allow
    is refused as such (and journaled) whether or not the control plane answers, and costs no call."""
    unavailable = UnavailableBindings()
    async with _proxy(tmp_path, reports, bindings=unavailable) as proxy:
        proxy.register("s1", _policy(LIMITED, "example.com"))
        answer = await _raw(
            proxy, f"GET http://localhost:{origin.port}/ HTTP/1.1\r\n{_auth(proxy, 's1')}\r\n\r\n".encode()
        )

    assert answer.startswith(b"HTTP/1.1 403 "), answer[:200]
    assert b"not in this environment's allowed_hosts" in answer
    assert [(r.host, r.port) for _, r in reports.items] == [("localhost", origin.port)]
    assert unavailable.calls == 0 and origin.heads == []


async def test_a_session_binding_no_credential_goes_out_while_credentials_cannot_be_had(
    origin: Origin, reports: Reports, tmp_path: Path
) -> None:
    """Only a request to a host the environment binds a credential to asks the control plane for
    the session's credentials: the others go out while it is away, and cost no call."""
    unavailable = UnavailableBindings()
    async with _proxy(tmp_path, reports, bindings=unavailable) as proxy:
        proxy.register("free", _policy(LIMITED, f"localhost:{origin.port}", bound=["git.example.com"], plain=True))
        proxy.register(
            "bound", _policy(LIMITED, f"localhost:{origin.port}", bound=["localhost"], port=origin.port, plain=True)
        )
        request = f"GET http://localhost:{origin.port}/ HTTP/1.1\r\nconnection: close\r\n"
        free = await _raw(proxy, f"{request}{_auth(proxy, 'free')}\r\n\r\n".encode())
        assert unavailable.calls == 0
        bound = await _raw(proxy, f"{request}{_auth(proxy, 'bound')}\r\n\r\n".encode())

    assert free.startswith(b"HTTP/1.1 200 "), free[:200]
    # Only the free session's request reached the origin (the other's connection, opened once the
    # policy allowed it, carried nothing).
    assert [head for head in origin.heads if head] == [origin.heads[0]] and "GET / " in origin.heads[0]
    assert bound.startswith(b"HTTP/1.1 502 "), bound[:200]
    assert b"could not be had" in bound and unavailable.calls == 1


@pytest.mark.parametrize(
    "address",
    ["::ffff:127.0.0.1", "::127.0.0.1", "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "2002:7f00:1::1", "64:ff9b:1::1"],
)
async def test_an_ipv6_form_of_a_local_address_is_refused(address: str, reports: Reports, tmp_path: Path) -> None:
    """An address that carries a loopback or metadata IPv4 address (mapped, compatible, NAT64, 6to4),
    or a local-use NAT64 one, is refused before any connection."""
    async with _proxy(tmp_path, reports, loopback=False) as proxy:
        proxy.register("s1", _policy(UNRESTRICTED))
        answer = await _raw(proxy, f"CONNECT [{address}]:443 HTTP/1.1\r\n{_auth(proxy, 's1')}\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 403 "), answer
    assert b"address (an operator may allow its network with --egress-allowed-networks)" in answer
