"""Turns one session's outputs into journal events and projection changes (`OutputApplier`), inside
the transaction `controlplane.outputs.OutputCommitter` commits a relay batch in; and what an engine
message says that the projection follows (`tool_calls`, `tool_results`), which the committer reads
too to see which messages need the applier at all.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from datetime import UTC, datetime
from typing import Any

import structlog

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane import store, usage
from controlplane.journal import EventKind, JournalTransaction, NewEvent
from controlplane.memory import sessions as memory
from controlplane.session import BackgroundTaskState, InteractionKind, SessionState, questions_of
from controlplane.turns import TurnOutcome, Turns, tool_call_settled

log = structlog.get_logger(__name__)

# States whose runtime is released for good: a task reported after it has no engine to end it.
_RELEASED = frozenset({SessionState.ARCHIVED.value, SessionState.DELETED.value})
# Task statuses after which a background task is over (the SDK's TERMINAL_TASK_STATUSES).
_TERMINAL_TASK_STATUSES = frozenset({"completed", "failed", "stopped", "killed"})
# What of an agent's McpServerUnavailable is journaled (a server name is at most 64 characters).
_MAX_SERVER_NAME = 64
_MAX_UNAVAILABLE_REASON = 2048
# What of an agent's EgressRefused is journaled (a DNS name is at most 253 characters).
_MAX_REFUSED_HOST = 253
_MAX_REFUSED_REASON = 1024


class OutputApplier:
    """Turns one session's outputs into journal events and projection changes.

    Plain engine messages are buffered and appended together; an output that
    changes the projection flushes the buffer first, so event order is kept.

    Output of a turn that had ended before the batch (`ended`: the control plane
    settled it on its own while the engine was still at work) is late: its
    messages are journaled marked `late`, a question it asks is closed at once
    and a tool call it makes settled at once (nobody can answer either), and it
    settles nothing else."""

    def __init__(self, tx: JournalTransaction, turns: Turns, session_id: str, ended: set[str]) -> None:
        self._tx = tx
        self._turns = turns
        self._session_id = session_id
        self._ended = ended
        self._pending: list[NewEvent] = []
        # When the agent produced each output applied (by output_seq), for the events journaling it.
        self._produce_times: dict[int, datetime] = {}

    async def flush(self) -> list[int]:
        return await self._tx.append(self._session_id, self.take())

    def take(self) -> list[NewEvent]:
        """The events buffered since the last flush, handed over (the committer journals the last of
        every session's together)."""
        events, self._pending = self._pending, []
        return [self._with_produce_time(event) for event in events]

    def _with_produce_time(self, event: NewEvent) -> NewEvent:
        if event.output_seq is None or event.produce_time is not None:
            return event
        produced = self._produce_times.get(event.output_seq)
        return event if produced is None else dataclasses.replace(event, produce_time=produced)

    async def _journal_now(self, event: NewEvent) -> int:
        self._pending.append(event)
        return (await self.flush())[-1]

    async def _current(self) -> dict[str, Any]:
        return dict(await store.sessions.lock_existing(self._tx.conn, self._session_id))

    async def apply(self, output: runner_pb2.Output) -> None:
        produced = produce_time(output)
        if produced is not None:
            self._produce_times[output.output_seq] = produced
        body = output.WhichOneof("body")
        handler = getattr(self, f"_on_{body}", None)
        if handler is None:
            raise ValueError(f"output {output.output_seq} of session {output.session_id} has no known body ({body})")
        await handler(output, getattr(output, body))

    async def _on_engine_message(self, output: runner_pb2.Output, message: runner_pb2.EngineMessage) -> None:
        verbatim = json.loads(message.payload_json or "{}")
        payload: dict[str, Any] = {"type_name": message.type_name, "message": verbatim}
        if output.turn_id in self._ended:
            payload["late"] = True
        event = NewEvent(EventKind.ENGINE_MESSAGE, payload, turn_id=output.turn_id, output_seq=output.output_seq)
        type_name = message.type_name
        # JSON that is no object (a buggy or hostile agent's) is journaled as it came and read as one
        # with no fields: it changes nothing else.
        data: dict[str, Any] = verbatim if isinstance(verbatim, dict) else {}
        task_id = str(data.get("task_id") or "")
        if type_name == "ResultMessage":
            await self._journal_now(event)
            if data.get("session_id"):
                await store.sessions.update(self._tx.conn, self._session_id, engine_session_id=str(data["session_id"]))
            await self._turn_result(output.turn_id, data)
        elif type_name == "SystemMessage" and data.get("subtype") == "init":
            await self._journal_now(event)
            engine_session_id = _fields(data.get("data")).get("session_id")
            if engine_session_id:
                await store.sessions.update(self._tx.conn, self._session_id, engine_session_id=str(engine_session_id))
        elif type_name == "TaskStartedMessage" and task_id:
            seq = await self._journal_now(event)
            await store.background_tasks.insert(
                self._tx.conn, self._session_id, task_id, str(data.get("description") or ""), seq
            )
            state = (await self._current())["state"]
            if state in _RELEASED:  # reported after its runtime was released: nothing will ever end it
                await self.flush()
                await self._turns.engine_gone(self._tx, self._session_id, f"the session was {state}")
        elif type_name in ("TaskNotificationMessage", "TaskUpdatedMessage") and task_id:
            await self._journal_now(event)
            status = data.get("status") or _fields(data.get("patch")).get("status")
            if status in _TERMINAL_TASK_STATUSES:
                await store.background_tasks.set_state(
                    self._tx.conn, self._session_id, task_id, BackgroundTaskState.CLOSED
                )
        else:
            self._pending.append(event)
        await self._track_tool_calls(output.turn_id, type_name, data)

    async def _track_tool_calls(self, turn_id: str, type_name: str, data: dict[str, Any]) -> None:
        """Tool calls open with an AssistantMessage's tool_use blocks and close with a
        UserMessage's tool_result blocks; those a settle finds open get an error result.

        A tool call of a turn that had ended (late output) is settled at once, right after the
        message that asks for it, rather than left open: its turn's settle has passed, nobody waits
        for its result, and an open row would outlive the engine (the result the engine may still
        send is journaled late, like the rest of the turn's output)."""
        if type_name == "AssistantMessage":
            calls = tool_calls(type_name, data)
            if calls and turn_id in self._ended:
                reason = "its turn had already ended"
                self._pending.extend(tool_call_settled(turn_id, call_id, name, reason) for call_id, name in calls)
            elif calls:
                await store.tool_calls.open_calls(self._tx.conn, self._session_id, turn_id, calls)
        elif type_name == "UserMessage":
            results = tool_results(type_name, data)
            if results:
                await store.tool_calls.answered(self._tx.conn, self._session_id, results)

    async def _turn_result(self, turn_id: str, data: dict[str, Any]) -> None:
        session = await self._current()
        used, engine_totals = usage.of_result(data, usage.EngineTotals.of(session))
        if session["current_turn_id"] != turn_id:
            # The turn was settled already (lease lapse, deletion): its result counts in no total,
            # but the engine's running totals move past it (controlplane.usage).
            await store.sessions.record_usage(self._tx.conn, self._session_id, usage.Usage(), engine_totals)
            return
        await store.sessions.record_usage(self._tx.conn, self._session_id, used, engine_totals)
        if session["state"] == SessionState.INTERRUPTING.value:
            await self._turns.settle(
                self._tx,
                self._session_id,
                turn_id,
                TurnOutcome.INTERRUPTED,
                "the engine stopped the turn",
                usage=used.payload(),
            )
            return
        await self._journal_now(
            NewEvent(
                EventKind.TURN_COMPLETED,
                {
                    "subtype": str(data.get("subtype", "")),
                    "is_error": bool(data.get("is_error", False)),
                    "duration_ms": int(data.get("duration_ms") or 0),
                    "result": str(data.get("result") or ""),
                    "usage": used.payload(),
                },
                turn_id=turn_id,
            )
        )
        await self._turns.settle(self._tx, self._session_id, turn_id, TurnOutcome.COMPLETED)

    async def _on_runtime_started(self, output: runner_pb2.Output, started: runner_pb2.RuntimeStarted) -> None:
        await self._journal_now(
            NewEvent(
                EventKind.RUNTIME_READY,
                {
                    "sandbox_id": started.sandbox_id,
                    "driver": started.driver,
                    "workspace": started.workspace,
                    "sandbox_ms": started.sandbox_ms,
                },
                output_seq=output.output_seq,
            )
        )
        session = await self._current()
        changes: dict[str, Any] = {
            "runtime_available": True,
            "runtime_stopped": False,
            "sandbox_id": started.sandbox_id,
        }
        if session["state"] == SessionState.CREATING.value:
            changes.update(state=SessionState.READY, failure_reason="")
        await store.sessions.update(self._tx.conn, self._session_id, **changes)
        await self._turns.dispatch_next(self._tx, self._session_id)

    async def _on_runtime_start_failed(self, output: runner_pb2.Output, failed: runner_pb2.RuntimeStartFailed) -> None:
        await self._journal_now(
            NewEvent(EventKind.RUNTIME_FAILED, {"reason": failed.reason}, output_seq=output.output_seq)
        )
        session = await self._current()
        if session["state"] == SessionState.CREATING.value:
            await store.sessions.update(
                self._tx.conn,
                self._session_id,
                state=SessionState.FAILED,
                runtime_available=False,
                failure_reason=failed.reason,
            )
            return
        # A recovery failed: the message waiting for the runtime cannot run.
        await store.sessions.update(self._tx.conn, self._session_id, runtime_available=False)
        await self._turns.runtime_gone(
            self._tx, self._session_id, f"the runtime could not be started again: {failed.reason}"
        )

    async def _on_turn_aborted(self, output: runner_pb2.Output, aborted: runner_pb2.TurnAborted) -> None:
        if not await self._settle(output, TurnOutcome.FAILED, aborted.reason, "turn_aborted"):
            return
        # The agent aborts a running turn only when its engine is gone (it ended, refused the
        # message, or the agent restarted): so are the engine's background tasks.
        await self._turns.engine_gone(self._tx, self._session_id, aborted.reason)

    async def _on_turn_interrupted(self, output: runner_pb2.Output, interrupted: runner_pb2.TurnInterrupted) -> None:
        await self._settle(output, TurnOutcome.INTERRUPTED, interrupted.reason, "turn_interrupted")

    async def _settle(self, output: runner_pb2.Output, outcome: TurnOutcome, reason: str, kind: str) -> bool:
        """Settle the output's turn as the agent reports it, after what came before; False (logged)
        when the turn had already been settled (late output)."""
        await self.flush()
        settled = await self._turns.settle(
            self._tx, self._session_id, output.turn_id, outcome, reason, output.output_seq
        )
        if not settled:
            log.info("late_turn_output", session_id=self._session_id, turn_id=output.turn_id, kind=kind)
        return settled

    async def _on_interaction_requested(
        self, output: runner_pb2.Output, requested: runner_pb2.InteractionRequested
    ) -> None:
        try:
            tool_input = json.loads(requested.input_json or "{}")
        except ValueError:
            tool_input = {"unparsed": requested.input_json}
        kind = InteractionKind.for_tool(requested.tool_name, requested.custom_tool, requested.subagent)
        interaction = {
            "interaction_id": requested.interaction_id,
            "kind": kind.value,
            "turn_id": output.turn_id,
            "tool_name": requested.tool_name,
            "input_json": requested.input_json,
            "tool_use_id": requested.tool_use_id,
            "questions": questions_of(tool_input) if kind is InteractionKind.QUESTION else [],
        }
        seq = await self._journal_now(
            NewEvent(
                EventKind.INTERACTION_REQUESTED,
                {"interaction": interaction},
                turn_id=output.turn_id,
                output_seq=output.output_seq,
            )
        )
        session = await self._current()
        if session["current_turn_id"] != output.turn_id:
            if output.turn_id in self._ended:  # nobody can answer it: the agent is told to let go of its turn
                reason = "its turn had already ended"
                closed = {"interaction_id": requested.interaction_id, "reason": reason}
                await self._journal_now(NewEvent(EventKind.INTERACTION_CLOSED, closed, turn_id=output.turn_id))
            return
        if requested.tool_use_id:  # the call it parks is open, whether or not its tool_use was journaled
            await store.tool_calls.open_calls(
                self._tx.conn, self._session_id, output.turn_id, [(requested.tool_use_id, requested.tool_name)]
            )
        await self._turns.close_interaction(self._tx, self._session_id, "superseded by a newer interaction")
        await store.interactions.insert(
            self._tx.conn,
            requested.interaction_id,
            self._session_id,
            output.turn_id,
            kind.value,
            requested.tool_name,
            tool_input if isinstance(tool_input, dict) else {"value": tool_input},
            requested.tool_use_id,
            seq,
        )
        if kind is InteractionKind.SUBAGENT:  # the control plane answers it (`controlplane.subagents`)
            prompt = tool_input.get("prompt") if isinstance(tool_input, dict) else None
            await store.subagent_calls.insert(
                self._tx.conn,
                self._session_id,
                requested.interaction_id,
                session["project_id"],
                output.turn_id,
                requested.tool_use_id,
                requested.tool_name,
                prompt if isinstance(prompt, str) else "",
                await store.subagent_calls.depth_of(self._tx.conn, self._session_id) + 1,
            )
        if session["state"] == SessionState.RUNNING.value:
            await store.sessions.update(self._tx.conn, self._session_id, state=SessionState.WAITING_FOR_INPUT)

    async def _on_input_consumed(self, output: runner_pb2.Output, consumed: runner_pb2.InputConsumed) -> None:
        accepted = await store.turns.accepted_seq(self._tx.conn, self._session_id, output.turn_id)
        self._pending.append(
            NewEvent(
                EventKind.INPUT_DELIVERED,
                {"accepted_seq": accepted or 0},
                turn_id=output.turn_id,
                output_seq=output.output_seq,
            )
        )

    async def _on_startup_phase(self, output: runner_pb2.Output, phase: runner_pb2.StartupPhase) -> None:
        self._pending.append(
            NewEvent(
                EventKind.STARTUP_PHASE,
                {"phase": phase.phase, "duration_ms": phase.duration_ms},
                output_seq=output.output_seq,
            )
        )

    async def _on_engine_info(self, output: runner_pb2.Output, info: runner_pb2.EngineInfo) -> None:
        try:
            server_info = json.loads(info.server_info_json or "{}")
        except ValueError:
            server_info = {}
        commands = _slash_commands(server_info)
        await self._journal_now(
            NewEvent(
                EventKind.ENGINE_INFO,
                {"slash_commands": commands, "server_info_json": info.server_info_json},
                output_seq=output.output_seq,
            )
        )
        await store.sessions.update(self._tx.conn, self._session_id, slash_commands=commands)

    async def _on_transcript_snapshot(self, output: runner_pb2.Output, snapshot: runner_pb2.TranscriptSnapshot) -> None:
        # Engine state, not conversation history: kept beside the journal, not in it.
        await store.engine_transcripts.save(
            self._tx.conn, self._session_id, snapshot.engine_session_id, snapshot.content
        )
        if output.turn_id:  # where the transcript stood as the turn ended: a point to fork at (`controlplane.forks`)
            digest = hashlib.sha256(snapshot.content).digest()
            await store.turns.mark_transcript(
                self._tx.conn, self._session_id, output.turn_id, len(snapshot.content), digest
            )

    async def _on_engine_turn_started(self, output: runner_pb2.Output, started: runner_pb2.EngineTurnStarted) -> None:
        accepted = await self._journal_now(
            NewEvent(
                EventKind.ENGINE_TURN_STARTED,
                {"reason": started.reason},
                turn_id=output.turn_id,
                output_seq=output.output_seq,
            )
        )
        session = await self._current()
        await store.turns.insert_engine_turn(
            self._tx.conn,
            self._session_id,
            output.turn_id,
            accepted,
            "running" if not session["current_turn_id"] else "detached",
        )
        if session["state"] == SessionState.READY.value and not session["current_turn_id"]:
            await store.sessions.update(
                self._tx.conn, self._session_id, state=SessionState.RUNNING, current_turn_id=output.turn_id
            )

    async def _on_runtime_lost(self, output: runner_pb2.Output, lost: runner_pb2.RuntimeLost) -> None:
        # The agent reports it as it builds the runtime again, for the turn it is about to run (if
        # any): that turn goes on; what the lost engine ran does not.
        await self._journal_now(NewEvent(EventKind.RUNTIME_LOST, {"reason": lost.reason}, output_seq=output.output_seq))
        await self._turns.engine_gone(self._tx, self._session_id, lost.reason)

    async def _on_runtime_stopped(self, output: runner_pb2.Output, stopped: runner_pb2.RuntimeStopped) -> None:
        await self._journal_now(
            NewEvent(
                EventKind.RUNTIME_STOPPED,
                {"reason": stopped.reason, "sandbox_id": stopped.sandbox_id},
                output_seq=output.output_seq,
            )
        )
        await store.sessions.update(self._tx.conn, self._session_id, runtime_stopped=True)
        await self._turns.engine_gone(self._tx, self._session_id, f"the runtime was stopped ({stopped.reason})")

    async def _on_mcp_server_unavailable(
        self, output: runner_pb2.Output, unavailable: runner_pb2.McpServerUnavailable
    ) -> None:
        # A report, not a failure: the engine runs without the server, the session goes on.
        await self._journal_now(
            NewEvent(
                EventKind.MCP_SERVER_UNAVAILABLE,
                {
                    "server": unavailable.server[:_MAX_SERVER_NAME],
                    "reason": unavailable.reason[:_MAX_UNAVAILABLE_REASON],
                },
                output_seq=output.output_seq,
            )
        )

    async def _on_egress_refused(self, output: runner_pb2.Output, refused: runner_pb2.EgressRefused) -> None:
        # A report: the sandbox was already answered with the refusal; the agent rate-limits these.
        await self._journal_now(
            NewEvent(
                EventKind.NETWORK_REQUEST_REFUSED,
                {
                    "host": refused.host[:_MAX_REFUSED_HOST],
                    "port": max(0, min(refused.port, 65535)),
                    "reason": refused.reason[:_MAX_REFUSED_REASON],
                    "suppressed": max(0, refused.suppressed),
                },
                output_seq=output.output_seq,
            )
        )

    async def _on_memory_changes(self, output: runner_pb2.Output, changes: runner_pb2.MemoryChanges) -> None:
        # What the turn changed in its READ_WRITE memory directories: new versions, written in this
        # transaction, so the turn's end (the next output) is never seen before its memory is.
        payloads = await memory.sync(self._tx.conn, self._session_id, output.turn_id, changes)
        for index, payload in enumerate(payloads):
            self._pending.append(
                NewEvent(
                    EventKind.MEMORY_SYNCED,
                    payload,
                    turn_id=output.turn_id,
                    output_seq=output.output_seq if index == 0 else None,
                )
            )

    async def _on_sandbox_reconciled(self, output: runner_pb2.Output, done: runner_pb2.SandboxReconciled) -> None:
        self._pending.append(
            NewEvent(
                EventKind.SANDBOX_RECONCILED,
                {"action": done.action, "sandbox_id": done.sandbox_id, "driver": done.driver, "reason": done.reason},
                output_seq=output.output_seq,
            )
        )


def tool_calls(type_name: str, data: dict[str, Any]) -> list[tuple[str, str]]:
    """The tool calls an AssistantMessage opens (its tool_use blocks): id and tool name."""
    if type_name != "AssistantMessage":
        return []
    return [(str(b["id"]), str(b.get("name") or "")) for b in _blocks(data) if _is_block(b, "ToolUseBlock", "id")]


def tool_results(type_name: str, data: dict[str, Any]) -> list[str]:
    """The tool calls a UserMessage answers (its tool_result blocks): their ids."""
    if type_name != "UserMessage":
        return []
    return [str(b["tool_use_id"]) for b in _blocks(data) if _is_block(b, "ToolResultBlock", "tool_use_id")]


def _blocks(data: dict[str, Any]) -> list[dict[str, Any]]:
    content = data.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _fields(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object, else no fields (what an engine message nests is the agent's to get wrong)."""
    return value if isinstance(value, dict) else {}


def _slash_commands(server_info: Any) -> list[str]:
    commands = server_info.get("commands") if isinstance(server_info, dict) else None
    names = []
    for command in commands if isinstance(commands, list) else []:
        name = command.get("name") if isinstance(command, dict) else command
        if name:
            names.append(str(name))
    return names


def _is_block(block: dict[str, Any], type_name: str, key: str) -> bool:
    """A content block of `type_name` (the agent writes each block's class there) naming its `key`."""
    return block.get("type_name") == type_name and bool(block.get(key))


def produce_time(output: runner_pb2.Output) -> datetime | None:
    """The output's produce_time as the agent stamped it; None when unset or beyond what a timestamp
    can hold (an agent's output is not refused for its clock)."""
    if not output.HasField("produce_time"):
        return None
    try:
        produced = output.produce_time.ToDatetime(tzinfo=UTC)
    except (ValueError, OverflowError):
        return None
    return produced if datetime(1, 1, 2, tzinfo=UTC) <= produced else None
