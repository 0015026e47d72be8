"""EnvironmentService from a client: a project's environments and their versions (`client.environments`).

    applied = await client.environments.apply("python-ci", spec)   # create, or a new version if changed
    print(applied.environment.name, applied.version.version, applied.created)
    async for environment in client.environments.list():
        print(environment.name, environment.latest_version)
    environment, version = await client.environments.get("python-ci", version=2)
    await client.environments.archive("python-ci")
    async for step in client.environments.build("python-ci"):   # its layer built on the live agents
        print(step.agent_id, step.state, step.phase, step.percent, step.error)

An environment is a name and a series of immutable versions of an `EnvironmentSpec`
(astrabox.environments.v1): packages, setup script, variables, limits, network policy, credential
bindings. The spec stays the protobuf message; `astrabox.environment_files` reads and writes it as YAML.
A session pins one version (`client.create_session(environment=...)`).

Every call has the client's deadline; reads, creates (with their request id), updates (a whole
definition) and archives are retried while the server is away. `build` has no deadline by default
(a layer's packages take what they take) and is not retried: its stream ends when every agent's
build is READY or FAILED; leaving it early cancels no build.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

import grpc

from astrabox._definition_calls import apply, pages
from astrabox.administration import Unary
from astrabox.environments.v1 import environment_pb2
from astrabox.environments.v1 import environment_service_pb2 as api
from astrabox.environments.v1 import environment_service_pb2_grpc as api_grpc
from astrabox.errors import AstraBoxError

__all__ = ["BuildProgress", "Environment", "EnvironmentApplied", "EnvironmentDefinitions", "EnvironmentVersion"]


@dataclass(frozen=True, slots=True)
class Environment:
    """An environment as the server keeps it (`Environment` in environment.proto)."""

    environment_id: str
    name: str
    project_id: str
    latest_version: int
    archived: bool
    """An archived environment starts no new session; its sessions go on."""
    create_time: datetime
    update_time: datetime

    @classmethod
    def from_proto(cls, message: environment_pb2.Environment) -> Environment:
        """From the `Environment` message the server sent."""
        return cls(
            message.environment_id,
            message.name,
            message.project_id,
            message.latest_version,
            message.archived,
            message.create_time.ToDatetime(tzinfo=UTC),
            message.update_time.ToDatetime(tzinfo=UTC),
        )


@dataclass(frozen=True, slots=True)
class EnvironmentVersion:
    """One immutable version of an environment."""

    environment_id: str
    version: int
    spec: environment_pb2.EnvironmentSpec
    spec_digest: str
    build_digest: str
    """SHA-256 of what its layer is built from (packages, setup script): equal digests share a layer."""
    create_time: datetime

    @classmethod
    def from_proto(cls, message: environment_pb2.EnvironmentVersion) -> EnvironmentVersion:
        """From the `EnvironmentVersion` message the server sent."""
        return cls(
            message.environment_id,
            message.version,
            message.spec,
            message.spec_digest,
            message.build_digest,
            message.create_time.ToDatetime(tzinfo=UTC),
        )


@dataclass(frozen=True, slots=True)
class BuildProgress:
    """One step of one agent's build of an environment's layer (`BuildProgress` in environment.proto)."""

    agent_id: str
    build_digest: str
    state: str
    """"building", "ready" or "failed" (READY and FAILED are an agent's last step)."""
    phase: str
    """The step: "apt", "pip", "npm", "setup", "ready" …"""
    message: str
    percent: int
    """0 to 100, as far as the agent can tell."""
    error: str
    """FAILED: the package manager's own error (its output's end)."""
    time: datetime

    @property
    def done(self) -> bool:
        """Whether this is the agent's last step (READY or FAILED)."""
        return self.state in ("ready", "failed")

    @classmethod
    def from_proto(cls, message: environment_pb2.BuildProgress) -> BuildProgress:
        """From the `BuildProgress` message the server sent."""
        state = environment_pb2.BuildState.Name(message.state).removeprefix("BUILD_STATE_").lower()
        return cls(
            message.agent_id,
            message.build_digest,
            state,
            message.phase,
            message.message,
            message.percent,
            message.error,
            message.time.ToDatetime(tzinfo=UTC),
        )


class EnvironmentApplied(NamedTuple):
    """What `apply` (and `update`) did: the environment, its newest version, and whether that version
    was made now (False: the definition was equal to the newest one)."""

    environment: Environment
    version: EnvironmentVersion
    created: bool

    @property
    def new_environment(self) -> bool:
        """Whether the environment itself was made now (its first version is the one made)."""
        return self.created and self.version.version == 1


class EnvironmentDefinitions:
    """EnvironmentService's calls; made by `AstraBoxClient.environments`. `environment` arguments take
    an environment's name or its id."""

    def __init__(self, channel: grpc.aio.Channel, unary: Unary, metadata: Any = ()) -> None:
        self._stub = api_grpc.EnvironmentServiceStub(channel)  # type: ignore[no-untyped-call]
        self._unary = unary
        self._metadata = metadata

    async def create(
        self, name: str, spec: environment_pb2.EnvironmentSpec, *, request_id: str | None = None
    ) -> tuple[Environment, EnvironmentVersion]:
        """A new environment `name` with `spec` as its version 1. Idempotent on `request_id` (a new
        uuid4 by default). ALREADY_EXISTS (ENVIRONMENT_ALREADY_EXISTS) when the name is taken."""
        request = api.CreateEnvironmentRequest(request_id=request_id or str(uuid.uuid4()), name=name, spec=spec)
        response: api.CreateEnvironmentResponse = await self._unary(self._stub.CreateEnvironment, request)
        return Environment.from_proto(response.environment), EnvironmentVersion.from_proto(response.version)

    async def get(self, environment: str, version: int = 0) -> tuple[Environment, EnvironmentVersion]:
        """The environment and one of its versions (0: the newest)."""
        request = api.GetEnvironmentRequest(environment=environment, version=version)
        response: api.GetEnvironmentResponse = await self._unary(self._stub.GetEnvironment, request)
        return Environment.from_proto(response.environment), EnvironmentVersion.from_proto(response.version)

    async def list(self, *, archived: bool = False, page_size: int = 0) -> AsyncIterator[Environment]:
        """Every environment of the project by name (archived ones too with `archived`)."""

        async def read(token: str) -> api.ListEnvironmentsResponse:
            request = api.ListEnvironmentsRequest(page_size=page_size, page_token=token, show_archived=archived)
            page: api.ListEnvironmentsResponse = await self._unary(self._stub.ListEnvironments, request)
            return page

        async for item in pages(read, lambda page: page.environments):
            yield Environment.from_proto(item)

    async def update(
        self, environment: str, spec: environment_pb2.EnvironmentSpec, *, expected_version: int = 0
    ) -> EnvironmentApplied:
        """Gives the environment the definition `spec` (whole): a new version, unless it equals the
        newest. With `expected_version`, only if that is still the newest (else ABORTED,
        ENVIRONMENT_VERSION_CONFLICT)."""
        request = api.UpdateEnvironmentRequest(environment=environment, spec=spec, expected_version=expected_version)
        response: api.UpdateEnvironmentResponse = await self._unary(self._stub.UpdateEnvironment, request)
        return EnvironmentApplied(
            Environment.from_proto(response.environment),
            EnvironmentVersion.from_proto(response.version),
            response.created,
        )

    async def apply(self, name: str, spec: environment_pb2.EnvironmentSpec) -> EnvironmentApplied:
        """Makes the environment `name` be `spec`: creates it if the project has none of that name,
        else updates it (no new version when unchanged); a concurrent create is updated instead."""

        async def create() -> EnvironmentApplied:
            made, version = await self.create(name, spec)
            return EnvironmentApplied(made, version, True)

        return await apply("ENVIRONMENT", lambda: self.update(name, spec), create)

    async def versions(self, environment: str, *, page_size: int = 0) -> AsyncIterator[EnvironmentVersion]:
        """Every version of the environment, newest first."""

        async def read(token: str) -> api.ListEnvironmentVersionsResponse:
            request = api.ListEnvironmentVersionsRequest(environment=environment, page_size=page_size, page_token=token)
            page: api.ListEnvironmentVersionsResponse = await self._unary(self._stub.ListEnvironmentVersions, request)
            return page

        async for item in pages(read, lambda page: page.versions):
            yield EnvironmentVersion.from_proto(item)

    async def archive(self, environment: str) -> Environment:
        """Archives the environment: it starts no new session; running sessions go on."""
        response: api.ArchiveEnvironmentResponse = await self._unary(
            self._stub.ArchiveEnvironment, api.ArchiveEnvironmentRequest(environment=environment)
        )
        return Environment.from_proto(response.environment)

    async def build(
        self, environment: str, version: int = 0, agent_id: str = "", *, timeout: float | None = None
    ) -> AsyncIterator[BuildProgress]:
        """Builds the layer of the environment's `version` (0: the newest) on every live agent, or on
        `agent_id`, yielding each agent's steps until every one is READY or FAILED (a failure is a
        step, not an exception). NOT_FOUND (ENVIRONMENT_NOT_FOUND), UNAVAILABLE (NO_AGENT_AVAILABLE)
        when no agent is connected, UNAVAILABLE (AGENT_NOT_CONNECTED) for an agent that is not. Within `timeout` seconds when given; leaving early cancels no build."""
        request = api.BuildEnvironmentRequest(environment=environment, version=version, agent_id=agent_id)
        call = self._stub.BuildEnvironment(request, timeout=timeout, metadata=self._metadata)
        try:
            async for response in call:
                yield BuildProgress.from_proto(response.progress)
        except grpc.aio.AioRpcError as error:
            raise AstraBoxError.from_rpc_error(error) from error
        finally:
            call.cancel()
