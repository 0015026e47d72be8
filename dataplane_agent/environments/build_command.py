"""BuildLayer: the control plane asks for an environment's layer ahead of its sessions.

The build goes through the same layer store a session's start uses (one build per digest: a
command and a start for the same layer share it). Its steps go to the control plane as
BuildProgress on the stream — progress only, lost with the stream — and its outcome is the
command's acknowledgement: OK once the layer is ready (at once when it already was), else
FAILED_PRECONDITION with the package manager's own words."""

from __future__ import annotations

from collections.abc import Callable

import grpc

from astrabox.environments.v1 import environment_pb2 as env_pb
from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.environments.layers import BuildRequest, LayerStore
from dataplane_agent.environments.steps import LayerBuildError
from dataplane_agent.errors import CommandRefused

# Where progress goes (the relay's current stream; dropped when there is none).
ProgressSink = Callable[[env_pb.BuildProgress], None]


class LayerBuilds:
    """Applies BuildLayer commands with `layers` (None: this agent's driver builds none)."""

    def __init__(self, layers: LayerStore | None, agent_id: str, sink: ProgressSink) -> None:
        self._layers = layers
        self._agent_id = agent_id
        self._sink = sink

    async def build(self, command: pb.BuildLayer) -> None:
        """The layer is ready when this returns; CommandRefused (final) when it cannot be."""
        digest = command.build_digest

        def report(state: env_pb.BuildState, phase: str, message: str = "", percent: int = 0, error: str = "") -> None:
            progress = env_pb.BuildProgress(
                agent_id=self._agent_id,
                build_digest=digest,
                state=state,
                phase=phase,
                message=message[:1024],
                percent=percent,
                error=error,
            )
            progress.time.GetCurrentTime()
            self._sink(progress)

        async def building(phase: str, message: str, percent: int) -> None:
            report(env_pb.BUILD_STATE_BUILDING, phase, message, percent)

        try:
            request = BuildRequest.from_spec(digest, command.spec)
            if self._layers is None:
                raise LayerBuildError("check", "this agent's sandbox driver does not build environment layers")
            if not request.empty:
                await self._layers.ensure(request, building)
        except LayerBuildError as error:
            report(env_pb.BUILD_STATE_FAILED, error.phase, error=str(error))
            raise CommandRefused(
                grpc.StatusCode.FAILED_PRECONDITION, f"the layer could not be built: {error}"
            ) from None
        report(env_pb.BUILD_STATE_READY, "ready", "the layer is ready", 100)
