"""A small async client for the AstraBox SessionKernelService.

    async with AstraBoxClient.connect("127.0.0.1:7700", api_key=key) as client:
        session = await client.start_session()           # a SessionHandle, READY
        turn = await session.send("Write a haiku")
        print((await turn.result()).text)

The handle (`astrabox.sessions`) and its typed events (`astrabox.events`,
`astrabox.messages`) are the comfortable way; the methods below, one per RPC
and taking the session's id, are what the handle calls, and return the
protobuf messages as the server sent them:

    session = await client.create_session()
    await client.wait_for_state(session.session_id, ["READY"], timeout=60)
    await client.send_message(session.session_id, "Write a haiku")
    async for event in client.watch(session.session_id):
        print(event.seq, EventKind.Name(event.kind))

Every failed RPC raises `AstraBoxError` (code, reason, message). Calls that
may be repeated (reads, and commands carrying a request id) are retried while
the server or its database is unavailable, within the call's `timeout`. `watch`
survives server and database restarts and dropped streams: it resumes after
the last event it delivered, so its caller sees every seq exactly once and in
order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Collection, Generator, Mapping
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar, cast, overload

import grpc

from astrabox._watch_stream import WATCH_ADMITTED as WATCH_ADMITTED  # a public name of this module too
from astrabox._watch_stream import WATCH_GIVE_UP_AFTER, watch_events
from astrabox._workspace_calls import DEFAULT_COMMAND_TIMEOUT as DEFAULT_COMMAND_TIMEOUT  # public names here too
from astrabox._workspace_calls import TRANSFER_TIMEOUTS as TRANSFER_TIMEOUTS
from astrabox._workspace_calls import UPLOAD_CHUNK as UPLOAD_CHUNK
from astrabox._workspace_calls import CommandResult, WorkspaceCalls
from astrabox.administration import Admin
from astrabox.agent_definitions import AgentDefinitions
from astrabox.backoff import Backoff
from astrabox.credentials import default_api_key
from astrabox.environment_definitions import EnvironmentDefinitions
from astrabox.errors import AstraBoxError, SessionStateError
from astrabox.events import Delta
from astrabox.memory_stores import MemoryStores
from astrabox.retries import within_deadline
from astrabox.scheduling import Schedules
from astrabox.sessionkernel.v1 import events_pb2, session_pb2
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as api
from astrabox.sessionkernel.v1 import session_kernel_service_pb2_grpc as api_grpc
from astrabox.sessions import SessionHandle
from astrabox.stored_credentials import Credentials
from astrabox.trace_context import trace_interceptors
from astrabox.webhook_subscriptions import Webhooks

__all__ = ["AstraBoxClient", "AstraBoxError", "Backoff", "CommandResult", "SessionStateError"]

log = logging.getLogger(__name__)

# Short names of the protobuf types the methods take and return.
Session = session_pb2.Session
SessionEvent = events_pb2.SessionEvent
EventKind = events_pb2.EventKind
SessionState = session_pb2.SessionState

API_KEY_METADATA = "authorization"
"""Metadata key that carries `Bearer <api key>`."""

_GIVE_UP_STATES = (SessionState.SESSION_STATE_FAILED, SessionState.SESSION_STATE_DELETED)

R = TypeVar("R")


def _session_state(state: int | str) -> session_pb2.SessionState:
    """A SessionState from its value or its name, with or without the SESSION_STATE_ prefix, in
    any case ("READY", "ready", "SESSION_STATE_READY"); ValueError for anything else."""
    name = session_pb2.SessionState.Name(state) if isinstance(state, int) else state.strip().upper()
    try:
        value = session_pb2.SessionState.Value("SESSION_STATE_" + name.removeprefix("SESSION_STATE_"))
    except ValueError:
        names = ", ".join(n.removeprefix("SESSION_STATE_").lower() for n in session_pb2.SessionState.keys()[1:])
        raise ValueError(f"{state!r} is no session state; one of {names}") from None
    # protoc's stubs give `Value()` a plain int, not the enum's own type (at run time both are ints).
    return cast(session_pb2.SessionState, value)


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


# The largest message the client takes (unless `connect(options=...)` says otherwise): one event may
# be as large as the largest output an agent can relay (32 MiB), and PostgreSQL may render its JSON
# somewhat longer than it was written; gRPC's default, 4 MiB, would refuse a session's watch and
# listing at its first large event (an image a tool read, say) with RESOURCE_EXHAUSTED.
MAX_RECEIVE_BYTES = 64 * 1024 * 1024
_MAX_RECEIVE_OPTION = "grpc.max_receive_message_length"


class AstraBoxClient(WorkspaceCalls):
    """A connection to one AstraBox control plane.

    Build it with `connect()`; use it as an async context manager, or call
    `close()`. Calls other than `watch` fail after `timeout` seconds; within
    them, one that may be repeated is retried with the `reconnect` backoff
    while the server answers UNAVAILABLE because it, or its database, is away.
    """

    def __init__(
        self,
        channel: grpc.aio.Channel,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        reconnect: Backoff = Backoff(),
    ) -> None:
        self._channel = channel
        # The generated gRPC stub carries no annotations.
        self._stub = api_grpc.SessionKernelServiceStub(channel)  # type: ignore[no-untyped-call]
        if api_key is None:
            api_key = default_api_key()
        self._metadata = ((API_KEY_METADATA, f"Bearer {api_key}"),) if api_key else ()
        self._timeout = timeout
        self.admin = Admin(channel, self._unary)
        """AdminService: `whoami`, projects and API keys (`astrabox.administration`)."""
        self.agents = AgentDefinitions(channel, self._unary)
        """AgentService: agent definitions and their versions (`astrabox.agent_definitions`)."""
        self.credentials = Credentials(channel, self._unary)
        """CredentialService: the project's stored secrets (`astrabox.stored_credentials`)."""
        self.environments = EnvironmentDefinitions(channel, self._unary, self._metadata)
        """EnvironmentService: environments and their versions (`astrabox.environment_definitions`)."""
        self.webhooks = Webhooks(channel, self._unary)
        """WebhookService: the project's webhooks and their deliveries (`astrabox.webhook_subscriptions`)."""
        self.schedules = Schedules(channel, self._unary)
        """ScheduleService: cron schedules and their runs (`astrabox.scheduling`)."""
        self.memory = MemoryStores(channel, self._unary)
        """MemoryService: memory stores of versioned documents sessions attach (`astrabox.memory_stores`)."""
        self._reconnect = reconnect

    @classmethod
    def connect(
        cls,
        target: str,
        *,
        api_key: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        timeout: float = 30.0,
        reconnect: Backoff = Backoff(),
        options: Collection[tuple[str, Any]] = (),
    ) -> AstraBoxClient:
        """A client for `target` ("host:port"); TLS when `credentials` are given.

        `api_key` None: the key from the environment or the config file
        (`astrabox.credentials.default_api_key`); "": none.

        The connection is made lazily by the first call. `await connect(...)`
        works as well as `async with connect(...) as client`.
        """
        channel_options = [
            # Let the channel itself come back as quickly as `reconnect` says.
            ("grpc.initial_reconnect_backoff_ms", int(reconnect.initial * 1000)),
            ("grpc.min_reconnect_backoff_ms", int(reconnect.initial * 1000)),
            ("grpc.max_reconnect_backoff_ms", int(reconnect.maximum * 1000)),
            *options,
        ]
        if not any(name == _MAX_RECEIVE_OPTION for name, _ in channel_options):
            channel_options.append((_MAX_RECEIVE_OPTION, MAX_RECEIVE_BYTES))
        # Every call carries the caller's current OpenTelemetry span, when there is one.
        interceptors = trace_interceptors()
        if credentials is None:
            channel = grpc.aio.insecure_channel(target, options=channel_options, interceptors=interceptors)
        else:
            channel = grpc.aio.secure_channel(target, credentials, options=channel_options, interceptors=interceptors)
        return cls(channel, api_key=api_key, timeout=timeout, reconnect=reconnect)

    def __await__(self) -> Generator[Any, None, AstraBoxClient]:
        async def itself() -> AstraBoxClient:
            return self

        return itself().__await__()

    async def __aenter__(self) -> AstraBoxClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the connection; open watches end with an error."""
        await self._channel.close()

    # Sessions

    def session(self, session_id: str) -> SessionHandle:
        """A handle on the session `session_id` (no call is made until the handle is used)."""
        return SessionHandle(self, session_id)

    async def start_session(
        self, request_id: str | None = None, *, ready_timeout: float = 120.0, **options: Any
    ) -> SessionHandle:
        """Creates a session, waits until it is READY (it takes messages from then on) and returns its handle.

        `request_id` and `options` as for `create_session`. Raises
        `SessionStateError` if it fails to start and `TimeoutError` if it is
        not ready within `ready_timeout` seconds.
        """
        session = await self.create_session(request_id, **options)
        await self.wait_for_state(session.session_id, ["READY"], timeout=ready_timeout)
        return SessionHandle(self, session.session_id)

    async def create_session(self, request_id: str | None = None, **options: Any) -> Session:
        """Creates a session (idempotent on `request_id`, a new uuid4 by default).

        `options` are CreateSessionRequest fields: engine, permission_mode,
        model, labels, agent (an agent definition's name or id),
        agent_version (0: its newest), environment (an environment's name or
        id), environment_version (0: its newest) and git_source (a GitSource,
        or a dict of url, ref, directory: a git repository cloned into the
        workspace before the first turn; None for none) and memory (a list of
        `astrabox.memory_stores.attach(store, mode)`: memory stores whose
        documents are in the sandbox under /home/agent/memory/<store>/).
        """
        request = api.CreateSessionRequest(request_id=request_id or _new_id(), **options)
        return await self._session_of(self._stub.CreateSession, request)

    async def get_session(self, session_id: str) -> Session:
        """Returns the session."""
        return await self._session_of(self._stub.GetSession, api.GetSessionRequest(session_id=session_id))

    async def list_sessions(
        self,
        page_size: int = 0,
        page_token: str = "",
        *,
        states: Collection[int | str] = (),
        label_selector: str = "",
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        agent: str = "",
    ) -> api.ListSessionsResponse:
        """One page of sessions, newest first, and the token of the next page (to be sent with the
        same filters). `states`: SessionState values or their names ("READY" or "ready"); empty:
        every state but DELETED. `label_selector`: `key=value`, `key!=value`, `key`, `!key`,
        comma-separated, all of which must hold. `created_after` (inclusive) and `created_before`
        (exclusive) bound the creation time (a naive datetime is taken as UTC)."""
        request = api.ListSessionsRequest(
            page_size=page_size,
            page_token=page_token,
            states=[_session_state(state) for state in states],
            label_selector=label_selector,
            agent=agent,
        )
        if created_after is not None:
            request.created_after.FromDatetime(_utc(created_after))
        if created_before is not None:
            request.created_before.FromDatetime(_utc(created_before))
        return await self._unary(self._stub.ListSessions, request)

    async def iter_sessions(self, page_size: int = 0, **filters: Any) -> AsyncIterator[Session]:
        """Every session `filters` (list_sessions' keyword arguments) select, newest first, fetching
        page after page."""
        token = ""
        while True:
            page = await self.list_sessions(page_size=page_size, page_token=token, **filters)
            for session in page.sessions:
                yield session
            if not (token := page.next_page_token):
                return

    async def interrupt_turn(self, session_id: str, request_id: str | None = None) -> Session:
        """Asks the running turn to stop."""
        request = api.InterruptTurnRequest(session_id=session_id, request_id=request_id or _new_id())
        return await self._session_of(self._stub.InterruptTurn, request)

    async def set_permission_mode(
        self, session_id: str, permission_mode: str, request_id: str | None = None
    ) -> Session:
        """Changes the engine's permission mode for the following turns."""
        request = api.SetPermissionModeRequest(
            session_id=session_id, permission_mode=permission_mode, request_id=request_id or _new_id()
        )
        return await self._session_of(self._stub.SetPermissionMode, request)

    async def stop_background_task(self, session_id: str, task_id: str, request_id: str | None = None) -> Session:
        """Asks the engine to stop one of the session's background tasks."""
        request = api.StopBackgroundTaskRequest(
            session_id=session_id, task_id=task_id, request_id=request_id or _new_id()
        )
        return await self._session_of(self._stub.StopBackgroundTask, request)

    async def revoke_tool_grant(self, session_id: str, grant_id: str, request_id: str | None = None) -> Session:
        """Revokes a tool grant (Session.tool_grants): later calls of its tool ask again."""
        request = api.RevokeToolGrantRequest(
            session_id=session_id, grant_id=grant_id, request_id=request_id or _new_id()
        )
        return await self._session_of(self._stub.RevokeToolGrant, request)

    async def archive_session(self, session_id: str, request_id: str | None = None) -> Session:
        """Releases the session's sandbox; its history stays readable."""
        request = api.ArchiveSessionRequest(session_id=session_id, request_id=request_id or _new_id())
        return await self._session_of(self._stub.ArchiveSession, request)

    async def fork_session(
        self,
        session_id: str,
        through_seq: int = 0,
        request_id: str | None = None,
        *,
        labels: Mapping[str, str] | None = None,
        timeout: float = 330.0,
    ) -> Session:
        """A new session with `session_id`'s conversation through the turn that ended at event
        `through_seq` (0: its last completed turn) and its workspace's files as they are now; READY
        when returned (FAILED if it could not start). Idempotent on `request_id` (a new uuid4 by
        default). `labels`: the new session's (none: the source's). The call waits for the new
        session's runtime, within `timeout` seconds."""
        request = api.ForkSessionRequest(
            session_id=session_id, request_id=request_id or _new_id(), through_seq=through_seq, labels=labels or {}
        )

        async def attempt(seconds_left: float) -> Session:
            response = await self._stub.ForkSession(request, timeout=seconds_left, metadata=self._metadata)
            session: Session = response.session
            return session

        return await within_deadline(attempt, timeout=timeout, backoff=self._reconnect)

    async def delete_session(self, session_id: str, request_id: str | None = None) -> Session:
        """Deletes the session and its sandbox."""
        request = api.DeleteSessionRequest(session_id=session_id, request_id=request_id or _new_id())
        return await self._session_of(self._stub.DeleteSession, request)

    # Turns

    async def send_message(
        self,
        session_id: str,
        text: str,
        client_message_id: str | None = None,
        permission_mode: str = "",
    ) -> api.SendMessageResponse:
        """Sends a user message; the response names the turn it opened and its seq.

        Idempotent on `client_message_id` (a new uuid4 by default).
        """
        request = api.SendMessageRequest(
            session_id=session_id,
            client_message_id=client_message_id or _new_id(),
            text=text,
            permission_mode=permission_mode,
        )
        return await self._unary(self._stub.SendMessage, request)

    async def respond_to_interaction(
        self,
        session_id: str,
        interaction_id: str,
        *,
        allow: bool = False,
        updated_input_json: str = "",
        deny: str | None = None,
        answers: Mapping[str, str] | None = None,
        tool_result: str | None = None,
        is_error: bool = False,
        grant: bool = False,
        grant_pattern: str = "",
        grant_until: datetime | None = None,
        request_id: str | None = None,
    ) -> Session:
        """Answers an interaction: exactly one of `allow=True`, `deny="why"`, `answers={...}`,
        `tool_result="..."` (a custom tool's result, INTERACTION_KIND_CUSTOM_TOOL; `is_error=True`:
        the tool failed, and the model reads the text as its error).

        With `allow`, `grant=True` also lets later calls of the tool run without asking (a tool
        grant, listed on the session): only those whose main input matches `grant_pattern` (a
        glob; empty: all), until `grant_until` (None: for the rest of the session)."""
        if (allow, deny is not None, answers is not None, tool_result is not None).count(True) != 1:
            raise ValueError("give exactly one of allow=True, deny=message, answers=mapping or tool_result=text")
        if is_error and tool_result is None:
            raise ValueError("is_error goes with tool_result")
        if (grant_pattern or grant_until) and not grant:
            raise ValueError("grant_pattern and grant_until need grant=True")
        if grant and not allow:
            raise ValueError("only allow=True can grant later calls")
        request = api.RespondToInteractionRequest(
            session_id=session_id, interaction_id=interaction_id, request_id=request_id or _new_id()
        )
        if allow:
            request.allow.updated_input_json = updated_input_json
            if grant:
                request.allow.grant.input_pattern = grant_pattern
                request.allow.grant.SetInParent()
                if grant_until is not None:
                    request.allow.grant.expire_time.FromDatetime(grant_until)
        elif deny is not None:
            request.deny.message = deny
        elif tool_result is not None:
            request.tool_result.content = tool_result
            request.tool_result.is_error = is_error
        else:
            request.answers.answers.update(answers or {})
        return await self._session_of(self._stub.RespondToInteraction, request)

    # Events

    async def list_events(
        self, session_id: str, after_seq: int = 0, page_size: int = 0, page_token: str = ""
    ) -> api.ListSessionEventsResponse:
        """One page of stored events after `after_seq` (or after `page_token`)."""
        request = api.ListSessionEventsRequest(  # the typed view left out: the SDK reads payload_json itself
            session_id=session_id, after_seq=after_seq, page_size=page_size, page_token=page_token, omit_content=True
        )
        return await self._unary(self._stub.ListSessionEvents, request)

    async def iter_events(
        self, session_id: str, after_seq: int = 0, page_size: int = 0
    ) -> AsyncGenerator[SessionEvent, None]:
        """Every event stored now after `after_seq`, page after page; then it ends."""
        token = ""
        while True:
            page = await self.list_events(session_id, after_seq=after_seq, page_size=page_size, page_token=token)
            for event in page.events:
                yield event
            if not (token := page.next_page_token):
                return

    @overload
    def watch(
        self,
        session_id: str,
        after_seq: int = 0,
        *,
        give_up_after: float | None = WATCH_GIVE_UP_AFTER,
        deltas: Literal[False] = False,
    ) -> AsyncGenerator[SessionEvent, None]: ...

    @overload
    def watch(
        self, session_id: str, after_seq: int = 0, *, give_up_after: float | None = WATCH_GIVE_UP_AFTER, deltas: bool
    ) -> AsyncGenerator[SessionEvent | Delta, None]: ...

    def watch(
        self,
        session_id: str,
        after_seq: int = 0,
        *,
        give_up_after: float | None = WATCH_GIVE_UP_AFTER,
        deltas: bool = False,
    ) -> AsyncGenerator[SessionEvent | Delta, None]:
        """Every event after `after_seq`, stored then live, each seq exactly once.

        With `deltas`, also `Delta`s (text as the engine writes it) of messages
        not yet complete, interleaved with the events; live only: after a
        resumption only those written since.

        Runs until the caller stops iterating. A stream that fails with
        UNAVAILABLE (server or database restarting, connection lost), ABORTED,
        is cancelled by the server, is reset on the way, ends, or skips a seq is
        re-opened after the last delivered event, with the `reconnect` backoff
        (exponential, with jitter). Other errors raise `AstraBoxError`, and so
        does the last of these once the watch has failed to resume for
        `give_up_after` seconds in a row (None: it never gives up): from the
        first failure until the server admits a stream again or an event comes.
        """
        return watch_events(self._stub, self._metadata, self._reconnect, session_id, after_seq, give_up_after, deltas)

    async def wait_for_state(
        self,
        session_id: str,
        states: Collection[int | str] | int | str,
        timeout: float = 60.0,
        *,
        poll_interval: float = 1.0,
    ) -> Session:
        """Waits until the session is in one of `states` and returns it.

        States are SessionState values or names ("READY" or
        "SESSION_STATE_READY"). The session is re-read whenever new events
        arrive (and every `poll_interval` seconds). Raises `TimeoutError`
        after `timeout` seconds, and `SessionStateError` when the session is
        FAILED or DELETED and that is not one of `states`.
        """
        wanted = {_state_value(s) for s in ([states] if isinstance(states, int | str) else states)}
        changed = asyncio.Event()
        session = await self.get_session(session_id)

        async def follow() -> None:
            try:
                async for _ in self.watch(session_id, after_seq=session.last_seq):
                    changed.set()
            except AstraBoxError as error:
                log.debug("wait_for_state falls back to polling: %s", error)

        follower = asyncio.create_task(follow())
        try:
            async with asyncio.timeout(timeout):
                while session.state not in wanted:
                    if session.state in _GIVE_UP_STATES:
                        raise SessionStateError(
                            f"session {session_id} is {SessionState.Name(session.state)}"
                            + (f": {session.failure_reason}" if session.failure_reason else ""),
                            session=session,
                        )
                    changed.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(poll_interval):
                            await changed.wait()
                    session = await self.get_session(session_id)
                return session
        except TimeoutError:
            raise TimeoutError(
                f"session {session_id} still {SessionState.Name(session.state)} after {timeout}s"
            ) from None
        finally:
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)

    async def _session_of(self, method: Callable[..., Awaitable[Any]], request: Any) -> Session:
        """The session a call answers with (the generated stubs carry no types: named here)."""
        session: Session = (await self._unary(method, request)).session
        return session

    async def _unary(self, method: Callable[..., Awaitable[R]], request: Any, *, idempotent: bool = True) -> R:
        """One call with the client's key, within its `timeout`. An `idempotent` one (a read, or a command
        whose request id makes a repeat harmless) is made again while the server answers UNAVAILABLE for
        being, or having its database, away; the last error is raised once the deadline leaves no room
        for the next pause."""

        async def attempt(seconds_left: float) -> R:
            return await method(request, timeout=seconds_left, metadata=self._metadata)

        return await within_deadline(attempt, timeout=self._timeout, backoff=self._reconnect, idempotent=idempotent)


def _new_id() -> str:
    return str(uuid.uuid4())


def _state_value(state: int | str) -> int:
    if isinstance(state, int):
        return state
    name = state.upper()
    return SessionState.Value(name if name.startswith("SESSION_STATE_") else f"SESSION_STATE_{name}")
