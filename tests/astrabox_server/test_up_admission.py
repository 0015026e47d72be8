"""`astrabox up` lets in its own agent and no one else's: its enrollment token is random and
private, never empty, and an agent with it still waits to be admitted (issue 27)."""

from __future__ import annotations

import secrets
import stat

import grpc

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from astrabox.runner.v1 import runner_service_pb2_grpc as runner_grpc
from astrabox.testing import LocalStack
from controlplane.status import error_info
from serverkit import versions


async def hello(address: str, agent_id: str, token: str) -> tuple[str, str] | str:
    """The first answer to a Hello: "welcome", or the refusal's (code name, reason)."""
    request = runner_pb2.ConnectRequest(
        hello=runner_pb2.Hello(
            agent_id=agent_id,
            agent_credential=secrets.token_urlsafe(32),
            enrollment_token=token,
            instance_id="rogue",
            capacity=64,
            agent_version=versions.VERSION,
        )
    )
    async with grpc.aio.insecure_channel(address) as channel:
        call = runner_grpc.RunnerServiceStub(channel).Connect(iter([request]))
        try:
            first = await call.read()
        except grpc.aio.AioRpcError as error:
            info = error_info(error)
            return error.code().name, info.reason if info else ""
        finally:
            call.cancel()
    return first.WhichOneof("message")


async def test_up_refuses_an_empty_token_and_keeps_a_tokened_stranger_pending() -> None:
    async with LocalStack() as stack:
        token_file = stack.data_dir / "enrollment-token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = token_file.read_text().strip()
        assert len(token) >= 40
        assert token not in stack.log_path.read_text()

        # Any local user reaching 127.0.0.1 with no token, or a guessed one: refused outright.
        for guess in ("", "guess"):
            assert await hello(stack.address, f"rogue-{guess or 'empty'}", guess) == (
                "UNAUTHENTICATED",
                "ENROLLMENT_TOKEN_INVALID",
            )
        # With the token: enrolled, but pending, so given nothing.
        assert await hello(stack.address, "rogue-tokened", token) == ("PERMISSION_DENIED", "AGENT_PENDING_ADMISSION")

        agents = {a.agent_id: a for a in await stack.client.admin.list_agents()}
        assert set(agents) == {"local", "rogue-tokened"}
        # The stack's own agent was admitted by a join token minted for it; the stranger was not.
        assert agents["local"].admitted_by.startswith("join:")
        assert not agents["rogue-tokened"].HasField("admit_time")
        # And the stack's sessions run on its own agent.
        session = await stack.client.start_session(ready_timeout=120)
        status = await stack.client.admin.get_status()
        [local] = [a for a in status.agents if a.agent_id == "local"]
        assert local.placed_sessions == 1 and session.id
