"""The session kernel: accepts client commands into the journal, then executes them.

Every command is first written as journal events together with the session
projection it changes and the agent command that carries it out, in one
transaction. Retries with the same idempotency key return the same outcome.
A new session is admitted by the project's quotas, then placed on an agent with
a free slot (`controlplane.agents`), in the transaction that creates it
(`controlplane.quotas`): a project over its quota hears about its quota, not
about the fleet.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import cast

import asyncpg
import structlog
from google.protobuf import json_format

from astrabox.agents.v1 import agent_pb2
from astrabox.environments.v1 import environment_pb2
from astrabox.memory.v1 import memory_service_pb2 as memory_pb2
from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane import git_sources, named_definitions, quotas, requests, session_config, store, validation
from controlplane.agent_definitions.definitions import AgentDefinitions, ResolvedAgent
from controlplane.agents import Agents
from controlplane.deltas import DeltaHub, DeltaOrder, DeltaQueue, LiveDelta
from controlplane.engines import DEFAULT_ENGINE
from controlplane.environments.definitions import EnvironmentDefinitions, PinnedEnvironment
from controlplane.errors import InvalidArgument, RequestIdReused, SessionNotFound
from controlplane.journal import ClientPage, EventKind, Journal, JournalTransaction, NewEvent, StoredEvent
from controlplane.listing import SessionFilter, filters_changed
from controlplane.live import LiveTail
from controlplane.memory import sessions as memory
from controlplane.page_tokens import PageTokens
from controlplane.session import SessionEnvironment, SessionRecord, SessionState
from controlplane.turns import Turns

log = structlog.get_logger(__name__)

# A watcher re-reads the journal at least this often even without a wake-up.
WATCH_POLL_SECONDS = 2.0
# The events one query of a watch reads: a watcher far behind catches up a page at a time.
WATCH_PAGE = 1000
# And the payload bytes (as journaled) a page of a watch holds at most, past its first event: a watch
# behind holds its page and the one read ahead, so large events cannot make it hold gigabytes.
WATCH_PAGE_BYTES = 8 * 1024 * 1024
# The payload bytes a ListSessionEvents page holds at most, past its first event: PostgreSQL renders
# JSON at most about 1.5 times as long as it was written, so the response stays within the 4 MiB a
# gRPC client takes by default (unless one event alone is larger).
LIST_PAGE_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class CreateSession:
    request_id: str
    # The project the session belongs to (the caller's); request_id is unique within it.
    project_id: uuid.UUID
    engine: str = ""
    permission_mode: str = ""
    model: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    # An agent definition's name or id in the project, and the version to pin (0: the newest).
    agent: str = ""
    agent_version: int = 0
    # An environment's name or id in the project, and the version to pin (0: the newest); empty: the built-in one.
    environment: str = ""
    environment_version: int = 0
    # The git repository to clone into the workspace before the first turn (None: none).
    git_source: environment_pb2.GitSource | None = None
    # The project's memory stores the session uses (CreateSessionRequest.memory).
    memory: Sequence[memory_pb2.MemoryAttachment] = ()


@dataclass(frozen=True, slots=True)
class Resumed:
    """What a fork starts from (`controlplane.forks`): the engine's conversation, to resume, and where it
    came from (the source session and the seq of the turn end it was copied through)."""

    source_session_id: str
    through_seq: int
    engine_session_id: str
    transcript: bytes


def _fingerprint(request: CreateSession, config: agent_pb2.AgentSpec) -> str:
    """What a retry of `request` must ask again. With an agent, the request as asked: "the newest
    version" may be another one by the retry, which then returns the session its first call made.
    The environment likewise, as asked (and only when asked, so that the fingerprints of sessions
    created without one stay what they were), and the git source when there is one."""
    asked: dict[str, object] = (
        {"environment": request.environment, "environment_version": request.environment_version}
        if request.environment
        else {}
    )
    if request.git_source:
        asked["git_source"] = json_format.MessageToDict(request.git_source)
    if request.memory:
        asked["memory"] = [json_format.MessageToDict(attachment) for attachment in request.memory]
    if not request.agent:
        mode, model = config.permission_mode, request.model
        return requests.fingerprint(
            engine=config.engine, permission_mode=mode, model=model, labels=dict(request.labels), **asked
        )
    return requests.fingerprint(
        engine=request.engine,
        permission_mode=request.permission_mode,
        model=request.model,
        labels=dict(request.labels),
        agent=request.agent,
        agent_version=request.agent_version,
        **asked,
    )


class SessionKernel:
    def __init__(
        self,
        pool: asyncpg.Pool,
        journal: Journal,
        agents: Agents,
        turns: Turns,
        live: LiveTail,
        page_tokens: PageTokens,
        definitions: AgentDefinitions,
        environments: EnvironmentDefinitions | None = None,
        deltas: DeltaHub | None = None,
    ) -> None:
        self._pool = pool
        self._deltas = deltas or DeltaHub()
        self._definitions = definitions
        self._environments = environments or EnvironmentDefinitions(pool, page_tokens)
        self._page_tokens = page_tokens
        self._turns = turns
        self._journal = journal
        self._agents = agents
        self._live = live

    async def create_session(self, request: CreateSession) -> SessionRecord:
        validation.client_id("request_id", request.request_id)
        if request.git_source is not None:
            request = dataclasses.replace(request, git_source=git_sources.checked(request.git_source))
        pinned = None
        if request.agent:
            pinned = await self._definitions.resolve(request.project_id, request.agent, request.agent_version)
        elif request.agent_version:
            raise InvalidArgument("agent_version", "agent_version needs an agent: name the agent to pin a version of")
        environment = None
        if request.environment:
            environment = await self._environments.resolve(
                request.project_id, request.environment, request.environment_version
            )
        elif request.environment_version:
            raise InvalidArgument(
                "environment_version",
                "environment_version needs an environment: name the environment to pin a version of",
            )
        config = session_config.effective(pinned, request.engine, request.permission_mode, request.model)
        manifest = await self._agents.engine_manifest(config.engine or DEFAULT_ENGINE)
        config.engine = manifest.kind
        config.permission_mode = validation.permission_mode(
            manifest, config.permission_mode or manifest.default_permission_mode
        )
        fingerprint = _fingerprint(request, config)
        session_id = str(uuid.uuid4())
        async with self._journal.transaction() as tx:
            await quotas.admit_session(tx.conn, request.project_id, request.request_id)
            # The project's creates take turns from here (admit_session): a retry, its request_id
            # known, returns its session (below) and is never placed, however full the agents are.
            known = await store.sessions.by_request_id(tx.conn, request.project_id, request.request_id)
            if known is None:
                agent_id = await self.create_in(tx, session_id, request, (pinned, environment), config, fingerprint)
        if known is not None:
            existing = await self._by_request_id(request, fingerprint)
            assert existing is not None
            return existing
        log.info("session_created", session_id=session_id, agent_id=agent_id)
        return await self._view(session_id)

    async def create_in(
        self,
        tx: JournalTransaction,
        session_id: str,
        request: CreateSession,
        pins: tuple[ResolvedAgent | None, PinnedEnvironment | None],
        config: agent_pb2.AgentSpec,
        fingerprint: str,
        resumed: Resumed | None = None,
    ) -> str:
        """Place the new session on an agent (claiming a slot there), insert it and queue its start,
        resuming the conversation `resumed` (a fork's) when given; returns the agent."""
        pinned, environment = pins
        engine, mode, model = config.engine, config.permission_mode, config.model
        placing = time.monotonic()
        spec = named_definitions.canonical(environment.spec) if environment is not None else None
        binds = session_config.binds_credentials(config, spec)
        isolation = session_config.isolation(spec)
        agent_id = await self._agents.place(tx.conn, engine, request.project_id, binds, isolation)
        placed_ms = int((time.monotonic() - placing) * 1000)
        inserted = await store.sessions.insert(
            tx.conn,
            session_id,
            request.project_id,
            request.request_id,
            fingerprint,
            engine,
            mode,
            model,
            request.labels,
            SessionState.CREATING,
            agent_id,
        )
        assert inserted, "the request_id was unknown under the project's lock"
        await store.sessions.set_config(
            tx.conn,
            session_id,
            session_config.encode(config),
            (uuid.UUID(pinned.agent_id), pinned.name, pinned.version) if pinned else None,
            session_config.turn_timeout(config),
        )
        runtime_environment = None
        if environment is not None and spec is not None:
            await store.sessions.set_environment(
                tx.conn,
                session_id,
                uuid.UUID(environment.environment_id),
                environment.name,
                environment.version,
                environment.build_digest,
                spec,
            )
            runtime_environment = session_config.runtime_environment(
                SessionEnvironment(
                    environment.environment_id, environment.name, environment.version, environment.build_digest, spec
                )
            )
        if request.git_source is not None:
            await store.sessions.set_git_source(tx.conn, session_id, request.git_source.SerializeToString())
        # The request's stores, else those its agent names (AgentSpec.memory).
        attachments = await memory.resolve(tx.conn, request.project_id, request.memory or config.memory)
        for attachment in attachments:
            await store.memory_stores.attach(tx.conn, session_id, attachment.store_id, attachment.read_write)
        mounts = await memory.mounts(tx.conn, session_id)
        if resumed is not None:
            await store.session_forks.set_origin(tx.conn, session_id, resumed.source_session_id, resumed.through_seq)
            # Its own transcript from the start: a sandbox lost before its first turn ends resumes it too.
            await store.engine_transcripts.save(tx.conn, session_id, resumed.engine_session_id, resumed.transcript)
        command_id = await self._agents.enqueue(
            tx,
            agent_id,
            session_id,
            runner_pb2.Command(
                start_runtime=runner_pb2.StartRuntime(
                    engine=engine,
                    permission_mode=mode,
                    model=model,
                    config=memory.with_prompt(config, mounts),
                    environment=runtime_environment,
                    git_source=request.git_source,
                    project_id=str(request.project_id),
                    agent_id=pinned.agent_id if pinned else "",
                    agent_version=pinned.version if pinned else 0,
                    memory=mounts,
                    resume_engine_session_id=resumed.engine_session_id if resumed else "",
                    transcript=resumed.transcript if resumed else b"",
                )
            ),
        )
        created: dict[str, object] = {
            "engine": engine,
            "permission_mode": mode,
            "model": model,
            "request_id": request.request_id,
            "config": json_format.MessageToDict(config),
        }
        if request.git_source is not None:
            created["git_source"] = json_format.MessageToDict(request.git_source)
        if attachments:
            created["memory"] = [
                {
                    "store": str(a.store_id),
                    "mode": "MEMORY_MODE_READ_WRITE" if a.read_write else "MEMORY_MODE_READ_ONLY",
                }
                for a in attachments
            ]
        if resumed is not None:
            created["forked_from"] = {"session_id": resumed.source_session_id, "through_seq": resumed.through_seq}
        if pinned is not None:
            created["agent"] = {"agent_id": pinned.agent_id, "name": pinned.name, "version": pinned.version}
        if environment is not None:
            created["environment"] = {
                "environment_id": environment.environment_id,
                "name": environment.name,
                "version": environment.version,
                "build_digest": environment.build_digest,
            }
        await tx.append(
            session_id,
            [
                NewEvent(EventKind.SESSION_CREATED, created),
                NewEvent(EventKind.STARTUP_REQUESTED, {"agent_id": agent_id, "command_id": command_id}),
                NewEvent(EventKind.STARTUP_PHASE, {"phase": "placed", "duration_ms": placed_ms}),
            ],
        )
        return agent_id

    async def _by_request_id(self, request: CreateSession, fingerprint: str) -> SessionRecord | None:
        request_id = request.request_id
        row = await store.sessions.by_request_id(self._pool, request.project_id, request_id)
        if row is None:
            return None
        if row["request_fingerprint"] != fingerprint:
            raise RequestIdReused(
                f"request_id {validation.echo(request_id)} was already used to create a different session",
                {"request_id": request_id, "session_id": str(row["session_id"])},
            )
        return await self._view(str(row["session_id"]))

    async def get_session(self, session_id: str) -> SessionRecord:
        session_id = validation.session_id(session_id)
        record = await self._journal.session(session_id)
        if record is None or record.state is SessionState.DELETED:
            raise SessionNotFound(session_id)
        return record

    async def list_sessions(
        self, project_id: uuid.UUID, page_size: int, page_token: str, listing: SessionFilter | None = None
    ) -> tuple[list[SessionRecord], str]:
        """A page of the project's sessions that `listing` shows, newest first, and the next page's
        token (which binds the project and the filters: `controlplane.listing`)."""
        listing = listing or SessionFilter()
        if listing.agent:  # by id, archived agents too; NOT_FOUND for one the project does not have
            agent, _ = await self._definitions.get(project_id, listing.agent)
            listing = dataclasses.replace(listing, agent=agent.agent_id)
        size = validation.page_size(page_size, default=50, maximum=500)
        scope, filters = f"sessions/{project_id}", listing.fingerprint()
        before = None
        if page_token:
            token = self._page_tokens.read(scope, page_token)
            try:
                before = (datetime.fromisoformat(str(token["t"])), str(uuid.UUID(str(token["id"]))))
            except (KeyError, ValueError):
                raise validation.page_token_invalid() from None
            if token.get("f") != filters:
                raise filters_changed()
        found = await store.sessions.view_page(self._pool, project_id, listing, size + 1, before)
        records = found[:size]
        next_token = ""
        if len(found) > size:
            last = records[-1]
            position: dict[str, object] = {"t": last.created_at.isoformat(), "id": last.session_id, "f": filters}
            next_token = self._page_tokens.issue(scope, position)
        return records, next_token

    async def delete_session(self, session_id: str, request_id: str) -> SessionRecord:
        """Destroy the sandbox and hide the session. Idempotent."""
        return await self._release(session_id, request_id, SessionState.DELETED)

    async def archive_session(self, session_id: str, request_id: str) -> SessionRecord:
        """Release the sandbox; the history stays readable. Idempotent."""
        return await self._release(session_id, request_id, SessionState.ARCHIVED)

    async def _release(self, session_id: str, request_id: str, final: SessionState) -> SessionRecord:
        session_id = validation.session_id(session_id)
        if request_id:
            validation.client_id("request_id", request_id)
        async with self._journal.transaction() as tx:
            row = await store.sessions.lock(tx.conn, session_id)
            if row is None or (row["state"] == SessionState.DELETED.value and final is SessionState.ARCHIVED):
                raise SessionNotFound(session_id)
            session = SessionRecord.from_row(row)
            released_now = session.state not in (final, SessionState.DELETED)  # else: idempotent
            if released_now:
                await self._release_in(tx, session, request_id, final)
        if released_now:
            log.info("session_released", session_id=session_id, state=final.value)
        return await self._view(session_id)

    async def _release_in(
        self, tx: JournalTransaction, session: SessionRecord, request_id: str, final: SessionState
    ) -> None:
        session_id = session.session_id
        reason = f"the session was {'deleted' if final is SessionState.DELETED else 'archived'}"
        await self._turns.fail_all_queued(tx, session_id, reason)
        await self._turns.runtime_gone(tx, session_id, reason)
        kind = EventKind.SESSION_DELETED if final is SessionState.DELETED else EventKind.SESSION_ARCHIVED
        now = datetime.now().astimezone()
        await tx.append(session_id, [NewEvent(kind, {"request_id": request_id})])
        await store.sessions.update(
            tx.conn,
            session_id,
            state=final,
            runtime_available=False,
            current_turn_id=None,
            **({"deleted_at": now} if final is SessionState.DELETED else {}),
            # Retention counts from the first release: deleting an archived session does not extend it.
            **({"released_at": now} if session.state is not SessionState.ARCHIVED else {}),
        )
        if session.agent_id and session.state is not SessionState.ARCHIVED:
            await self._agents.enqueue(
                tx,
                session.agent_id,
                session_id,
                runner_pb2.Command(destroy_runtime=runner_pb2.DestroyRuntime(reason=reason)),
            )

    async def _view(self, session_id: str) -> SessionRecord:
        record = await self._journal.session(session_id)
        assert record is not None
        return record

    async def list_events(
        self, session_id: str, after_seq: int, page_size: int, page_token: str
    ) -> tuple[ClientPage, str]:
        session_id = validation.session_id(session_id)
        size = validation.page_size(page_size, default=100, maximum=1000)
        if page_token:
            after = self._page_tokens.read(_events_scope(session_id), page_token).get("after")
            if not isinstance(after, int) or after < 0:
                raise validation.page_token_invalid()
            after_seq = after
        elif after_seq < 0:
            raise InvalidArgument("after_seq", f"after_seq must not be negative, got {after_seq}")
        await self.get_session(session_id)
        page = await self._journal.read_for_clients(session_id, after_seq, size, LIST_PAGE_BYTES)
        if not page.more:
            return page, ""
        return page, self.events_page_token(session_id, page.last_seq)

    def events_page_token(self, session_id: str, after_seq: int) -> str:
        """The page token of `list_events` for the session's events after `after_seq` (for a page that
        ends before the one `list_events` read)."""
        return self._page_tokens.issue(_events_scope(validation.session_id(session_id)), {"after": after_seq})

    async def watch(
        self, session_id: str, after_seq: int, include_deltas: bool = False
    ) -> AsyncIterator[StoredEvent | LiveDelta]:
        """`watch_runs`, one event at a time."""
        async for item in self.watch_runs(session_id, after_seq, include_deltas):
            if isinstance(item, LiveDelta):
                yield item
            else:
                for event in item.events() if isinstance(item, ClientPage) else item:
                    yield event

    async def watch_runs(
        self, session_id: str, after_seq: int, include_deltas: bool = False
    ) -> AsyncIterator[ClientPage | list[StoredEvent] | LiveDelta]:
        """Replay stored events after `after_seq`, then follow live ones, forever; with
        `include_deltas`, also the live deltas written from now on (controlplane.deltas).

        Events come in runs, in order: a page of the journal as read (a watcher behind gets long
        runs, a ClientPage of rows), or those this replica committed since (one up to date gets runs
        of one or a few), cut where a delta goes between two of them."""
        session_id = validation.session_id(session_id)
        if after_seq < 0:
            raise InvalidArgument("after_seq", f"after_seq must not be negative, got {after_seq}")
        cursor = after_seq
        with contextlib.ExitStack() as stack:
            subscription = stack.enter_context(self._live.subscribe(session_id))
            # The first page is read while the session is looked up (a query each, at once); nothing
            # is sent before it is found. A new subscription holds nothing (its `take` is None): told
            # so, it knows the watcher reads the journal now.
            subscription.take(cursor)
            ahead: asyncio.Task[ClientPage] | None = asyncio.create_task(
                self._journal.read_for_clients(session_id, cursor, WATCH_PAGE, WATCH_PAGE_BYTES)
            )
            stack.callback(lambda: _drop(ahead))
            record = await self.get_session(session_id)
            queue, order, checked = None, None, time.monotonic()
            if include_deltas:
                queue = stack.enter_context(self._deltas.follow(session_id, subscription.notify))
                order = DeltaOrder(record.agent_id, await self._journal.last_output_seq(session_id, after_seq))
            while True:
                taken = subscription.take(cursor) if ahead is None else None
                run: ClientPage | list[StoredEvent]
                if ahead is not None:
                    run, ahead = await ahead, None
                elif taken is not None:
                    # Caught up: the events this replica committed since, as they were committed (no query).
                    run = cast(list[StoredEvent], taken)
                else:
                    run = await self._journal.read_for_clients(session_id, cursor, WATCH_PAGE, WATCH_PAGE_BYTES)
                if isinstance(run, ClientPage) and run.more:
                    # Behind: the next page is read while this one is sent (PostgreSQL works meanwhile).
                    ahead = asyncio.create_task(
                        self._journal.read_for_clients(session_id, run.last_seq, WATCH_PAGE, WATCH_PAGE_BYTES)
                    )
                if not run:
                    pass
                elif queue is None or order is None:
                    yield run  # no delta to put between its events: the run goes as it is
                    cursor = run.last_seq if isinstance(run, ClientPage) else run[-1].seq
                else:
                    piece: list[StoredEvent] = []
                    for event in run.events() if isinstance(run, ClientPage) else run:
                        deltas = list(order.ready(queue))  # those that go before `event`
                        if deltas and piece:
                            yield piece
                            piece = []
                        for delta in deltas:
                            yield delta
                        order.sent(event)
                        piece.append(event)
                        cursor = event.seq
                    if piece:
                        yield piece
                if queue is not None and order is not None:
                    head = queue.peek()
                    if head is not None and head.agent_id != order.agent_id and time.monotonic() - checked > 2:
                        # Moved to another agent? At most every 2 s: a foreign agent's deltas cost no query each.
                        checked = time.monotonic()
                        order.agent_id = (await self.get_session(session_id)).agent_id
                    for delta in order.ready(queue):
                        yield delta
                if ahead is None:
                    await subscription.wait(WATCH_POLL_SECONDS)
                else:
                    await asyncio.sleep(0)

    def delta_queues(self, session_id: str) -> list[DeltaQueue]:
        """The delta queues of the session's watchers on this replica (for tests and diagnostics)."""
        return self._deltas.queues(session_id)


def _events_scope(session_id: str) -> str:
    """What a page token of the session's events is bound to."""
    return f"events/{session_id}"


def _drop(read: asyncio.Task[ClientPage] | None) -> None:
    """A read the watch no longer wants: cancelled, or its failure taken (else asyncio logs it as
    never retrieved, e.g. when the session lookup beside it failed for the same reason)."""
    if read is not None and not read.cancel() and not read.cancelled():
        read.exception()
