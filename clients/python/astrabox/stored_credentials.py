"""CredentialService from a client: a project's stored secrets (`client.credentials`).

    stored = await client.credentials.put("git-token", secret, description="the git host's token")
    async for credential in client.credentials.list():
        print(credential.name, credential.version)
    await client.credentials.delete("git-token")

A secret is written, never read back: the control plane keeps it encrypted and gives it only to
the agent whose sandbox's requests an environment binds it to (its egress proxy adds it on the way
out). Puts and deletes are retried while the server is away (a put repeated stores the same secret
as one more version). (`astrabox.credentials` is this client's own API key, not these.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

import grpc

from astrabox.administration import Unary
from astrabox.credentialstore.v1 import credential_service_pb2 as api
from astrabox.credentialstore.v1 import credential_service_pb2_grpc as api_grpc

__all__ = ["Credentials", "StoredCredential"]


@dataclass(frozen=True, slots=True)
class StoredCredential:
    """A stored secret's description (never the secret)."""

    name: str
    project_id: str
    version: int
    """Counts from 1; one more each time the secret is replaced."""
    description: str
    create_time: datetime
    update_time: datetime
    created: bool = False
    """From `put`: whether the credential was created rather than replaced."""

    @classmethod
    def from_proto(cls, credential: api.Credential, created: bool = False) -> StoredCredential:
        """The description a CredentialService answer carries."""
        return cls(
            credential.name,
            credential.project_id,
            credential.version,
            credential.description,
            credential.create_time.ToDatetime(tzinfo=UTC),
            credential.update_time.ToDatetime(tzinfo=UTC),
            created,
        )


class Credentials:
    """The project's credentials (`client.credentials`): secrets written, never read back."""

    def __init__(self, channel: grpc.aio.Channel, unary: Unary) -> None:
        self._stub = api_grpc.CredentialServiceStub(channel)  # type: ignore[no-untyped-call]
        self._unary = unary

    async def put(self, name: str, secret: str, *, description: str = "") -> StoredCredential:
        """Store `secret` under `name` (created, or replaced as a new version)."""
        request = api.PutCredentialRequest(name=name, secret=secret, description=description)
        response: api.PutCredentialResponse = await self._unary(self._stub.PutCredential, request)
        return StoredCredential.from_proto(response.credential, response.created)

    async def list(self, *, page_size: int = 0) -> AsyncIterator[StoredCredential]:
        """The project's credentials by name, page by page."""
        token = ""
        while True:
            request = api.ListCredentialsRequest(page_size=page_size, page_token=token)
            page: api.ListCredentialsResponse = await self._unary(self._stub.ListCredentials, request)
            for credential in page.credentials:
                yield StoredCredential.from_proto(credential)
            token = page.next_page_token
            if not token:
                return

    async def delete(self, name: str) -> None:
        """Delete the credential; sessions that bind it stop getting it (within a minute)."""
        await self._unary(self._stub.DeleteCredential, api.DeleteCredentialRequest(name=name))
