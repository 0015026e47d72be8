"""AgentService: protobuf in, `AgentDefinitions` calls within the caller's project, protobuf out.

Its requests are bounded here and in `specs`, not by the edge's table of fields
(`controlplane.validation.FIELDS`): an AgentSpec's fields have meanings of their own (a skill
file's `path` is no workspace path), and a refusal names the spec's field by its path.
"""

from __future__ import annotations

import grpc

from astrabox.agents.v1 import agent_pb2
from astrabox.agents.v1 import agent_service_pb2 as pb
from astrabox.agents.v1 import agent_service_pb2_grpc as pb_grpc
from controlplane.agent_definitions.definitions import AgentDefinitions, AgentRecord, VersionRecord
from controlplane.convert import timestamp
from controlplane.identity import callers
from controlplane.status import maps_errors


def agent_to_proto(record: AgentRecord) -> agent_pb2.Agent:
    return agent_pb2.Agent(
        agent_id=record.agent_id,
        name=record.name,
        project_id=str(record.project_id),
        latest_version=record.latest_version,
        archived=record.archived,
        create_time=timestamp(record.created_at),
        update_time=timestamp(record.updated_at),
    )


def version_to_proto(record: VersionRecord) -> agent_pb2.AgentVersion:
    return agent_pb2.AgentVersion(
        agent_id=record.agent_id,
        version=record.version,
        spec=record.spec,
        spec_digest=record.spec_digest,
        create_time=timestamp(record.created_at),
    )


class AgentServicer(pb_grpc.AgentServiceServicer):
    def __init__(self, definitions: AgentDefinitions) -> None:
        self._definitions = definitions

    @maps_errors
    async def CreateAgent(
        self, request: pb.CreateAgentRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateAgentResponse:
        agent, version = await self._definitions.create(
            callers.current().project_id, request.request_id, request.name, request.spec
        )
        return pb.CreateAgentResponse(agent=agent_to_proto(agent), version=version_to_proto(version))

    @maps_errors
    async def GetAgent(self, request: pb.GetAgentRequest, context: grpc.aio.ServicerContext) -> pb.GetAgentResponse:
        agent, version = await self._definitions.get(callers.current().project_id, request.agent, request.version)
        return pb.GetAgentResponse(agent=agent_to_proto(agent), version=version_to_proto(version))

    @maps_errors
    async def ListAgents(
        self, request: pb.ListAgentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListAgentsResponse:
        agents, token = await self._definitions.list_agents(
            callers.current().project_id, request.page_size, request.page_token, request.show_archived
        )
        return pb.ListAgentsResponse(agents=[agent_to_proto(a) for a in agents], next_page_token=token)

    @maps_errors
    async def UpdateAgent(
        self, request: pb.UpdateAgentRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateAgentResponse:
        updated = await self._definitions.update(
            callers.current().project_id, request.agent, request.spec, request.expected_version
        )
        return pb.UpdateAgentResponse(
            agent=agent_to_proto(updated.agent), version=version_to_proto(updated.version), created=updated.created
        )

    @maps_errors
    async def ListAgentVersions(
        self, request: pb.ListAgentVersionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListAgentVersionsResponse:
        versions, token = await self._definitions.list_versions(
            callers.current().project_id, request.agent, request.page_size, request.page_token
        )
        return pb.ListAgentVersionsResponse(versions=[version_to_proto(v) for v in versions], next_page_token=token)

    @maps_errors
    async def ArchiveAgent(
        self, request: pb.ArchiveAgentRequest, context: grpc.aio.ServicerContext
    ) -> pb.ArchiveAgentResponse:
        agent = await self._definitions.archive(callers.current().project_id, request.agent)
        return pb.ArchiveAgentResponse(agent=agent_to_proto(agent))
