"""The Docker Engine as the docker driver reaches it: one aiodocker client per operation, within a timeout.

A client lives for one operation, so that nothing outlives it and a changed
DOCKER_HOST is honoured by the next. The Engine's failures, and a daemon that
cannot be found or reached, become SandboxError with the fix in the message.
"""

from __future__ import annotations

import asyncio
import contextlib
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

    @contextlib.asynccontextmanager
    async def client(self, what: str) -> AsyncIterator[aiodocker.Docker]:
        """A client for one operation (`what`, as in "Docker could not <what>")."""
        try:
            async with asyncio.timeout(self._timeout):
                try:
                    docker = aiodocker.Docker()
                except (AssertionError, ValueError) as error:  # no DOCKER_HOST and no local socket
                    raise SandboxError(
                        f"no Docker daemon was found ({error or 'no socket'}): start dockerd or set DOCKER_HOST"
                    ) from None
                async with docker:
                    yield docker
        except TimeoutError:
            raise SandboxError(f"Docker did not {what} within {self._timeout:.0f}s") from None
        except aiodocker.DockerError as error:
            if error.status == _UNREACHABLE:
                raise SandboxError(f"the Docker daemon is not reachable ({error.message}): start dockerd or set DOCKER_HOST") from error
            raise SandboxError(f"Docker could not {what}: {error.message}") from error
        except (OSError, aiohttp.ClientError) as error:
            raise SandboxError(
                f"the Docker daemon is not reachable ({error}): start dockerd or set DOCKER_HOST"
            ) from error
