"""The client-facing SessionKernelService: protobuf in, domain calls, protobuf out.

Every call arrives authenticated, and a call naming a session only when the
session is the caller's project's (`controlplane.identity`); what is left to
scope here is what names no session: a new session's project and the listing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC

import grpc
import structlog

from astrabox.client import WATCH_ADMITTED
from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as pb
from astrabox.sessionkernel.v1 import session_kernel_service_pb2_grpc as pb_grpc
from astrabox.sessionkernel.v1 import session_pb2
from controlplane.conversation import Answer, Conversation, SendMessage
from controlplane.convert import (
    MAX_LIST_RESPONSE_BYTES,
    delta_to_proto,
    event_to_proto,
    events_into,
    session_to_proto,
    state_from_proto,
    watch_responses,
)
from controlplane.deltas import LiveDelta
from controlplane.errors import InvalidArgument, KernelError, Unimplemented
from controlplane.forks import Forks, ForkSession
from controlplane.identity import callers
from controlplane.journal import ClientPage
from controlplane.kernel import CreateSession, SessionKernel
from controlplane.listing import SessionFilter, session_filter
from controlplane.status import maps_errors, to_status
from controlplane.tool_grants import GrantScope
from controlplane.workspace import TerminalStart, WorkspaceFiles, drain

log = structlog.get_logger(__name__)


def _answer(request: pb.RespondToInteractionRequest) -> Answer:
    which = request.WhichOneof("answer")
    if which == "allow":
        grant = None
        if request.allow.HasField("grant"):
            scope = request.allow.grant
            expires = scope.expire_time.ToDatetime(tzinfo=UTC) if scope.HasField("expire_time") else None
            grant = GrantScope(scope.input_pattern, expires)
        return Answer("allow", updated_input_json=request.allow.updated_input_json, grant=grant)
    if which == "deny":
        return Answer("deny", message=request.deny.message)
    if which == "answers":
        return Answer("answers", answers=dict(request.answers.answers))
    if which == "tool_result":
        return Answer("tool_result", message=request.tool_result.content, is_error=request.tool_result.is_error)
    raise InvalidArgument("answer", "set one of allow, deny, answers or tool_result")


def _listing(request: pb.ListSessionsRequest) -> SessionFilter:
    states = []
    for number in request.states:
        state = state_from_proto(number)
        if state is None:
            raise InvalidArgument(
                "states", f"states holds {number}, which names no state: name the states to list, or none for all"
            )
        states.append(state)
    after = request.created_after.ToDatetime(tzinfo=UTC) if request.HasField("created_after") else None
    before = request.created_before.ToDatetime(tzinfo=UTC) if request.HasField("created_before") else None
    return dataclasses.replace(session_filter(states, request.label_selector, after, before), agent=request.agent)


class SessionKernelServicer(pb_grpc.SessionKernelServiceServicer):
    def __init__(
        self, kernel: SessionKernel, conversation: Conversation, workspace: WorkspaceFiles, forks: Forks | None = None
    ) -> None:
        self._kernel = kernel
        self._conversation = conversation
        self._workspace = workspace
        self._forks = forks

    async def _session(self, session_id: str) -> session_pb2.Session:
        return session_to_proto(await self._kernel.get_session(session_id))

    @maps_errors
    async def CreateSession(
        self, request: pb.CreateSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateSessionResponse:
        record = await self._kernel.create_session(
            CreateSession(
                request_id=request.request_id,
                project_id=callers.current().project_id,
                engine=request.engine,
                permission_mode=request.permission_mode,
                model=request.model,
                labels=dict(request.labels),
                agent=request.agent,
                agent_version=request.agent_version,
                environment=request.environment,
                environment_version=request.environment_version,
                git_source=request.git_source if request.HasField("git_source") else None,
                memory=list(request.memory),
            )
        )
        return pb.CreateSessionResponse(session=session_to_proto(record))

    @maps_errors
    async def ForkSession(
        self, request: pb.ForkSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.ForkSessionResponse:
        if self._forks is None:  # a servicer built without forks (some tests): none served
            raise Unimplemented("NOT_IMPLEMENTED", "ForkSession is not served by this servicer", "session_id")
        record = await self._forks.fork(
            ForkSession(
                session_id=request.session_id,
                request_id=request.request_id,
                project_id=callers.current().project_id,
                through_seq=request.through_seq,
                labels=dict(request.labels),
            )
        )
        return pb.ForkSessionResponse(session=session_to_proto(record))

    @maps_errors
    async def GetSession(
        self, request: pb.GetSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetSessionResponse:
        return pb.GetSessionResponse(session=await self._session(request.session_id))

    @maps_errors
    async def ListSessions(
        self, request: pb.ListSessionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSessionsResponse:
        records, token = await self._kernel.list_sessions(
            callers.current().project_id, request.page_size, request.page_token, _listing(request)
        )
        return pb.ListSessionsResponse(sessions=[session_to_proto(r) for r in records], next_page_token=token)

    @maps_errors
    async def SendMessage(
        self, request: pb.SendMessageRequest, context: grpc.aio.ServicerContext
    ) -> pb.SendMessageResponse:
        accepted = await self._conversation.send_message(
            SendMessage(
                session_id=request.session_id,
                client_message_id=request.client_message_id,
                text=request.text,
                permission_mode=request.permission_mode,
            )
        )
        return pb.SendMessageResponse(turn_id=accepted.turn_id, seq=accepted.seq)

    async def WatchSessionEvents(
        self, request: pb.WatchSessionEventsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.WatchSessionEventsResponse]:
        # Headers now, before any event: the client learns its watch is admitted even when no event
        # comes for a while (`AstraBoxClient.watch` counts how long it has failed to resume from there).
        await context.send_initial_metadata(((WATCH_ADMITTED, "admitted"),))
        most = request.max_events_per_response  # 0: one per response, in `event`, as before it existed
        content = not request.omit_content
        try:
            async for item in self._kernel.watch_runs(request.session_id, request.after_seq, request.include_deltas):
                if isinstance(item, LiveDelta):
                    yield pb.WatchSessionEventsResponse(delta=delta_to_proto(item))
                elif most > 0:
                    for response in watch_responses(item, most, content):
                        yield response
                else:
                    for event in item.events() if isinstance(item, ClientPage) else item:
                        yield pb.WatchSessionEventsResponse(event=event_to_proto(event, content=content))
        except KernelError as error:
            await context.abort_with_status(to_status(error))

    @maps_errors
    async def ListSessionEvents(
        self, request: pb.ListSessionEventsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSessionEventsResponse:
        events, token = await self._kernel.list_events(
            request.session_id, request.after_seq, request.page_size, request.page_token
        )
        response = pb.ListSessionEventsResponse(next_page_token=token)
        written = events_into(events, response.events, not request.omit_content, MAX_LIST_RESPONSE_BYTES)
        if written < len(events):  # the typed views took the response past its budget: the rest comes next
            response.next_page_token = self._kernel.events_page_token(request.session_id, response.events[-1].seq)
        return response

    @maps_errors
    async def InterruptTurn(
        self, request: pb.InterruptTurnRequest, context: grpc.aio.ServicerContext
    ) -> pb.InterruptTurnResponse:
        await self._conversation.interrupt(request.session_id, request.request_id)
        return pb.InterruptTurnResponse(session=await self._session(request.session_id))

    @maps_errors
    async def RespondToInteraction(
        self, request: pb.RespondToInteractionRequest, context: grpc.aio.ServicerContext
    ) -> pb.RespondToInteractionResponse:
        await self._conversation.respond(
            request.session_id, request.interaction_id, request.request_id, _answer(request)
        )
        return pb.RespondToInteractionResponse(session=await self._session(request.session_id))

    @maps_errors
    async def SetPermissionMode(
        self, request: pb.SetPermissionModeRequest, context: grpc.aio.ServicerContext
    ) -> pb.SetPermissionModeResponse:
        await self._conversation.set_permission_mode(request.session_id, request.permission_mode, request.request_id)
        return pb.SetPermissionModeResponse(session=await self._session(request.session_id))

    @maps_errors
    async def ArchiveSession(
        self, request: pb.ArchiveSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.ArchiveSessionResponse:
        record = await self._kernel.archive_session(request.session_id, request.request_id)
        return pb.ArchiveSessionResponse(session=session_to_proto(record))

    @maps_errors
    async def DeleteSession(
        self, request: pb.DeleteSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteSessionResponse:
        record = await self._kernel.delete_session(request.session_id, request.request_id)
        return pb.DeleteSessionResponse(session=session_to_proto(record))

    @maps_errors
    async def RevokeToolGrant(
        self, request: pb.RevokeToolGrantRequest, context: grpc.aio.ServicerContext
    ) -> pb.RevokeToolGrantResponse:
        await self._conversation.revoke_tool_grant(request.session_id, request.grant_id, request.request_id)
        return pb.RevokeToolGrantResponse(session=await self._session(request.session_id))

    @maps_errors
    async def StopBackgroundTask(
        self, request: pb.StopBackgroundTaskRequest, context: grpc.aio.ServicerContext
    ) -> pb.StopBackgroundTaskResponse:
        await self._conversation.stop_background_task(request.session_id, request.task_id, request.request_id)
        return pb.StopBackgroundTaskResponse(session=await self._session(request.session_id))

    async def UploadWorkspaceArchive(
        self, request_iterator: AsyncIterator[pb.UploadWorkspaceArchiveRequest], context: grpc.aio.ServicerContext
    ) -> pb.UploadWorkspaceArchiveResponse:
        try:
            first = await anext(request_iterator, None)
            if first is None or not first.session_id:
                raise InvalidArgument("session_id", "the first message of an upload names the session")

            async def chunks() -> AsyncIterator[bytes]:
                yield first.chunk
                async for message in request_iterator:
                    yield message.chunk

            written = await self._workspace.upload((first.session_id, first.path), chunks())
        except KernelError as error:
            await drain(request_iterator)
            await context.abort_with_status(to_status(error))
        return pb.UploadWorkspaceArchiveResponse(entries=written.entries, bytes=written.bytes)

    @maps_errors
    async def ListWorkspace(
        self, request: pb.ListWorkspaceRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListWorkspaceResponse:
        listing = await self._workspace.list(request.session_id, request.path)
        return pb.ListWorkspaceResponse(
            entries=[
                pb.WorkspaceEntry(name=e.name, type=e.type, size=e.size, mode=e.mode, modify_time=e.modify_time)
                for e in listing.entries
            ]
        )

    async def DownloadWorkspaceArchive(
        self, request: pb.DownloadWorkspaceArchiveRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.DownloadWorkspaceArchiveResponse]:
        try:
            async for chunk in self._workspace.download(request.session_id, request.path):
                yield pb.DownloadWorkspaceArchiveResponse(chunk=chunk)
        except KernelError as error:
            await context.abort_with_status(to_status(error))

    async def OpenTerminal(
        self, request_iterator: AsyncIterator[pb.OpenTerminalRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.OpenTerminalResponse]:
        try:
            first = await anext(request_iterator, None)
            if first is None or not first.session_id:
                raise InvalidArgument("session_id", "the first message of a terminal names the session")
            start = TerminalStart(first.session_id, first.command, first.term, first.size.rows, first.size.columns)

            async def inputs() -> AsyncIterator[runner_pb2.TerminalInput]:
                yield runner_pb2.TerminalInput(data=first.input)
                async for message in request_iterator:
                    yield runner_pb2.TerminalInput(
                        data=message.input, rows=message.size.rows, columns=message.size.columns
                    )

            async for output in self._workspace.terminal(start, inputs()):
                if output.exit_code is not None:
                    yield pb.OpenTerminalResponse(exit_code=output.exit_code)
                else:
                    yield pb.OpenTerminalResponse(output=output.stdout)
        except KernelError as error:
            await context.abort_with_status(to_status(error))

    async def RunCommand(
        self, request: pb.RunCommandRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.RunCommandResponse]:
        try:
            async for output in self._workspace.run(request.session_id, request.command, request.timeout_ms):
                if output.exit_code is not None:
                    yield pb.RunCommandResponse(exit_code=output.exit_code)
                elif output.stdout:
                    yield pb.RunCommandResponse(stdout=output.stdout)
                elif output.stderr:
                    yield pb.RunCommandResponse(stderr=output.stderr)
        except KernelError as error:
            await context.abort_with_status(to_status(error))
