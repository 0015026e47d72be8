"""CredentialService: protobuf in, `CredentialStore` calls within the caller's project, protobuf out.
Its requests are bounded at the edge (`controlplane.validation.FIELDS`: a secret's refusal never
quotes it); a credential's name is checked in `credentials`."""

from __future__ import annotations

import grpc

from astrabox.credentialstore.v1 import credential_service_pb2 as pb
from astrabox.credentialstore.v1 import credential_service_pb2_grpc as pb_grpc
from controlplane.convert import timestamp
from controlplane.credential_store.credentials import CredentialRecord, CredentialStore
from controlplane.identity import callers
from controlplane.status import maps_errors


def credential_to_proto(record: CredentialRecord) -> pb.Credential:
    return pb.Credential(
        name=record.name,
        project_id=str(record.project_id),
        version=record.version,
        description=record.description,
        create_time=timestamp(record.created_at),
        update_time=timestamp(record.updated_at),
    )


class CredentialServicer(pb_grpc.CredentialServiceServicer):
    def __init__(self, credentials: CredentialStore) -> None:
        self._credentials = credentials

    @maps_errors
    async def PutCredential(
        self, request: pb.PutCredentialRequest, context: grpc.aio.ServicerContext
    ) -> pb.PutCredentialResponse:
        record, created = await self._credentials.put(
            callers.current().project_id, request.name, request.secret, request.description
        )
        return pb.PutCredentialResponse(credential=credential_to_proto(record), created=created)

    @maps_errors
    async def ListCredentials(
        self, request: pb.ListCredentialsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListCredentialsResponse:
        found, token = await self._credentials.list_credentials(
            callers.current().project_id, request.page_size, request.page_token
        )
        return pb.ListCredentialsResponse(credentials=[credential_to_proto(r) for r in found], next_page_token=token)

    @maps_errors
    async def DeleteCredential(
        self, request: pb.DeleteCredentialRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteCredentialResponse:
        await self._credentials.delete(callers.current().project_id, request.name)
        return pb.DeleteCredentialResponse()
