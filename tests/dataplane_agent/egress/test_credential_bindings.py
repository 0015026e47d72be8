"""Credential bindings through the egress proxy: a bound host gets the credential (plain http only
where allowed, https by interception) and nothing else does; while credentials cannot be had, refused
hosts are still refused and unbound traffic still flows."""

from __future__ import annotations

import asyncio
import hashlib
import ssl
from collections.abc import Sequence
from pathlib import Path

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.credentials import CredentialUnavailable, binding
from dataplane_agent.engines.mcp_destinations import parse_networks
from dataplane_agent.routes.egress.bindings import CredentialBinding, Scheme
from dataplane_agent.routes.egress.interception import Interception
from dataplane_agent.routes.egress.proxy import EgressProxy
from dataplane_agent.sandboxes.local import LocalSandboxDriver
from serverkit.host_patterns import parse
from tests.support.egress import (
    LIMITED,
    SECRET,
    Origin,
    Reports,
    StaticBindings,
    curl,
    policy_of,
    proxy_authorization,
    proxy_for,
    raw_request,
    sandbox_for,
    sh,
)


async def test_a_plain_http_binding_to_a_loopback_host_reaches_it_and_nothing_else(
    driver: LocalSandboxDriver, origin: Origin, reports: Reports, tmp_path: Path
) -> None:
    binding = CredentialBinding(
        "github", (parse("localhost"),), Scheme.BEARER, "", SECRET, port=origin.port, allow_plain_http=True
    )
    async with proxy_for(tmp_path, reports, bindings=StaticBindings({"bound": [binding]})) as proxy:
        bound = f"localhost:{origin.port}"
        proxy.register(
            "bound", policy_of(LIMITED, bound, "localhost:1", bound=["localhost"], port=origin.port, plain=True)
        )
        sandbox = await sandbox_for(driver, proxy, "bound")
        env = proxy.env("bound")
        sent = await sh(
            driver,
            sandbox,
            curl(f"http://localhost:{origin.port}/repo", "-H 'Authorization: Bearer from-the-sandbox'")
            + "; echo; sleep 1 & cat /proc/[0-9]*/environ | tr '\\0' '\\n'; env; grep -rl ghp-bound /workspace /home /tmp /etc /run 2>/dev/null",
            env,
        )
        elsewhere = await sh(driver, sandbox, curl("http://localhost:1/"), env)

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
            policy = policy_of(LIMITED, bound_host, f"localhost:{other_port}", bound=["localhost"], port=bound_port)
            proxy.register("tls", policy)
            sandbox = await sandbox_for(driver, proxy, "tls")
            (sandbox.workspace / "origins-ca.pem").write_bytes(origins_ca.ca_pem)
            env = proxy.env("tls")
            to_bound = await sh(
                driver,
                sandbox,
                curl(f"https://localhost:{bound_port}/repo", "-H 'Authorization: Bearer from-the-sandbox'")
                + "; echo; env; cat /run/astrabox/egress-ca.pem",
                env,
            )
            untrusted = await sh(driver, sandbox, curl(f"https://localhost:{other_port}/"), env)
            trusted = await sh(
                driver, sandbox, curl(f"https://localhost:{other_port}/", "--cacert /workspace/origins-ca.pem"), env
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
            proxy.register("exact", policy_of(LIMITED, "localhost", bound=["localhost"], port=bound_port))
            proxy.register("same-port", policy_of(LIMITED, "localhost", bound=["localhost"], port=origin.port))
            proxy.register("legacy", policy_of(LIMITED, "localhost", bound=["localhost"]))
            sandbox = await sandbox_for(driver, proxy, "exact")
            (sandbox.workspace / "origins-ca.pem").write_bytes(origins_ca.ca_pem)
            trusting_the_origins = "--cacert /workspace/origins-ca.pem"
            results = {}
            for session in ("exact", "same-port", "legacy"):
                env = proxy.env(session)
                results[session, "plain"] = await sh(
                    driver, sandbox, curl(f"http://localhost:{origin.port}/{session}/plain", own), env
                )
                if session != "same-port":  # there a CONNECT is intercepted: TLS, which this origin lacks
                    results[session, "tunnel"] = await sh(
                        driver,
                        sandbox,
                        curl(f"http://localhost:{origin.port}/{session}/tunnel", own, "--proxytunnel"),
                        env,
                    )
                results[session, "other port"] = await sh(
                    driver, sandbox, curl(f"https://localhost:{other_port}/{session}", own, trusting_the_origins), env
                )
            results["exact", "tls"] = await sh(
                driver, sandbox, curl(f"https://localhost:{bound_port}/repo", own), proxy.env("exact")
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
        async with proxy_for(tmp_path, reports) as proxy:
            proxy.register("up", policy_of(LIMITED, f"localhost:{port}"))
            sandbox = await sandbox_for(driver, proxy, "up")
            payload = bytes(range(256)) * 40000  # ~10 MB: curl asks for 100-continue
            (sandbox.workspace / "payload.bin").write_bytes(payload)
            env = proxy.env("up")
            url = f"http://localhost:{port}/upload"
            by_length = await sh(driver, sandbox, curl(url, "--data-binary @payload.bin"), env)
            chunked = await sh(
                driver, sandbox, curl(url, "-H 'Transfer-Encoding: chunked' --data-binary @payload.bin"), env
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
    async with proxy_for(tmp_path, reports, bindings=unavailable) as proxy:
        proxy.register("s1", policy_of(LIMITED, "example.com"))
        answer = await raw_request(
            proxy,
            f"GET http://localhost:{origin.port}/ HTTP/1.1\r\n{proxy_authorization(proxy, 's1')}\r\n\r\n".encode(),
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
    async with proxy_for(tmp_path, reports, bindings=unavailable) as proxy:
        proxy.register("free", policy_of(LIMITED, f"localhost:{origin.port}", bound=["git.example.com"], plain=True))
        proxy.register(
            "bound", policy_of(LIMITED, f"localhost:{origin.port}", bound=["localhost"], port=origin.port, plain=True)
        )
        request = f"GET http://localhost:{origin.port}/ HTTP/1.1\r\nconnection: close\r\n"
        free = await raw_request(proxy, f"{request}{proxy_authorization(proxy, 'free')}\r\n\r\n".encode())
        assert unavailable.calls == 0
        bound = await raw_request(proxy, f"{request}{proxy_authorization(proxy, 'bound')}\r\n\r\n".encode())

    assert free.startswith(b"HTTP/1.1 200 "), free[:200]
    # Only the free session's request reached the origin (the other's connection, opened once the
    # policy allowed it, carried nothing).
    assert [head for head in origin.heads if head] == [origin.heads[0]] and "GET / " in origin.heads[0]
    assert bound.startswith(b"HTTP/1.1 502 "), bound[:200]
    assert b"could not be had" in bound and unavailable.calls == 1
