"""Workspace calls on any control-plane replica: two replicas on one PostgreSQL,
the agent connected to replica B, the client talking to replica A. Forwarding
between replicas needs the cluster secret; a replica that is gone is a prompt,
retryable AGENT_NOT_CONNECTED."""

from __future__ import annotations

import asyncio
import io
import os
import tarfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import grpc
import pytest
import pytest_asyncio

from astrabox.client import AstraBoxClient
from astrabox.errors import AstraBoxError
from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from astrabox.runner.v1 import runner_service_pb2_grpc as runner_grpc
from tests.support.processes import Process, start_agent, start_controlplane

pytestmark = pytest.mark.e2e

# A hang guard, not a timing assertion: a gone replica must not leave the call waiting.
PROMPT_S = 30


@dataclass
class Replicas:
    a: str
    b: str
    processes: dict[str, Process]
    log_dir: Path
    database_url: str


@pytest.fixture
def replicas(database_url: str, tmp_path: Path) -> Iterator[Replicas]:
    processes: dict[str, Process] = {}
    addresses = {}
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            processes[name], addresses[name] = start_controlplane(database_url, tmp_path / name)
        processes["agent"] = start_agent(addresses["b"], tmp_path / "agent-state", tmp_path)
        yield Replicas(addresses["a"], addresses["b"], processes, tmp_path, database_url)
    finally:
        for process in processes.values():
            process.stop()


@pytest_asyncio.fixture
async def via_a(replicas: Replicas) -> AsyncIterator[tuple[AstraBoxClient, str]]:
    """A client of replica A and a READY session, whose agent is connected to replica B."""
    async with AstraBoxClient.connect(replicas.a) as client:
        session = await client.create_session()
        ready = await client.wait_for_state(session.session_id, ["READY"], timeout=120)
        yield client, ready.session_id


def make_tar() -> tuple[bytes, dict[str, bytes]]:
    contents = {"notes.txt": b"hello across replicas\n", "src/data.bin": os.urandom(700_000)}  # > one upload chunk
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in contents.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue(), contents


def files_of(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as opened:
        return {m.name.removeprefix("./"): opened.extractfile(m).read() for m in opened.getmembers() if m.isfile()}


async def refusal(client: AstraBoxClient, session_id: str, path: str) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(AstraBoxError) as refused:
        await client.list_workspace(session_id, path)
    return refused.value.code, refused.value.reason


async def test_a_replica_serves_the_workspace_of_an_agent_connected_to_another(replicas, via_a):
    client, sid = via_a
    archive, contents = make_tar()

    written = await client.upload_archive(sid, archive, path="up")
    assert (written.entries, written.bytes) >= (2, sum(map(len, contents.values())))
    assert {(e.name, e.type) for e in await client.list_workspace(sid, "up")} == {
        ("notes.txt", "file"),
        ("src", "directory"),
    }

    listed = await client.run_command(sid, "ls up up/src; echo oops >&2; exit 3")
    assert (listed.stdout, listed.stderr, listed.exit_code) == (
        b"up:\nnotes.txt\nsrc\n\nup/src:\ndata.bin\n",
        b"oops\n",
        3,
    )

    downloaded = files_of(await client.download_archive(sid, "up"))
    assert {name.removeprefix("up/"): data for name, data in downloaded.items()} == contents

    # Refusals keep their code and reason, whether A decides them or the agent behind B does.
    await client.run_command(sid, "ln -s /etc escape")
    async with AstraBoxClient.connect(replicas.b) as direct:
        for path in ("../x", "escape", "missing"):
            assert await refusal(client, sid, path) == await refusal(direct, sid, path)
    assert await refusal(client, sid, "../x") == (grpc.StatusCode.INVALID_ARGUMENT, "PATH_OUTSIDE_WORKSPACE")
    assert (await refusal(client, sid, "escape"))[1] == "PATH_OUTSIDE_WORKSPACE"
    assert await refusal(client, sid, "missing") == (grpc.StatusCode.NOT_FOUND, "PATH_NOT_FOUND")


async def test_a_terminal_works_through_a_replica_the_agent_is_not_connected_to(replicas, via_a):
    client, sid = via_a
    async with client.open_terminal(sid, rows=33, columns=99) as terminal:
        # Each line answered before the next is typed: keystrokes and output cross both replicas both ways.
        await terminal.write(b"stty size\n")
        seen = b""
        async for chunk in terminal:
            seen += chunk
            if b"33 99" in seen and b"second" not in seen:
                await terminal.resize(20, 70)
                await terminal.write(b"echo second; stty size; exit 6\n")
    assert terminal.exit_code == 6
    assert b"33 99" in seen and b"\nsecond" in seen.replace(b"\r", b"\n") and b"20 70" in seen


async def test_forwarding_without_the_cluster_secret_is_refused_and_reaches_no_agent(replicas, via_a):
    client, sid = via_a
    connection = await asyncpg.connect(replicas.database_url)
    try:
        secret = await connection.fetchval("SELECT secret FROM cluster_secret")
        agent_id = await connection.fetchval("SELECT agent_id FROM sessions WHERE session_id = $1", sid)
        project = str(await connection.fetchval("SELECT project_id FROM sessions WHERE session_id = $1", sid))
        other = str(
            await connection.fetchval("INSERT INTO projects VALUES (gen_random_uuid(), 'other') RETURNING project_id")
        )
    finally:
        await connection.close()

    async def forward(command: str, metadata: tuple[tuple[str, str], ...]) -> list[runner_pb2.WorkspaceReply]:
        request = runner_pb2.ForwardWorkspaceRequest(
            agent_id=agent_id,
            session_id=sid,
            request=runner_pb2.WorkspaceRequest(exec_command=runner_pb2.ExecCommand(command=command)),
        )
        async with grpc.aio.insecure_channel(replicas.b) as channel:
            call = runner_grpc.RunnerServiceStub(channel).ForwardWorkspace(iter([request]), metadata=metadata)
            return [response.reply async for response in call]

    async def refusal(metadata: tuple[tuple[str, str], ...]) -> tuple[grpc.StatusCode, str]:
        """The status of a call that sends nothing: the replica judges the metadata before any request
        (a request written meanwhile could race the refusal and end the call INTERNAL client-side)."""
        async with grpc.aio.insecure_channel(replicas.b) as channel:
            call = runner_grpc.RunnerServiceStub(channel).ForwardWorkspace(metadata=metadata)
            return await call.code(), await call.details() or ""

    for metadata in ((), (("astrabox-cluster-secret", "guess"),), (("astrabox-cluster-secret", secret[:-1]),)):
        code, details = await refusal(metadata)
        assert code == grpc.StatusCode.UNAUTHENTICATED and secret not in details
        with pytest.raises(grpc.aio.AioRpcError):
            await forward("touch pwned", metadata)
    assert "pwned" not in {e.name for e in await client.list_workspace(sid)}

    # With the secret, the call is for a caller's project, checked again where it lands: another
    # project (or none) finds no such session.
    for named in ((), (("astrabox-project-id", other),), (("astrabox-project-id", "not-a-uuid"),)):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await forward("touch pwned", (("astrabox-cluster-secret", secret), *named))
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND
    assert "pwned" not in {e.name for e in await client.list_workspace(sid)}

    # The same call with the secret and the session's project is how replicas reach the agent.
    replies = await forward(
        "echo from-a-replica", (("astrabox-cluster-secret", secret), ("astrabox-project-id", project))
    )
    assert (b"".join(r.stdout for r in replies), replies[-1].exit_code) == (b"from-a-replica\n", 0)

    for log in replicas.log_dir.rglob("*.log"):
        assert secret not in log.read_text(errors="replace"), log


async def test_a_gone_replica_is_a_prompt_retryable_agent_not_connected(replicas, via_a):
    client, sid = via_a
    replicas.processes["b"].kill()

    async with asyncio.timeout(PROMPT_S):
        with pytest.raises(AstraBoxError) as refused:
            await client.list_workspace(sid)
    assert (refused.value.code, refused.value.reason) == (grpc.StatusCode.UNAVAILABLE, "AGENT_NOT_CONNECTED")

    # B comes back on its address, the agent reconnects to it, and A's retries get through.
    replicas.processes["b"], _ = start_controlplane(replicas.database_url, replicas.log_dir / "b", listen=replicas.b)
    async with asyncio.timeout(90):
        while True:
            try:
                result = await client.run_command(sid, "echo back")
                break
            except AstraBoxError as error:
                assert (error.code, error.reason) == (grpc.StatusCode.UNAVAILABLE, "AGENT_NOT_CONNECTED")
                await asyncio.sleep(0.5)
    assert (result.stdout, result.exit_code) == (b"back\n", 0)


async def test_a_client_that_cancels_a_forwarded_command_stops_it_in_the_sandbox(replicas, via_a):
    client, sid = via_a
    command = asyncio.create_task(client.run_command(sid, "touch started; sleep 4; touch finished"))
    async with asyncio.timeout(PROMPT_S):
        while "started" not in {e.name for e in await client.list_workspace(sid)}:
            await asyncio.sleep(0.1)
    command.cancel()
    with pytest.raises(asyncio.CancelledError):
        await command

    await asyncio.sleep(6)  # well past the command's own end, had it kept running
    names = {e.name for e in await client.list_workspace(sid)}
    assert "started" in names and "finished" not in names
