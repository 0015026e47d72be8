"""What Welcome tells a reconnecting agent about the sessions it should run, and
how the control plane journals what the agent's reconciler did."""

from __future__ import annotations

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane.journal import EventKind
from controlplane.kernel import CreateSession
from controlplane.session import SessionState


async def test_live_sessions_are_those_placed_on_the_agent_and_not_released_or_failed(plane):
    await plane.connect_agent("agent-1")
    ready, deleted, archived, failed = [
        (await plane.kernel.create_session(_create(plane, f"welcome-{n}"))).session_id for n in range(4)
    ]
    for session_id in (ready, deleted, archived, failed):
        await plane.runtime_started(session_id)
    await plane.kernel.delete_session(deleted, "del")
    await plane.kernel.archive_session(archived, "arch")
    await plane.report(failed, runtime_start_failed=runner_pb2.RuntimeStartFailed(reason="x"))
    await plane.pool.execute("UPDATE sessions SET state = 'failed' WHERE session_id = $1", failed)
    creating = (await plane.kernel.create_session(_create(plane, "welcome-creating"))).session_id

    assert sorted(await plane.agents.live_sessions("agent-1")) == sorted([ready, creating])
    assert await plane.agents.live_sessions("agent-2") == []


async def test_a_reconciled_sandbox_is_journaled_and_one_of_a_deleted_session_is_acknowledged(plane):
    await plane.connect_agent("agent-1")
    kept = (await plane.kernel.create_session(_create(plane, "reconciled-kept"))).session_id
    gone = (await plane.kernel.create_session(_create(plane, "reconciled-gone"))).session_id
    for session_id in (kept, gone):
        await plane.runtime_started(session_id)
    adopted = runner_pb2.SandboxReconciled(action="adopted", sandbox_id="local-x", driver="local", reason="restart")
    await plane.report(kept, sandbox_reconciled=adopted)
    [event] = (await plane.journal.read(kept, 0, 100))[-1:]
    assert event.kind is EventKind.SANDBOX_RECONCILED
    assert dict(event.payload) == {"action": "adopted", "sandbox_id": "local-x", "driver": "local", "reason": "restart"}
    assert (await plane.kernel.get_session(kept)).state is SessionState.READY

    await plane.kernel.delete_session(gone, "del")
    before = len(await plane.journal.read(gone, 0, 100))
    destroyed = runner_pb2.SandboxReconciled(action="destroyed", sandbox_id="local-y", driver="local", reason="deleted")
    await plane.report(gone, sandbox_reconciled=destroyed)  # acknowledged: the relay stops resending it
    assert len(await plane.journal.read(gone, 0, 100)) == before


async def test_outputs_for_an_id_that_is_no_session_are_acknowledged_and_the_others_journaled(plane):
    await plane.connect_agent("agent-1")
    sid = (await plane.kernel.create_session(_create(plane, "beside-bad-ids"))).session_id
    await plane.runtime_started(sid)
    destroyed = runner_pb2.SandboxReconciled(action="destroyed", sandbox_id="local-pool-1", driver="local", reason="x")
    for bad in ("pool-06c2cb0b488e4687", "x" * 300, "00000000-0000-0000-0000-000000000000"):
        await plane.report(bad, sandbox_reconciled=destroyed)  # acknowledged, never a failed stream
    adopted = runner_pb2.SandboxReconciled(action="adopted", sandbox_id="sb", driver="local", reason="restart")
    await plane.report(sid, sandbox_reconciled=adopted)
    assert (await plane.journal.read(sid, 0, 100))[-1].kind is EventKind.SANDBOX_RECONCILED


def _create(plane, request_id: str) -> CreateSession:
    return CreateSession(request_id=request_id, project_id=plane.project_id)
