"""ForkSession: a new session that goes on from another's conversation at a turn end, with its files.

The conversation travels as it does when a session is placed again on another agent: the engine's
transcript in the new session's StartRuntime, which the engine resumes. The control plane keeps only
a session's newest transcript, and notes its length and digest as each turn ends
(`OutputApplier`'s transcript snapshot): the engine only appends to it, so the transcript as of a
turn's end is the newest one's first bytes, used once they match that digest. A point inside a turn
is refused: a transcript cut mid-turn is no conversation an engine resumes.

The files are copied as a client would: the source's workspace downloaded as an archive and
unpacked into the new session's (`controlplane.workspace`), once the new session's runtime is up
and before the call returns. No earlier state of a workspace is kept, so the files are the source's
as they are at the fork; a source that runs a turn, or has messages queued, is refused.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

import asyncpg
import structlog

from astrabox.environments.v1 import environment_pb2
from controlplane import quotas, requests, session_config, store, validation
from controlplane.agent_definitions.definitions import ResolvedAgent
from controlplane.environments.definitions import PinnedEnvironment
from controlplane.errors import (
    ForkPointBeyondEnd,
    ForkRefused,
    InvalidArgument,
    RequestIdReused,
    RuntimeNotAvailable,
    SessionNotFound,
)
from controlplane.journal import EventKind, Journal, JournalTransaction, NewEvent
from controlplane.kernel import CreateSession, Resumed, SessionKernel
from controlplane.session import SessionRecord, SessionState
from controlplane.workspace import WorkspaceFiles

log = structlog.get_logger(__name__)

# How long ForkSession waits for the new session's runtime before it returns it as it is (a retry
# with the same request_id finishes the copy).
READY_TIMEOUT_S = 300.0
_POLL_S = 0.25
_ENDED = (SessionState.FAILED, SessionState.ARCHIVED, SessionState.DELETED)


@dataclass(frozen=True, slots=True)
class ForkSession:
    session_id: str
    request_id: str
    # The caller's project: the source must be one of its sessions, and so is the fork.
    project_id: uuid.UUID
    # The seq of a TURN_COMPLETED event of the source; 0: its last one.
    through_seq: int = 0
    # The fork's labels; empty: the source's.
    labels: Mapping[str, str] = field(default_factory=dict)


class Forks:
    def __init__(
        self,
        pool: asyncpg.Pool,
        kernel: SessionKernel,
        journal: Journal,
        workspace: WorkspaceFiles,
        ready_timeout: float = READY_TIMEOUT_S,
    ) -> None:
        self._pool = pool
        self._kernel = kernel
        self._journal = journal
        self._workspace = workspace
        self._ready_timeout = ready_timeout

    async def fork(self, request: ForkSession) -> SessionRecord:
        """The new session, READY with the source's files in its workspace (or FAILED, or after
        `ready_timeout` as it is); the same one for a retry with the request's request_id."""
        validation.client_id("request_id", request.request_id)
        source_id = validation.session_id(request.session_id)
        if request.through_seq < 0:
            raise InvalidArgument("through_seq", f"through_seq must not be negative, got {request.through_seq}")
        fingerprint = requests.fingerprint(
            fork_of=source_id, through_seq=request.through_seq, labels=dict(request.labels)
        )
        fork_id = str(uuid.uuid4())
        async with self._journal.transaction() as tx:
            await quotas.admit_session(tx.conn, request.project_id, request.request_id)
            known = await store.sessions.by_request_id(tx.conn, request.project_id, request.request_id)
            if known is None:
                await self._fork_in(tx, fork_id, source_id, request, fingerprint)
        if known is not None:
            if known["request_fingerprint"] != fingerprint:
                raise RequestIdReused(
                    f"request_id {validation.echo(request.request_id)} was already used for another session or fork",
                    {"request_id": request.request_id, "session_id": str(known["session_id"])},
                )
            fork_id = str(known["session_id"])
        else:
            log.info("session_forked", session_id=source_id, fork_session_id=fork_id)
        return await self._with_files(fork_id, source_id)

    async def _fork_in(
        self, tx: JournalTransaction, fork_id: str, source_id: str, request: ForkSession, fingerprint: str
    ) -> None:
        row = await store.sessions.lock(tx.conn, source_id)
        if row is None or row["state"] == SessionState.DELETED.value or row["project_id"] != request.project_id:
            raise SessionNotFound(source_id)
        source = SessionRecord.from_row(row)
        through_seq, turn_id = await _fork_point(tx, source, request.through_seq)
        if source.state.busy or source.current_turn_id or await store.turns.queued_ids(tx.conn, source_id):
            raise ForkRefused(
                "FORK_SOURCE_BUSY",
                f"session {source_id} is {source.state.value} or has messages queued, and its files are changing;"
                " fork it when it is ready",
                {"state": source.state.value},
            )
        if source.state is not SessionState.READY or not source.runtime_available or source.runtime_stopped:
            # Checked before the fork exists: its files could not be copied (a stopped sandbox serves none).
            stopped = ", stopped while idle" if source.runtime_stopped else ""
            raise RuntimeNotAvailable(
                f"session {source_id} has no sandbox running right now ({source.state.value}{stopped}) to copy its"
                " files from;"
                " send it a message to bring it back, then fork it",
                {"session_id": source_id},
            )
        resumed = await _transcript_at(tx, source_id, through_seq, turn_id)
        config = session_config.decode(source.config, source.engine, source.permission_mode, source.model)
        create = CreateSession(
            request_id=request.request_id,
            project_id=request.project_id,
            engine=source.engine,
            permission_mode=source.permission_mode,
            model=source.model,
            labels=dict(request.labels) or dict(source.labels),
        )
        await self._kernel.create_in(tx, fork_id, create, _pins(source), config, fingerprint, resumed)
        await tx.append(
            source_id,
            [
                NewEvent(
                    EventKind.SESSION_FORKED,
                    {"fork_session_id": fork_id, "through_seq": through_seq, "request_id": request.request_id},
                )
            ],
        )

    async def _with_files(self, fork_id: str, source_id: str) -> SessionRecord:
        """Once the fork's runtime is up, copy the source's workspace into it (once)."""
        deadline = time.monotonic() + self._ready_timeout
        while True:
            fork = await self._kernel.get_session(fork_id)
            if await store.session_forks.files_copied(self._pool, fork_id) or fork.state in _ENDED:
                return fork
            if fork.state is SessionState.READY and fork.runtime_available:
                break
            if time.monotonic() > deadline:
                return fork
            await asyncio.sleep(_POLL_S)
        archive = self._workspace.download(source_id, ".")
        written = await self._workspace.upload((fork_id, "."), archive)
        await store.session_forks.mark_files_copied(self._pool, fork_id)
        log.info("fork_files_copied", session_id=fork_id, entries=written.entries, bytes=written.bytes)
        return await self._kernel.get_session(fork_id)


async def _fork_point(tx: JournalTransaction, source: SessionRecord, asked: int) -> tuple[int, str]:
    """The seq and turn of the TURN_COMPLETED event to fork at."""
    if asked > source.last_seq:
        raise ForkPointBeyondEnd(
            f"through_seq {asked} is past the end of session {source.session_id}'s journal (last_seq {source.last_seq})",
            {"through_seq": str(asked), "last_seq": str(source.last_seq)},
        )
    if asked == 0:
        last = await store.events.last_of_kind(tx.conn, source.session_id, EventKind.TURN_COMPLETED.value)
        if last is None:
            raise ForkRefused(
                "FORK_POINT_NOT_AT_TURN_END",
                f"session {source.session_id} has no completed turn to fork at",
                {"through_seq": "0", "kind": ""},
            )
        return last
    at = await store.events.kind_at(tx.conn, source.session_id, asked)
    kind = at[0] if at else ""
    if at is None or kind != EventKind.TURN_COMPLETED.value:
        raise ForkRefused(
            "FORK_POINT_NOT_AT_TURN_END",
            f"event {asked} of session {source.session_id} is {kind or 'none'}, not a turn's end (turn_completed):"
            " a conversation is forked after a completed turn",
            {"through_seq": str(asked), "kind": kind},
        )
    return asked, at[1]


async def _transcript_at(tx: JournalTransaction, session_id: str, through_seq: int, turn_id: str) -> Resumed:
    """The engine's transcript as the turn ended: the newest one's first bytes, checked against the
    length and digest noted then."""
    mark = await store.turns.transcript_mark(tx.conn, session_id, turn_id)
    newest = await store.engine_transcripts.find(tx.conn, session_id)
    if mark is not None and newest is not None:
        length, digest = mark
        prefix = newest.content[:length]
        if len(prefix) == length and hashlib.sha256(prefix).digest() == digest:
            return Resumed(session_id, through_seq, newest.engine_session_id, prefix)
    raise ForkRefused(
        "FORK_POINT_NOT_AVAILABLE",
        f"the engine's transcript as of event {through_seq} of session {session_id} is not held: it arrives just"
        " after the turn ends (retry in a moment), one over the agent's cap is never sent, and one the engine"
        " rewrote since no longer holds it (fork at a later turn)",
        {"through_seq": str(through_seq)},
    )


def _pins(source: SessionRecord) -> tuple[ResolvedAgent | None, PinnedEnvironment | None]:
    """The source's agent and environment versions, pinned by the fork as they are by the source."""
    agent = None
    if source.agent is not None:
        spec = session_config.decode(source.config, source.engine, source.permission_mode, source.model)
        agent = ResolvedAgent(source.agent.agent_id, source.agent.name, source.agent.version, spec, "")
    environment = None
    if source.environment is not None:
        pinned = source.environment
        spec_pb = environment_pb2.EnvironmentSpec.FromString(pinned.spec)
        environment = PinnedEnvironment(
            pinned.environment_id, pinned.name, pinned.version, pinned.build_digest, spec_pb
        )
    return agent, environment
