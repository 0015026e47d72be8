"""The session kernel: accepts client commands into the journal, then executes them.

Every command is first written as journal events together with the session
projection it changes and the agent command that carries it out, in one
transaction. Retries with the same idempotency key return the same outcome.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime

import asyncpg
import structlog

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane import validation
from controlplane.agents import Agents
from controlplane.engines import DEFAULT_ENGINE
from controlplane.errors import (
    InvalidArgument,
    NoAgentAvailable,
    RequestIdReused,
    SessionBusy,
    SessionNotFound,
    SessionNotReady,
)
from controlplane.journal import EventKind, Journal, NewEvent, StoredEvent
from controlplane.live import LiveTail
from controlplane.session import SessionRecord, SessionState

log = structlog.get_logger(__name__)

# A watcher re-reads the journal at least this often even without a wake-up.
WATCH_POLL_SECONDS = 2.0
WATCH_BATCH = 500


@dataclass(frozen=True, slots=True)
class CreateSession:
    request_id: str
    engine: str = ""
    permission_mode: str = ""
    model: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SendMessage:
    session_id: str
    client_message_id: str
    text: str
    permission_mode: str = ""


@dataclass(frozen=True, slots=True)
class AcceptedMessage:
    turn_id: str
    seq: int


def _fingerprint(**fields: object) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def _encode_token(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode()


def _decode_token(token: str) -> dict[str, object]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        if not isinstance(data, dict):
            raise ValueError
        return data
    except (ValueError, UnicodeDecodeError):
        raise InvalidArgument("page_token", "page_token is not one this server issued", "PAGE_TOKEN_INVALID") from None


class SessionKernel:
    def __init__(self, pool: asyncpg.Pool, journal: Journal, agents: Agents, live: LiveTail) -> None:
        self._pool = pool
        self._journal = journal
        self._agents = agents
        self._live = live

    async def create_session(self, request: CreateSession) -> SessionRecord:
        validation.client_id("request_id", request.request_id)
        manifest = validation.engine(request.engine or DEFAULT_ENGINE)
        mode = validation.permission_mode(manifest, request.permission_mode or manifest.default_permission_mode)
        fingerprint = _fingerprint(
            engine=manifest.kind, permission_mode=mode, model=request.model, labels=dict(request.labels)
        )
        existing = await self._by_request_id(request.request_id, fingerprint)
        if existing:
            return existing
        agent_id = await self._agents.pick_for(manifest.kind)
        if agent_id is None:
            raise NoAgentAvailable(f"no connected data-plane agent can run {manifest.kind}; start one with `astrabox agent`")
        session_id = str(uuid.uuid4())
        async with self._journal.transaction() as tx:
            inserted = await tx.conn.fetchval(
                "INSERT INTO sessions (session_id, request_id, request_fingerprint, engine, permission_mode,"
                " model, labels, state, agent_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
                " ON CONFLICT (request_id) DO NOTHING RETURNING session_id",
                session_id,
                request.request_id,
                fingerprint,
                manifest.kind,
                mode,
                request.model,
                dict(request.labels),
                SessionState.CREATING.value,
                agent_id,
            )
            if inserted is not None:
                command_id = await self._agents.enqueue(
                    tx,
                    agent_id,
                    session_id,
                    runner_pb2.Command(
                        start_runtime=runner_pb2.StartRuntime(engine=manifest.kind, permission_mode=mode, model=request.model)
                    ),
                )
                await tx.append(
                    session_id,
                    [
                        NewEvent(
                            EventKind.SESSION_CREATED,
                            {"engine": manifest.kind, "permission_mode": mode, "model": request.model,
                             "request_id": request.request_id},
                        ),
                        NewEvent(EventKind.STARTUP_REQUESTED, {"agent_id": agent_id, "command_id": command_id}),
                    ],
                )
        if inserted is None:  # a concurrent retry won the insert
            existing = await self._by_request_id(request.request_id, fingerprint)
            assert existing is not None
            return existing
        log.info("session_created", session_id=session_id, agent_id=agent_id)
        return await self.get_session(session_id)

    async def _by_request_id(self, request_id: str, fingerprint: str) -> SessionRecord | None:
        row = await self._pool.fetchrow("SELECT * FROM sessions WHERE request_id = $1", request_id)
        if row is None:
            return None
        if row["request_fingerprint"] != fingerprint:
            raise RequestIdReused(
                f"request_id {request_id!r} was already used to create a different session",
                {"request_id": request_id, "session_id": str(row["session_id"])},
            )
        return SessionRecord.from_row(row)

    async def get_session(self, session_id: str) -> SessionRecord:
        session_id = validation.session_id(session_id)
        record = await self._journal.session(session_id)
        if record is None or record.state is SessionState.DELETED:
            raise SessionNotFound(session_id)
        return record

    async def list_sessions(self, page_size: int, page_token: str) -> tuple[list[SessionRecord], str]:
        size = validation.page_size(page_size, default=50, maximum=500)
        if page_token:
            token = _decode_token(page_token)
            try:
                before = (datetime.fromisoformat(str(token["t"])), str(uuid.UUID(str(token["id"]))))
            except (KeyError, ValueError):
                raise InvalidArgument("page_token", "page_token is not one this server issued", "PAGE_TOKEN_INVALID") from None
            rows = await self._pool.fetch(
                "SELECT * FROM sessions WHERE deleted_at IS NULL AND (created_at, session_id) < ($1, $2::uuid)"
                " ORDER BY created_at DESC, session_id DESC LIMIT $3",
                *before,
                size + 1,
            )
        else:
            rows = await self._pool.fetch(
                "SELECT * FROM sessions WHERE deleted_at IS NULL ORDER BY created_at DESC, session_id DESC LIMIT $1",
                size + 1,
            )
        records = [SessionRecord.from_row(r) for r in rows[:size]]
        next_token = ""
        if len(rows) > size:
            last = records[-1]
            next_token = _encode_token({"t": last.created_at.isoformat(), "id": last.session_id})
        return records, next_token

    async def send_message(self, request: SendMessage) -> AcceptedMessage:
        session_id = validation.session_id(request.session_id)
        validation.client_id("client_message_id", request.client_message_id)
        validation.message_text(request.text)
        async with self._journal.transaction() as tx:
            row = await tx.lock_session(session_id)
            if row is None or row["state"] == SessionState.DELETED.value:
                raise SessionNotFound(session_id)
            session = SessionRecord.from_row(row)
            mode = session.permission_mode
            if request.permission_mode:
                mode = validation.permission_mode(validation.engine(session.engine), request.permission_mode)
            fingerprint = _fingerprint(text=request.text, permission_mode=request.permission_mode)
            previous = await tx.conn.fetchrow(
                "SELECT turn_id, accepted_seq, fingerprint FROM turns WHERE session_id = $1 AND client_message_id = $2",
                session_id,
                request.client_message_id,
            )
            if previous is not None:
                if previous["fingerprint"] != fingerprint:
                    raise RequestIdReused(
                        f"client_message_id {request.client_message_id!r} was already used for a different message",
                        {"client_message_id": request.client_message_id, "turn_id": previous["turn_id"]},
                    )
                return AcceptedMessage(previous["turn_id"], previous["accepted_seq"])
            self._check_accepts_messages(session)
            turn_id = str(uuid.uuid4())
            (seq,) = await tx.append(
                session_id,
                [
                    NewEvent(
                        EventKind.USER_MESSAGE_ACCEPTED,
                        {"client_message_id": request.client_message_id, "text": request.text, "permission_mode": mode},
                        turn_id=turn_id,
                    )
                ],
            )
            await tx.conn.execute(
                "INSERT INTO turns (session_id, turn_id, client_message_id, fingerprint, accepted_seq)"
                " VALUES ($1, $2, $3, $4, $5)",
                session_id,
                turn_id,
                request.client_message_id,
                fingerprint,
                seq,
            )
            await tx.update_session(session_id, state=SessionState.RUNNING, current_turn_id=turn_id, failure_reason="")
            await self._agents.enqueue(
                tx,
                session.agent_id,
                session_id,
                runner_pb2.Command(
                    deliver_input=runner_pb2.DeliverInput(turn_id=turn_id, text=request.text, permission_mode=mode)
                ),
            )
        log.info("message_accepted", session_id=session_id, turn_id=turn_id, seq=seq)
        return AcceptedMessage(turn_id, seq)

    @staticmethod
    def _check_accepts_messages(session: SessionRecord) -> None:
        if session.state in (SessionState.RUNNING, SessionState.WAITING_FOR_INPUT, SessionState.INTERRUPTING):
            raise SessionBusy(
                f"session {session.session_id} is running turn {session.current_turn_id}; "
                "wait for it to finish before sending another message",
                {"session_id": session.session_id, "turn_id": session.current_turn_id},
            )
        if session.state is not SessionState.READY:
            detail = f": {session.failure_reason}" if session.failure_reason else ""
            raise SessionNotReady(
                f"session {session.session_id} is {session.state.value} and cannot take messages{detail}",
                {"session_id": session.session_id, "state": session.state.value},
            )

    async def delete_session(self, session_id: str, request_id: str) -> SessionRecord:
        session_id = validation.session_id(session_id)
        if request_id:
            validation.client_id("request_id", request_id)
        async with self._journal.transaction() as tx:
            row = await tx.lock_session(session_id)
            if row is None:
                raise SessionNotFound(session_id)
            session = SessionRecord.from_row(row)
            if session.state is not SessionState.DELETED:
                await tx.append(session_id, [NewEvent(EventKind.SESSION_DELETED, {"request_id": request_id})])
                await tx.update_session(
                    session_id, state=SessionState.DELETED, runtime_available=False, current_turn_id=None,
                    deleted_at=datetime.now().astimezone(),
                )
                if session.agent_id:
                    await self._agents.enqueue(
                        tx, session.agent_id, session_id,
                        runner_pb2.Command(destroy_runtime=runner_pb2.DestroyRuntime(reason="session deleted")),
                    )
        log.info("session_deleted", session_id=session_id)
        record = await self._journal.session(session_id)
        assert record is not None
        return record

    async def list_events(
        self, session_id: str, after_seq: int, page_size: int, page_token: str
    ) -> tuple[list[StoredEvent], str]:
        await self.get_session(session_id)
        size = validation.page_size(page_size, default=100, maximum=1000)
        if page_token:
            after = _decode_token(page_token).get("after")
            if not isinstance(after, int) or after < 0:
                raise InvalidArgument("page_token", "page_token is not one this server issued", "PAGE_TOKEN_INVALID")
            after_seq = after
        elif after_seq < 0:
            raise InvalidArgument("after_seq", f"after_seq must not be negative, got {after_seq}")
        events = await self._journal.read(validation.session_id(session_id), after_seq, size + 1)
        next_token = _encode_token({"after": events[size - 1].seq}) if len(events) > size else ""
        return events[:size], next_token

    async def watch(self, session_id: str, after_seq: int) -> AsyncIterator[StoredEvent]:
        """Replay stored events after `after_seq`, then follow live ones, forever."""
        session_id = (await self.get_session(session_id)).session_id
        if after_seq < 0:
            raise InvalidArgument("after_seq", f"after_seq must not be negative, got {after_seq}")
        cursor = after_seq
        with self._live.subscribe(session_id) as subscription:
            while True:
                events = await self._journal.read(session_id, cursor, WATCH_BATCH)
                for event in events:
                    yield event
                    cursor = event.seq
                if len(events) < WATCH_BATCH:
                    await subscription.wait(WATCH_POLL_SECONDS)
                else:
                    await asyncio.sleep(0)
