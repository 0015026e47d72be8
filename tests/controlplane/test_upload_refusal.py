"""A refused upload answers with its own code and reason, however much the client was still sending.

gRPC turns a client's write into a stream the server has closed into INTERNAL ("Internal error from
Core"); seen end to end as about one upload in six of a 30 MB archive to a bad path. So the server
reads the rest of a refused upload before it answers: checked here on the real servicer, counting
what it read."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as pb
from controlplane.api import SessionKernelServicer
from controlplane.kernel import CreateSession
from controlplane.quotas import Quotas
from controlplane.workspace import WorkspaceFiles, WorkspaceRouter


class Aborted(Exception):
    pass


class Context:
    """What the servicer needs of a call's context: the status it ends with."""

    status: grpc.Status | None = None

    async def abort_with_status(self, status: grpc.Status) -> None:
        self.status = status
        raise Aborted


async def test_a_refused_upload_is_read_to_its_end_before_the_refusal(plane) -> None:
    await plane.connect_agent()
    session = await plane.kernel.create_session(CreateSession(request_id="upload-refused", project_id=plane.project_id))
    await plane.runtime_started(session.session_id)
    servicer = SessionKernelServicer(
        plane.kernel, plane.conversation, WorkspaceFiles(plane.kernel, WorkspaceRouter(), Quotas(plane.pool))
    )
    read = 0

    async def messages() -> AsyncIterator[pb.UploadWorkspaceArchiveRequest]:
        nonlocal read
        read += 1
        yield pb.UploadWorkspaceArchiveRequest(session_id=session.session_id, path="../outside", chunk=b"x")
        for _ in range(49):
            read += 1
            yield pb.UploadWorkspaceArchiveRequest(chunk=b"y" * 1024)

    context = Context()
    with pytest.raises(Aborted):
        await servicer.UploadWorkspaceArchive(messages(), context)  # type: ignore[arg-type]

    assert context.status is not None and context.status.code is grpc.StatusCode.INVALID_ARGUMENT
    assert "climbs out of the workspace" in context.status.details
    assert read == 50  # every message the client sent was read before the answer
