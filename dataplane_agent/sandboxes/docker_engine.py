"""The Docker Engine as the docker driver reaches it: one aiodocker client per operation, within a timeout.

A client lives for one operation, so that nothing outlives it and a changed
DOCKER_HOST is honoured by the next. Left to itself, aiodocker asks the
daemon's /version before a client's first request: a round trip that costs
more than a rename or an inspect, made once per daemon here and its answer
given to every later client. The Engine's failures, and a daemon that cannot
be found or reached, become SandboxError with the fix in the message.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator

import aiodocker
import aiohttp

from dataplane_agent.sandboxes.base import SandboxError

# aiodocker's status for a daemon it cannot connect to.
_UNREACHABLE = 900


class DockerEngine:
    """Docker clients for the driver's operations, each bounded by `timeout` seconds."""

    def __init__(self, timeout: float) -> None:
        self._timeout = timeout
        # DOCKER_HOST (empty: the default socket) -> the API version its daemon speaks.
        self._versions: dict[str, str] = {}

    @contextlib.asynccontextmanager
    async def client(self, what: str) -> AsyncIterator[aiodocker.Docker]:
        """A client for one operation (`what`, as in "Docker could not <what>")."""
        host = os.environ.get("DOCKER_HOST", "")
        try:
            async with asyncio.timeout(self._timeout):
                try:
                    docker = aiodocker.Docker(api_version=self._versions.get(host, "auto"))
                except (AssertionError, ValueError) as error:  # no DOCKER_HOST and no local socket
                    raise SandboxError(
                        f"no Docker daemon was found ({error or 'no socket'}): start dockerd or set DOCKER_HOST"
                    ) from None
                async with docker:
                    yield docker
                    if docker.api_version != "auto":
                        self._versions[host] = docker.api_version
        except TimeoutError:
            raise SandboxError(f"Docker did not {what} within {self._timeout:.0f}s") from None
        except aiodocker.DockerError as error:
            if error.status == 400:
                # Among others, a daemon replaced by one that no longer speaks the version it was
                # asked in: the next client asks again.
                self._versions.pop(host, None)
            if error.status == _UNREACHABLE:
                raise SandboxError(
                    f"the Docker daemon is not reachable ({error.message}): start dockerd or set DOCKER_HOST"
                ) from error
            raise SandboxError(f"Docker could not {what}: {error.message}") from error
        except (OSError, aiohttp.ClientError) as error:
            raise SandboxError(
                f"the Docker daemon is not reachable ({error}): start dockerd or set DOCKER_HOST"
            ) from error
