"""EnvironmentService: protobuf in, `EnvironmentDefinitions` calls within the caller's project,
protobuf out.

Like AgentService its requests are bounded here and in `specs`, not by the edge's table of fields
(`controlplane.validation.FIELDS`): a spec's fields have meanings of their own, and a refusal names
the spec's field by its path. BuildEnvironment queues the version's layer build on the agents and
streams their progress (`builds`); a control plane made without builds answers UNIMPLEMENTED. A
version with nothing to build (an empty build digest) has no layer: its stream ends at once, without
a step, and no agent is asked.
"""

from __future__ import annotations

import grpc

from astrabox.environments.v1 import environment_pb2 as epb
from astrabox.environments.v1 import environment_service_pb2 as pb
from astrabox.environments.v1 import environment_service_pb2_grpc as pb_grpc
from controlplane.convert import timestamp
from controlplane.environments.builds import EnvironmentBuilds
from controlplane.environments.definitions import EnvironmentDefinitions, EnvironmentRecord, EnvironmentVersionRecord
from controlplane.errors import KernelError, Unimplemented
from controlplane.identity import callers
from controlplane.status import maps_errors, to_status

BUILDS_NOT_SERVED = "NOT_IMPLEMENTED"


def environment_to_proto(record: EnvironmentRecord) -> epb.Environment:
    return epb.Environment(
        environment_id=record.environment_id,
        name=record.name,
        project_id=str(record.project_id),
        latest_version=record.latest_version,
        archived=record.archived,
        create_time=timestamp(record.created_at),
        update_time=timestamp(record.updated_at),
    )


def version_to_proto(record: EnvironmentVersionRecord) -> epb.EnvironmentVersion:
    return epb.EnvironmentVersion(
        environment_id=record.environment_id,
        version=record.version,
        spec=record.spec,
        spec_digest=record.spec_digest,
        build_digest=record.build_digest,
        create_time=timestamp(record.created_at),
    )


class EnvironmentServicer(pb_grpc.EnvironmentServiceServicer):
    def __init__(self, definitions: EnvironmentDefinitions, builds: EnvironmentBuilds | None = None) -> None:
        self._builds = builds
        self._definitions = definitions

    @maps_errors
    async def CreateEnvironment(
        self, request: pb.CreateEnvironmentRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateEnvironmentResponse:
        environment, version = await self._definitions.create(
            callers.current().project_id, request.request_id, request.name, request.spec
        )
        return pb.CreateEnvironmentResponse(
            environment=environment_to_proto(environment), version=version_to_proto(version)
        )

    @maps_errors
    async def GetEnvironment(
        self, request: pb.GetEnvironmentRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetEnvironmentResponse:
        environment, version = await self._definitions.get(
            callers.current().project_id, request.environment, request.version
        )
        return pb.GetEnvironmentResponse(
            environment=environment_to_proto(environment), version=version_to_proto(version)
        )

    @maps_errors
    async def ListEnvironments(
        self, request: pb.ListEnvironmentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListEnvironmentsResponse:
        found, token = await self._definitions.list_environments(
            callers.current().project_id, request.page_size, request.page_token, request.show_archived
        )
        return pb.ListEnvironmentsResponse(environments=[environment_to_proto(e) for e in found], next_page_token=token)

    @maps_errors
    async def UpdateEnvironment(
        self, request: pb.UpdateEnvironmentRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateEnvironmentResponse:
        updated = await self._definitions.update(
            callers.current().project_id, request.environment, request.spec, request.expected_version
        )
        return pb.UpdateEnvironmentResponse(
            environment=environment_to_proto(updated.environment),
            version=version_to_proto(updated.version),
            created=updated.created,
        )

    @maps_errors
    async def ListEnvironmentVersions(
        self, request: pb.ListEnvironmentVersionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListEnvironmentVersionsResponse:
        versions, token = await self._definitions.list_versions(
            callers.current().project_id, request.environment, request.page_size, request.page_token
        )
        return pb.ListEnvironmentVersionsResponse(
            versions=[version_to_proto(v) for v in versions], next_page_token=token
        )

    @maps_errors
    async def ArchiveEnvironment(
        self, request: pb.ArchiveEnvironmentRequest, context: grpc.aio.ServicerContext
    ) -> pb.ArchiveEnvironmentResponse:
        return pb.ArchiveEnvironmentResponse(
            environment=environment_to_proto(
                await self._definitions.archive(callers.current().project_id, request.environment)
            )
        )

    async def BuildEnvironment(self, request: pb.BuildEnvironmentRequest, context: grpc.aio.ServicerContext) -> None:
        """The version's layer built on every live agent (or the one named), each agent's progress
        streamed until it is READY or FAILED; cancelling the call cancels no build."""
        try:
            _, version = await self._definitions.get(callers.current().project_id, request.environment, request.version)
            if self._builds is None:
                raise Unimplemented(
                    BUILDS_NOT_SERVED,
                    "this control plane does not build environment layers ahead of time; a session's first"
                    " start builds its environment's layer",
                    "environment",
                )
            if not version.build_digest:
                return  # no layer: nothing to build, on any agent
            agents = await self._builds.targets(request.agent_id)
        except KernelError as error:
            await context.abort_with_status(to_status(error))
            return
        async for progress in self._builds.build(version.spec, version.build_digest, agents):
            await context.write(pb.BuildEnvironmentResponse(progress=progress))
