"""What a failure nobody foresaw looks like to a caller: INTERNAL with a reference, nothing more;
the details are in the log under that reference. Checked on a real gRPC server with the edge
interceptor and a servicer whose every method fails the way a database driver might."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from structlog.testing import capture_logs

from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as pb
from astrabox.sessionkernel.v1 import session_kernel_service_pb2_grpc as pb_grpc
from controlplane.edge import Edge

SERVICE = pb.DESCRIPTOR.services_by_name["SessionKernelService"]
SECRET = "relation sessions: password=hunter2"
SESSION_ID = "8c3e2a38-7f8b-4f7e-9d7b-9a0b6e0f0e0e"


class Failing(pb_grpc.SessionKernelServiceServicer):
    async def GetSession(self, request, context):
        raise RuntimeError(SECRET)

    async def WatchSessionEvents(self, request, context):
        yield pb.WatchSessionEventsResponse()
        raise RuntimeError(SECRET)

    async def UploadWorkspaceArchive(self, request_iterator, context):
        async for _ in request_iterator:
            raise RuntimeError(SECRET)


async def test_an_unforeseen_failure_is_internal_with_only_a_reference() -> None:
    server = grpc.aio.server(interceptors=[Edge(SERVICE.full_name)])
    pb_grpc.add_SessionKernelServiceServicer_to_server(Failing(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.SessionKernelServiceStub(channel)

            async def watch() -> None:
                async for _ in stub.WatchSessionEvents(pb.WatchSessionEventsRequest(session_id=SESSION_ID)):
                    pass

            calls = {
                "GetSession": lambda: stub.GetSession(pb.GetSessionRequest(session_id=SESSION_ID)),
                "WatchSessionEvents": watch,
                "UploadWorkspaceArchive": lambda: stub.UploadWorkspaceArchive(
                    iter([pb.UploadWorkspaceArchiveRequest(session_id=SESSION_ID, chunk=b"x")] * 3)
                ),
            }
            for name, call in calls.items():
                with capture_logs() as logs, pytest.raises(grpc.aio.AioRpcError) as failed:
                    await asyncio.wait_for(call(), 10)
                error = failed.value
                info = error_details_pb2.ErrorInfo()
                assert rpc_status.from_call(error).details[0].Unpack(info)  # type: ignore[arg-type]
                ref = info.metadata["ref"]
                assert (error.code(), info.reason) == (grpc.StatusCode.INTERNAL, "INTERNAL"), name
                assert error.details() == f"internal error (ref {ref})"
                [logged] = [entry for entry in logs if entry["event"] == "rpc_failed"]
                assert logged["ref"] == ref and logged["method"].endswith(f"/{name}")
                assert SECRET in str(logged["exc_info"])  # the details stay on this side
    finally:
        await server.stop(0)
