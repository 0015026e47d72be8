"""TLS end to end: a control plane serving TLS (a self-signed certificate for 127.0.0.1, made with
openssl), an agent that verifies it with `--controlplane-ca`, a client with the CA: a session runs
a real turn. A plaintext client, a client that does not trust the certificate and an agent without
the CA all fail to connect, and the control plane refuses a half-given TLS configuration plainly."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from astrabox.client import AstraBoxClient, AstraBoxError
from tests.e2e.test_session_end_to_end import collect_turn
from tests.support import admission
from tests.support.processes import Process, start_controlplane
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e


def self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=astrabox-test",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: these tests make their certificates with it")
    return self_signed(tmp_path, "controlplane")


@pytest.fixture
def tls_stack(database_url: str, tmp_path: Path, certificate: tuple[Path, Path]) -> Iterator[Stack]:
    cert, key = certificate
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    controlplane, address = start_controlplane(
        database_url, log_dir, args=("--tls-cert", str(cert), "--tls-key", str(key))
    )
    stack = Stack(
        address,
        controlplane,
        tmp_path / "agent-state",
        log_dir,
        database_url,
        agent_args=("--controlplane-ca", str(cert)),
    )
    try:
        stack.start_agent()
        yield stack
    finally:
        stack.stop()


def trusting(cert: Path) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())


async def test_a_session_runs_over_tls_and_plaintext_or_untrusting_peers_are_refused(
    tls_stack: Stack, certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    cert, _ = certificate
    async with AstraBoxClient.connect(tls_stack.address, credentials=trusting(cert)) as client:
        session = await client.create_session(request_id="over-tls")
        await client.wait_for_state(session.session_id, ["READY"], timeout=120)
        accepted = await client.send_message(session.session_id, "Please create hello.txt", client_message_id="m1")
        events = await collect_turn(client, session.session_id, accepted.turn_id)
        assert events[-1].WhichOneof("payload") == "turn_completed"

    other, _ = self_signed(tmp_path, "other")
    for credentials in (None, trusting(other)):
        async with AstraBoxClient.connect(tls_stack.address, credentials=credentials, timeout=20) as client:
            with pytest.raises(AstraBoxError) as refused:
                await client.get_session(session.session_id)
            assert refused.value.code is grpc.StatusCode.UNAVAILABLE

    # An agent without the CA (plaintext) never connects; it says why and keeps trying.
    plain = Process(
        "plain-agent",
        [
            sys.executable,
            "-m",
            "dataplane_agent",
            "--controlplane",
            tls_stack.address,
            "--state-dir",
            str(tmp_path / "plain-agent"),
            "--agent-id",
            "plain-agent",
        ],
        tmp_path / "plain-agent.log",
        env={"ANTHROPIC_API_KEY": "", "ASTRABOX_MODEL_BASE_URL": ""},
    )
    try:
        await asyncio.to_thread(plain.wait_for_line, r"relay_stream_failed", 60)
        await asyncio.sleep(2)
        assert "relay_connected" not in plain.tail(1000)
    finally:
        plain.stop()


def test_half_a_tls_configuration_is_refused_with_a_reason(
    database_url: str, certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    cert, _ = certificate
    process = Process(
        "controlplane",
        [sys.executable, "-m", "controlplane", "--listen", "127.0.0.1:0", "--tls-cert", str(cert)],
        tmp_path / "cp.log",
        env={"ASTRABOX_DATABASE_URL": database_url},
    )
    assert process.proc.wait(timeout=60) != 0
    assert "TLS needs both --tls-cert and --tls-key" in process.tail()


async def test_replicas_forward_workspace_calls_to_each_other_over_tls(
    database_url: str, tmp_path: Path, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    tls = ("--tls-cert", str(cert), "--tls-key", str(key))
    processes: list[Process] = []
    try:
        addresses = []
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            process, address = start_controlplane(database_url, tmp_path / name, args=tls)
            processes.append(process)
            addresses.append(address)
        agent = Process(
            "agent",
            [
                sys.executable,
                "-m",
                "dataplane_agent",
                "--controlplane",
                addresses[1],
                "--state-dir",
                str(tmp_path / "agent"),
                "--agent-id",
                "tls-agent",
                "--controlplane-ca",
                str(cert),
            ],
            tmp_path / "agent.log",
            env={"ANTHROPIC_API_KEY": "", "ASTRABOX_MODEL_BASE_URL": "", **admission.AGENT_ENV},
        )
        processes.append(agent)
        await asyncio.to_thread(agent.wait_for_line, r"relay_connected", 60)
        async with AstraBoxClient.connect(addresses[0], credentials=trusting(cert)) as client:  # replica A
            session = await client.create_session(request_id="tls-forwarded")
            await client.wait_for_state(session.session_id, ["READY"], timeout=120)
            result = await client.run_command(session.session_id, "echo through both replicas")
        assert result.stdout == b"through both replicas\n" and result.exit_code == 0
    finally:
        for process in reversed(processes):
            process.stop()
