"""The egress proxy, reached from inside real local sandboxes (bubblewrap, their own empty network
namespace) and, for hostile inputs, on its socket directly.

The origin servers listen on the test process's 127.0.0.1, which the proxy is allowed to reach only
where a test passes `--egress-allowed-networks 127.0.0.0/8`. Sandboxes name them `localhost`: curl
then sends the request to the proxy (NO_PROXY=127.0.0.1 keeps only the model relay direct), and the
proxy, not the sandbox, resolves the name.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from dataplane_agent.sandboxes.local import LocalSandboxDriver
from tests.support.egress import (
    LIMITED,
    NONE,
    UNRESTRICTED,
    Origin,
    Reports,
    curl,
    policy_of,
    proxy_authorization,
    proxy_for,
    raw_request,
    sandbox_for,
    sh,
)


async def test_limited_reaches_the_allowed_host_and_refuses_another_port(
    driver: LocalSandboxDriver, origin: Origin, reports: Reports, tmp_path: Path
) -> None:
    async with proxy_for(tmp_path, reports) as proxy:
        proxy.register("limited", policy_of(LIMITED, f"localhost:{origin.port}"))
        sandbox = await sandbox_for(driver, proxy, "limited")
        other = origin.port + 1 if origin.port < 65535 else origin.port - 1

        allowed = await sh(driver, sandbox, curl(f"http://localhost:{origin.port}/hello"), proxy.env("limited"))
        refused = await sh(driver, sandbox, curl(f"http://localhost:{other}/hello"), proxy.env("limited"))

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
    async with proxy_for(tmp_path, reports) as proxy:
        proxy.register("tunnel", policy_of(LIMITED, f"localhost:{origin.port}"))
        sandbox = await sandbox_for(driver, proxy, "tunnel")
        tunneled = await sh(
            driver, sandbox, curl(f"http://localhost:{origin.port}/t", "--proxytunnel"), proxy.env("tunnel")
        )
        refused = await sh(driver, sandbox, curl("http://localhost:1/t", "--proxytunnel"), proxy.env("tunnel"))

    assert tunneled.stdout.splitlines() == ["hello origin", "200"], tunneled.stderr
    assert origin.heads[0].startswith("GET /t HTTP/1.1\r\n")
    assert "CONNECT tunnel failed, response 403" in refused.stderr


async def test_none_reaches_nothing(
    driver: LocalSandboxDriver, origin: Origin, reports: Reports, tmp_path: Path
) -> None:
    async with proxy_for(tmp_path, reports) as proxy:
        proxy.register("closed", policy_of(NONE))
        proxy.register("opened", policy_of(LIMITED, f"localhost:{origin.port}"))
        kept_env = proxy.env("opened")
        proxy.register("opened", policy_of(NONE))  # its policy changed: the token it holds opens nothing
        sandbox = await sandbox_for(driver, proxy, "closed")

        no_env = proxy.env("closed")
        direct = await sh(driver, sandbox, curl(f"http://localhost:{origin.port}/"), no_env)
        with_token = await sh(driver, sandbox, curl(f"http://localhost:{origin.port}/"), kept_env)

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
        async with proxy_for(tmp_path, reports) as proxy:
            proxy.register("tight", policy_of(LIMITED, f"localhost:{origin.port}"))
            sandbox = await sandbox_for(driver, proxy, "tight")
            env = proxy.env("tight")
            raw = await sh(
                driver,
                sandbox,
                f"bash -c 'exec 3<>/dev/tcp/127.0.0.1/{origin.port}' 2>/dev/null && echo TCP-REACHED;"
                f" bash -c 'echo ping >/dev/udp/127.0.0.1/{udp_port}' 2>/dev/null; echo done",
                env,
            )
            # NO_PROXY=127.0.0.1: curl tries the sandbox's own loopback, where nothing listens.
            direct = await sh(driver, sandbox, curl(f"http://127.0.0.1:{origin.port}/"), env)
            by_address = await sh(driver, sandbox, curl(f"http://127.0.0.1:{origin.port}/", "--noproxy ''"), env)
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
    async with proxy_for(tmp_path, reports, loopback=False) as proxy:
        proxy.register("open", policy_of(UNRESTRICTED))
        sandbox = await sandbox_for(driver, proxy, "open")
        result = await sh(driver, sandbox, curl(f"http://localhost:{origin.port}/"), proxy.env("open"))

    assert result.stdout.splitlines()[-1] == "403"
    assert "resolves to 127.0.0.1, a loopback address" in result.stdout
    assert "--egress-allowed-networks" in result.stdout
    assert origin.heads == []
    assert "loopback" in reports.items[0][1].reason


async def test_requests_without_the_sessions_token_get_407(origin: Origin, reports: Reports, tmp_path: Path) -> None:
    async with proxy_for(tmp_path, reports) as proxy:
        proxy.register("s1", policy_of(UNRESTRICTED))
        target = f"GET http://localhost:{origin.port}/ HTTP/1.1\r\nHost: localhost\r\n"
        missing = await raw_request(proxy, (target + "\r\n").encode())
        wrong = await raw_request(proxy, (target + "Proxy-Authorization: Basic YXN0cmFib3g6Z3Vlc3M=\r\n\r\n").encode())
        forged = proxy_authorization(proxy, "s1").replace("Basic ", "Basic x")
        mangled = await raw_request(proxy, (target + forged + "\r\n\r\n").encode())
        right = await raw_request(proxy, (target + proxy_authorization(proxy, "s1") + "\r\n\r\n").encode())

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
    async with proxy_for(tmp_path, reports) as proxy:
        proxy.register("s1", policy_of(UNRESTRICTED))
        answer = await raw_request(
            proxy, request_text.replace("{auth}", proxy_authorization(proxy, "s1")).encode("latin-1")
        )

    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert expected in answer
    assert origin.heads == []


async def test_refusals_are_reported_at_a_bounded_rate(reports: Reports, tmp_path: Path) -> None:
    async with proxy_for(tmp_path, reports) as proxy:
        proxy.register("noisy", policy_of(LIMITED, "example.com"))
        auth = proxy_authorization(proxy, "noisy")
        answers = [
            await raw_request(proxy, f"CONNECT refused.example:{443 + i} HTTP/1.1\r\n{auth}\r\n\r\n".encode())
            for i in range(50)
        ]
        pending = proxy._reports.pending("noisy")

    assert all(a.startswith(b"HTTP/1.1 403 ") for a in answers)  # every refusal is answered
    assert len(reports.items) == 10  # the burst, then none until 10 s pass
    assert len(reports.items) + sum(r.suppressed for _, r in reports.items) + pending == 50


@pytest.mark.parametrize(
    "address",
    ["::ffff:127.0.0.1", "::127.0.0.1", "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "2002:7f00:1::1", "64:ff9b:1::1"],
)
async def test_an_ipv6_form_of_a_local_address_is_refused(address: str, reports: Reports, tmp_path: Path) -> None:
    """An address that carries a loopback or metadata IPv4 address (mapped, compatible, NAT64, 6to4),
    or a local-use NAT64 one, is refused before any connection."""
    async with proxy_for(tmp_path, reports, loopback=False) as proxy:
        proxy.register("s1", policy_of(UNRESTRICTED))
        answer = await raw_request(
            proxy, f"CONNECT [{address}]:443 HTTP/1.1\r\n{proxy_authorization(proxy, 's1')}\r\n\r\n".encode()
        )
    assert answer.startswith(b"HTTP/1.1 403 "), answer
    assert b"address (an operator may allow its network with --egress-allowed-networks)" in answer
