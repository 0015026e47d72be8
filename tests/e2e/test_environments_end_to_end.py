"""Environments as a user drives them, through the whole stack: a credential put with `astrabox
credentials`, an environment applied with `astrabox environments`, `astrabox run --environment`;
the real CLI in the local sandbox runs curl (the offline model's `run:` row) through the agent's
egress proxy against servers of this test on 127.0.0.1 (the agent allows loopback with
`--egress-allowed-networks`). The allowed host gets the bound credential and nothing else sees it;
another port is refused and the refusal is journaled; a session keeps its pinned version; a deleted
credential is no longer sent."""

from __future__ import annotations

import asyncio
import base64
import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from astrabox.client import AstraBoxClient
from tests.e2e.test_session_end_to_end import collect_turn
from tests.support.stack import Stack, StartStack

pytestmark = pytest.mark.e2e

ASTRABOX = [sys.executable, "-m", "astrabox"]
SECRET = "tok-e2e-environment-secret-5f3a9c1e7b"
# How long the agent keeps a session's resolved credentials (--egress-credentials-ttl).
CREDENTIALS_TTL = 1.0


class Origin:
    """An HTTP server on 127.0.0.1 recording the Authorization header of each request it gets."""

    def __init__(self) -> None:
        seen: list[str | None] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(self.headers.get("Authorization"))
                body = b"origin-ok\n"
                self.send_response(200)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.seen = seen
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def origins() -> Iterator[tuple[Origin, Origin]]:
    """The allowed server and one on another port, which no environment here allows."""
    allowed, other = Origin(), Origin()
    try:
        yield allowed, other
    finally:
        allowed.close()
        other.close()


@pytest.fixture
def env_stack(stacks: StartStack, tmp_path: Path) -> Stack:
    key = tmp_path / "credential-key"
    key.write_text(base64.b64encode(b"E" * 32).decode())
    key.chmod(0o600)
    return stacks(
        controlplane_args=("--credential-key-file", str(key)),
        args=("--egress-allowed-networks", "127.0.0.0/8", "--egress-credentials-ttl", str(CREDENTIALS_TTL)),
    )


def astrabox(stack: Stack, *args: str, cwd: Path | None = None, stdin: str | None = None) -> str:
    done = subprocess.run(
        [*ASTRABOX, args[0], "--target", stack.address, *args[1:]],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        input=stdin,
    )
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def environment_file(path: Path, allowed_host: str, bound_port: int) -> None:
    """The environment `web`, allowing `allowed_host` and binding api-token to localhost:`bound_port`
    in plain HTTP (the test's origins speak no TLS; a loopback host may have that)."""
    path.write_text(
        "name: web\n"
        "network:\n"
        "  mode: limited\n"
        f"  allowed_hosts: ['{allowed_host}']\n"
        "credentials:\n"
        f"  - {{credential: api-token, hosts: [localhost], port: {bound_port}, allow_plain_http: true}}\n"
    )


def curl(port: int) -> str:
    return f"curl -sS http://localhost:{port}/"


def secret_free(stack: Stack) -> None:
    for log in stack.log_dir.iterdir():
        assert SECRET not in log.read_text(errors="replace"), log


async def all_events(client: AstraBoxClient, session_id: str) -> list:
    return [event async for event in client.iter_events(session_id)]


async def test_a_limited_environment_adds_the_bound_credential_and_refuses_other_hosts_and_the_journal_says_so(
    env_stack: Stack, origins: tuple[Origin, Origin], tmp_path: Path
) -> None:
    allowed, other = origins
    host = f"localhost:{allowed.port}"
    assert astrabox(env_stack, "credentials", "put", "api-token", stdin=SECRET)
    environment_file(tmp_path / "env.yaml", host, allowed.port)
    assert astrabox(env_stack, "environments", "apply", "env.yaml", "--no-build", cwd=tmp_path) == "created web v1\n"

    ran = astrabox(
        env_stack, "run", "--environment", "web", f"run: {curl(allowed.port)}; {curl(other.port)}; echo done"
    )

    first_line = ran.splitlines()[0]
    assert first_line.endswith(" (environment web v1)"), ran
    session_id = first_line.split()[1]
    assert allowed.seen == [f"Bearer {SECRET}"], ran + (env_stack.log_dir / "agent.log").read_text()[-6000:]
    assert other.seen == []
    assert "origin-ok" in ran and f"localhost:{other.port} is refused" in ran
    async with AstraBoxClient.connect(env_stack.address) as client:
        events = await all_events(client, session_id)
        session = await client.get_session(session_id)
    refusals = [e.network_request_refused for e in events if e.WhichOneof("payload") == "network_request_refused"]
    assert [(r.host, r.port) for r in refusals] == [("localhost", other.port)]
    assert "allowed_hosts" in refusals[0].reason
    assert all(SECRET.encode() not in e.SerializeToString() for e in events)
    assert SECRET not in ran
    printed = astrabox(env_stack, "session", "events", session_id)
    assert f"network request to localhost:{other.port} refused" in printed
    assert (session.environment.name, session.environment.version) == ("web", 1)
    shown = astrabox(env_stack, "session", "show", session_id)
    assert f"  environment  web v1 ({session.environment.environment_id})\n" in shown, shown
    listed = astrabox(env_stack, "session", "list")
    assert "environment web v1" in next(line for line in listed.splitlines() if line.startswith(session_id))
    secret_free(env_stack)


async def test_without_an_environment_or_with_network_none_nothing_reaches_the_server(
    env_stack: Stack, origins: tuple[Origin, Origin], tmp_path: Path
) -> None:
    allowed, _ = origins
    (tmp_path / "offline.yaml").write_text("name: offline\nnetwork: {mode: none}\n")
    astrabox(env_stack, "environments", "apply", "offline.yaml", "--no-build", cwd=tmp_path)

    builtin = astrabox(env_stack, "run", f"run: {curl(allowed.port)}; echo done")
    offline = astrabox(env_stack, "run", "--environment", "offline", f"run: {curl(allowed.port)}; echo done")

    assert allowed.seen == []
    # No proxy is offered: the sandbox's own loopback has nothing on that port.
    for ran in (builtin, offline):
        assert f"Failed to connect to localhost port {allowed.port}" in ran, ran
    assert offline.splitlines()[0].endswith(" (environment offline v1)")


async def test_a_session_keeps_its_environment_version_when_it_is_updated_and_new_sessions_get_the_new_one(
    env_stack: Stack, origins: tuple[Origin, Origin], tmp_path: Path
) -> None:
    allowed, _ = origins
    host = f"localhost:{allowed.port}"
    astrabox(env_stack, "credentials", "put", "api-token", stdin=SECRET)
    environment_file(tmp_path / "env.yaml", host, allowed.port)
    astrabox(env_stack, "environments", "apply", "env.yaml", "--no-build", cwd=tmp_path)
    async with AstraBoxClient.connect(env_stack.address) as client:
        pinned = await client.create_session(environment="web")
        await client.wait_for_state(pinned.session_id, ["READY"], timeout=120)
        accepted = await client.send_message(pinned.session_id, f"run: {curl(allowed.port)}")
        await collect_turn(client, pinned.session_id, accepted.turn_id)
        assert allowed.seen == [f"Bearer {SECRET}"]

        environment_file(tmp_path / "env.yaml", "example.com", allowed.port)
        assert (
            astrabox(env_stack, "environments", "apply", "env.yaml", "--no-build", cwd=tmp_path)
            == "web v2 (new version)\n"
        )
        env_stack.agent.stop()
        env_stack.start_agent()
        accepted = await client.send_message(pinned.session_id, f"run: {curl(allowed.port)}")
        events = await collect_turn(client, pinned.session_id, accepted.turn_id)
        assert [e for e in events if e.WhichOneof("payload") == "runtime_ready"]  # its runtime was started again
        assert allowed.seen == [f"Bearer {SECRET}"] * 2

        newer = await client.create_session(environment="web")
        await client.wait_for_state(newer.session_id, ["READY"], timeout=120)
        accepted = await client.send_message(newer.session_id, f"run: {curl(allowed.port)}; echo done")
        events = await collect_turn(client, newer.session_id, accepted.turn_id)
        assert (newer.environment.name, newer.environment.version) == ("web", 2)
        assert allowed.seen == [f"Bearer {SECRET}"] * 2
        assert [e.network_request_refused.port for e in events if e.WhichOneof("payload") == "network_request_refused"]
    secret_free(env_stack)


async def test_a_deleted_credential_is_no_longer_sent_by_a_running_session(
    env_stack: Stack, origins: tuple[Origin, Origin], tmp_path: Path
) -> None:
    allowed, _ = origins
    host = f"localhost:{allowed.port}"
    astrabox(env_stack, "credentials", "put", "api-token", stdin=SECRET)
    environment_file(tmp_path / "env.yaml", host, allowed.port)
    astrabox(env_stack, "environments", "apply", "env.yaml", "--no-build", cwd=tmp_path)
    async with AstraBoxClient.connect(env_stack.address) as client:
        session = await client.create_session(environment="web")
        await client.wait_for_state(session.session_id, ["READY"], timeout=120)
        accepted = await client.send_message(session.session_id, f"run: {curl(allowed.port)}")
        await collect_turn(client, session.session_id, accepted.turn_id)

        astrabox(env_stack, "credentials", "delete", "api-token")
        await asyncio.sleep(CREDENTIALS_TTL * 2)  # the agent's cache of the session's credentials ran out
        accepted = await client.send_message(session.session_id, f"run: {curl(allowed.port)}")
        events = await collect_turn(client, session.session_id, accepted.turn_id)
        journal = await all_events(client, session.session_id)

    assert allowed.seen[0] == f"Bearer {SECRET}"
    assert allowed.seen[1:] in ([], [None])  # answered without the credential, or refused
    assert events[-1].WhichOneof("payload") == "turn_completed"
    assert all(SECRET.encode() not in e.SerializeToString() for e in journal)
    secret_free(env_stack)
