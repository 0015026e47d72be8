"""What a failure nobody foresaw looks like to a caller: INTERNAL with a reference, nothing more;
the details are in the log under that reference. And a fault of the database: UNAVAILABLE (ABORTED
for a conflict) with a reason and nothing of the fault's text. Checked on a real gRPC server with the
edge interceptor and servicers whose methods fail the way a database driver does."""

from __future__ import annotations

import asyncio

import asyncpg
import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from structlog.testing import capture_logs

from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as pb
from astrabox.sessionkernel.v1 import session_kernel_service_pb2_grpc as pb_grpc
from controlplane.edge import Edge
from controlplane.status import error_info

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


ADDRESS = "10.11.12.13"
# What the database's driver raises while it is away, and what a caller is told instead.
DATABASE_FAULTS = [
    (ConnectionRefusedError(111, f"Connect call failed ('{ADDRESS}', 5432)"), grpc.StatusCode.UNAVAILABLE),
    (OSError(113, f"Connect call failed ('{ADDRESS}', 5432)"), grpc.StatusCode.UNAVAILABLE),
    (TimeoutError(), grpc.StatusCode.UNAVAILABLE),
    (asyncpg.PostgresConnectionError(f"could not reach {ADDRESS}"), grpc.StatusCode.UNAVAILABLE),
    (asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed"), grpc.StatusCode.UNAVAILABLE),
    (asyncpg.InterfaceError("pool is closed"), grpc.StatusCode.UNAVAILABLE),
    (asyncpg.exceptions.InternalClientError("cannot switch to state 12"), grpc.StatusCode.UNAVAILABLE),
    (asyncpg.exceptions.CannotConnectNowError("the database system is starting up"), grpc.StatusCode.UNAVAILABLE),
    (asyncpg.exceptions.AdminShutdownError("terminating connection"), grpc.StatusCode.UNAVAILABLE),
    (asyncpg.exceptions.TooManyConnectionsError("too many clients"), grpc.StatusCode.UNAVAILABLE),
    (asyncpg.exceptions.SerializationError("could not serialize access"), grpc.StatusCode.ABORTED),
    (asyncpg.exceptions.DeadlockDetectedError("deadlock detected"), grpc.StatusCode.ABORTED),
]


class DatabaseAway(pb_grpc.SessionKernelServiceServicer):
    def __init__(self, fault: Exception) -> None:
        self.fault = fault

    async def GetSession(self, request, context):
        raise self.fault

    async def WatchSessionEvents(self, request, context):
        yield pb.WatchSessionEventsResponse()
        raise self.fault


@pytest.mark.parametrize(("fault", "code"), DATABASE_FAULTS, ids=[type(fault).__name__ for fault, _ in DATABASE_FAULTS])
async def test_a_database_fault_is_unavailable_or_aborted_with_a_reason_and_never_its_text(fault, code) -> None:
    server = grpc.aio.server(interceptors=[Edge(SERVICE.full_name)])
    pb_grpc.add_SessionKernelServiceServicer_to_server(DatabaseAway(fault), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    reason = "DATABASE_UNAVAILABLE" if code is grpc.StatusCode.UNAVAILABLE else "DATABASE_CONFLICT"
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.SessionKernelServiceStub(channel)

            async def watch() -> None:
                async for _ in stub.WatchSessionEvents(pb.WatchSessionEventsRequest(session_id=SESSION_ID)):
                    pass

            for call in (lambda: stub.GetSession(pb.GetSessionRequest(session_id=SESSION_ID)), watch):
                with capture_logs() as logs, pytest.raises(grpc.aio.AioRpcError) as failed:
                    await asyncio.wait_for(call(), 10)
                info = error_info(failed.value)
                assert (failed.value.code(), info and info.reason) == (code, reason)
                assert ADDRESS not in failed.value.details()
                assert not str(fault) or str(fault) not in failed.value.details()
                assert "retry" in failed.value.details()
                # Logged in one line, with what it was: a fault of the database, not a bug to trace.
                assert [entry["event"] for entry in logs] in (["database_unavailable"], ["database_conflict"])
                assert "exc_info" not in logs[0]
    finally:
        await server.stop(0)
