"""Retention: a session archived or deleted longer than --session-retention ago, its sandbox gone, is
forgotten with everything of it (journal, turns, interactions, tool calls, background tasks, requests,
commands...); a recent one, an active one, one whose destruction is pending, and every other session's
rows are kept. Real PostgreSQL, the kernel's own calls."""

from __future__ import annotations

from datetime import timedelta

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane import retention
from controlplane.deadlines import DeadlineSweeper
from tests.controlplane.test_conversation import api, ok
from tests.controlplane.test_destructions import destroys
from tests.controlplane.test_settles import start_background_task, tool_use

__all__ = ["api"]  # the fixture, used by name

RETENTION = timedelta(days=30)


async def tables_with_sessions(plane) -> list[str]:
    """Every table with a session_id column, the sessions table included."""
    rows = await plane.pool.fetch(
        "SELECT table_name FROM information_schema.columns WHERE table_schema = 'public' AND column_name = 'session_id'"
        " ORDER BY table_name"
    )
    return [r["table_name"] for r in rows]


async def rows_of(plane, tables: list[str], sid: str) -> dict[str, int]:
    return {t: await plane.pool.fetchval(f"SELECT count(*) FROM {t} WHERE session_id = $1", sid) for t in tables}


async def busy_session(api, plane, request_id: str) -> str:
    """A session with a bit of everything: turns, a tool call waiting for approval, a background task,
    its requests' idempotency records, commands for its agent."""
    await plane.connect_agent()
    sid = (await ok(api, "CreateSession", request_id=request_id)).session.session_id
    await plane.runtime_started(sid)
    await start_background_task(api, plane, sid)
    turn = (await ok(api, "SendMessage", session_id=sid, client_message_id="m", text="run: touch f")).turn_id
    await plane.report(sid, turn, **tool_use("tu-1"))
    await plane.report(
        sid,
        turn,
        interaction_requested=runner_pb2.InteractionRequested(
            interaction_id=f"i-{request_id}", tool_name="Bash", input_json='{"command": "touch f"}', tool_use_id="tu-1"
        ),
    )
    return sid


async def release(api, plane, sid: str, rpc: str = "ArchiveSession", destroyed: bool = True) -> None:
    """Archive (or delete) the session; its agent acknowledges every command, and confirms the
    destruction unless `destroyed` is False (then it could not: a retry is pending)."""
    await ok(api, rpc, session_id=sid, request_id=f"release-{sid}")
    unconfirmed = set() if destroyed else set(await destroys(plane, sid))
    for row in await plane.pool.fetch("SELECT command_seq FROM agent_commands WHERE session_id = $1", sid):
        if row["command_seq"] in unconfirmed:
            await plane.verdicts.record(
                "agent-1", row["command_seq"], "UNAVAILABLE: could not confirm", runner_pb2.DESTROY_VERDICT_UNCONFIRMED
            )
        else:
            await plane.verdicts.record("agent-1", row["command_seq"], "", runner_pb2.DESTROY_VERDICT_CONFIRMED)


async def released_ago(plane, sid: str, ago: timedelta) -> None:
    await plane.pool.execute("UPDATE sessions SET released_at = now() - $2::interval WHERE session_id = $1", sid, ago)


async def test_retention_forgets_an_old_released_session_with_everything_of_it_and_nothing_else(api, plane):
    old = await busy_session(api, plane, "old")
    old_deleted = await busy_session(api, plane, "old-deleted")
    recent = await busy_session(api, plane, "recent")
    active = await busy_session(api, plane, "active")
    pending = await busy_session(api, plane, "pending")
    await release(api, plane, old)
    await release(api, plane, old_deleted, rpc="DeleteSession")
    await release(api, plane, recent)
    await release(api, plane, pending, destroyed=False)
    for sid in (old, old_deleted, pending):
        await released_ago(plane, sid, RETENTION + timedelta(hours=1))
    await released_ago(plane, recent, RETENTION - timedelta(hours=1))
    # The active session was never released; make it look as old as the others anyway.
    await plane.pool.execute(
        "UPDATE sessions SET created_at = now() - interval '90 days' WHERE session_id = $1", active
    )

    tables = await tables_with_sessions(plane)
    assert {"events", "turns", "interactions", "background_tasks", "open_tool_calls", "agent_commands"} <= set(tables)
    before = {sid: await rows_of(plane, tables, sid) for sid in (old, old_deleted, recent, active, pending)}
    assert all(before[old][t] > 0 for t in ("events", "turns", "interactions", "background_tasks", "sessions"))

    sweeper = DeadlineSweeper(
        plane.pool, plane.journal, plane.turns, plane.agents, timedelta(seconds=180), session_retention=RETENTION
    )
    await sweeper.sweep()

    for sid in (old, old_deleted):
        after = await rows_of(plane, tables, sid)
        # Audit records are the project's, not the session's: they stay.
        assert {t: n for t, n in after.items() if n and t != "audit_records"} == {}, sid
        assert after.get("audit_records", 0) == before[sid].get("audit_records", 0)
    for sid in (recent, active, pending):
        assert await rows_of(plane, tables, sid) == before[sid], sid
    assert await retention.forget_released(plane.pool, RETENTION) == 0  # nothing more to forget

    # Once the destruction is tried again and confirmed, that session goes too.
    await plane.sweeper.sweep()
    [_, retried] = await destroys(plane, pending)
    assert await retention.forget_released(plane.pool, RETENTION) == 0  # the retry is not acknowledged yet
    await plane.verdicts.record("agent-1", retried, "", runner_pb2.DESTROY_VERDICT_CONFIRMED)
    assert await retention.forget_released(plane.pool, RETENTION) == 1
    assert await rows_of(plane, ["sessions", "events"], pending) == {"sessions": 0, "events": 0}


async def test_zero_retention_keeps_sessions_forever_and_batches_are_bounded(api, plane):
    sids = [await busy_session(api, plane, f"s{i}") for i in range(3)]
    for sid in sids:
        await release(api, plane, sid)
        await released_ago(plane, sid, timedelta(days=3650))
    assert await retention.forget_released(plane.pool, timedelta(0)) == 0
    assert await retention.forget_released(plane.pool, RETENTION, batch=2) == 2
    assert await retention.forget_released(plane.pool, RETENTION, batch=2) == 1
    assert await plane.pool.fetchval("SELECT count(*) FROM sessions") == 0


async def test_deleting_an_archived_session_does_not_restart_its_retention(api, plane):
    sid = await busy_session(api, plane, "a")
    await release(api, plane, sid)
    await released_ago(plane, sid, RETENTION + timedelta(hours=1))
    await ok(api, "DeleteSession", session_id=sid, request_id="d")
    assert await retention.forget_released(plane.pool, RETENTION) == 1


async def test_retention_knows_every_table_that_refers_to_sessions(plane):
    """A new table with a foreign key to sessions must be forgotten with them (controlplane.retention),
    or the session's deletion would fail."""
    rows = await plane.pool.fetch(
        "SELECT conrelid::regclass::text AS child FROM pg_constraint"
        " WHERE contype = 'f' AND confrelid = 'sessions'::regclass ORDER BY 1"
    )
    owned = {owner.__name__.rpartition(".")[2] for owner in retention._OWNERS}
    table_of = {"tool_calls": "open_tool_calls", "memory_stores": "session_memory"}
    assert {r["child"] for r in rows} <= {table_of.get(name, name) for name in owned}
