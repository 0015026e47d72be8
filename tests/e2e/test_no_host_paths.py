"""Clients never learn where things live on the agent's host: events and errors name sandbox paths
(/workspace/...), and every refusal quotes at most a short prefix of what it was given."""

from __future__ import annotations

import io
import tarfile

import grpc
import pytest

from astrabox.client import AstraBoxClient
from astrabox.errors import AstraBoxError
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e


def a_link_out(target: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        member = tarfile.TarInfo("out")
        member.type, member.linkname = tarfile.SYMTYPE, target
        archive.addfile(member)
    return buffer.getvalue()


async def test_no_event_or_error_names_a_host_path(client: AstraBoxClient, stack: Stack) -> None:
    session = await client.create_session(request_id="no-host-paths")
    sid = session.session_id
    await client.wait_for_state(sid, ["READY"], timeout=120)
    accepted = await client.send_message(
        sid, "run: ln -s /etc/hostname link-out; ln -s ../.. up; pwd", client_message_id="m1"
    )
    async for event in client.watch(sid):
        if event.turn_id == accepted.turn_id and event.WhichOneof("payload") in ("turn_completed", "turn_failed"):
            break
    host = str(stack.agent_state.resolve())

    errors = []
    for call in (
        lambda: client.list_workspace(sid, "missing/dir"),
        lambda: client.list_workspace(sid, "link-out"),
        lambda: client.list_workspace(sid, "up"),
        lambda: client.list_workspace(sid, "../" + "x" * 5000),
        lambda: client.list_workspace(sid, "a" * 300),
        lambda: client.list_workspace(sid, "/" + "d/" * 2000),
        lambda: client.download_archive(sid, "link-out"),
        lambda: client.download_archive(sid, host),
        lambda: client.upload_archive(sid, b"not an archive at all" * 100),
        lambda: client.upload_archive(sid, a_link_out(host)),
        lambda: client.upload_archive(sid, a_link_out("/etc"), path="up/x"),
    ):
        with pytest.raises(AstraBoxError) as refused:
            await call()
        errors.append(refused.value)
    for error in errors:
        assert error.code not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL), error.message
        assert error.reason and host not in error.message and len(error.message) < 400, error.message

    result = await client.run_command(sid, "pwd; ls -l /workspace")
    assert result.stdout.startswith(b"/workspace\n")
    listing = await client.list_workspace(sid, "/workspace")
    assert {"link-out", "up"} <= {entry.name for entry in listing}
    events = [str(event) async for event in client.iter_events(sid)]
    assert any("/workspace" in event for event in events)
    assert not [event for event in events if host in event]
