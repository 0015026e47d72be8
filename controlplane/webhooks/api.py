"""WebhookService: protobuf in, `Webhooks` calls within the caller's project, protobuf out. Its
requests are bounded at the edge (`controlplane.validation.FIELDS`); their meaning is checked in
`subscriptions`."""

from __future__ import annotations

import grpc

from astrabox.webhooks.v1 import webhook_service_pb2 as pb
from astrabox.webhooks.v1 import webhook_service_pb2_grpc as pb_grpc
from controlplane.convert import timestamp
from controlplane.errors import InvalidArgument
from controlplane.identity import callers
from controlplane.status import maps_errors
from controlplane.webhooks.subscriptions import DeliveryRecord, WebhookRecord, Webhooks

_STATES = {
    "pending": pb.DELIVERY_STATE_PENDING,
    "delivered": pb.DELIVERY_STATE_DELIVERED,
    "failed": pb.DELIVERY_STATE_FAILED,
}
_STATE_NAMES = {value: name for name, value in _STATES.items()}


def webhook_to_proto(record: WebhookRecord) -> pb.Webhook:
    webhook = pb.Webhook(
        webhook_id=str(record.webhook_id),
        project_id=str(record.project_id),
        url=record.url,
        event_types=record.event_types,
        description=record.description,
        enabled=record.enabled,
        secret_version=record.secret_version,
        create_time=timestamp(record.created_at),
        update_time=timestamp(record.updated_at),
    )
    if record.previous_expires_at is not None:
        webhook.previous_secret_expire_time.CopyFrom(timestamp(record.previous_expires_at))
    return webhook


def delivery_to_proto(record: DeliveryRecord) -> pb.WebhookDelivery:
    delivery = pb.WebhookDelivery(
        delivery_id=str(record.delivery_id),
        webhook_id=str(record.webhook_id),
        event_type=record.event_type,
        session_id=str(record.session_id or ""),
        seq=record.seq,
        state=_STATES[record.state],
        attempts=record.attempts,
        create_time=timestamp(record.created_at),
        payload_json=record.payload_json,
    )
    if record.state == "pending":
        delivery.next_attempt_time.CopyFrom(timestamp(record.next_attempt_at))
    for attempt in record.log:
        logged = delivery.attempt_log.add(
            attempt=attempt.attempt,
            start_time=timestamp(attempt.started_at),
            status_code=attempt.status_code or 0,
            error=attempt.error,
            response_excerpt=attempt.excerpt,
        )
        if attempt.finished_at is not None:
            logged.end_time.CopyFrom(timestamp(attempt.finished_at))
    return delivery


class WebhookServicer(pb_grpc.WebhookServiceServicer):
    def __init__(self, webhooks: Webhooks) -> None:
        self._webhooks = webhooks

    @maps_errors
    async def CreateWebhook(
        self, request: pb.CreateWebhookRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateWebhookResponse:
        record, secret = await self._webhooks.create(
            callers.current().project_id, request.url, request.event_types, request.description, request.request_id
        )
        return pb.CreateWebhookResponse(webhook=webhook_to_proto(record), secret=secret)

    @maps_errors
    async def ListWebhooks(
        self, request: pb.ListWebhooksRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListWebhooksResponse:
        found, token = await self._webhooks.list_webhooks(
            callers.current().project_id, request.page_size, request.page_token
        )
        return pb.ListWebhooksResponse(webhooks=[webhook_to_proto(r) for r in found], next_page_token=token)

    @maps_errors
    async def GetWebhook(
        self, request: pb.GetWebhookRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetWebhookResponse:
        record = await self._webhooks.get(callers.current().project_id, request.webhook_id)
        return pb.GetWebhookResponse(webhook=webhook_to_proto(record))

    @maps_errors
    async def UpdateWebhook(
        self, request: pb.UpdateWebhookRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateWebhookResponse:
        record = await self._webhooks.update(
            callers.current().project_id,
            request.webhook_id,
            request.url if request.HasField("url") else None,
            list(request.event_types.event_types) if request.HasField("event_types") else None,
            request.description if request.HasField("description") else None,
            request.enabled if request.HasField("enabled") else None,
        )
        return pb.UpdateWebhookResponse(webhook=webhook_to_proto(record))

    @maps_errors
    async def DeleteWebhook(
        self, request: pb.DeleteWebhookRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteWebhookResponse:
        await self._webhooks.delete(callers.current().project_id, request.webhook_id)
        return pb.DeleteWebhookResponse()

    @maps_errors
    async def RotateWebhookSecret(
        self, request: pb.RotateWebhookSecretRequest, context: grpc.aio.ServicerContext
    ) -> pb.RotateWebhookSecretResponse:
        record, secret = await self._webhooks.rotate(
            callers.current().project_id, request.webhook_id, request.overlap_seconds
        )
        return pb.RotateWebhookSecretResponse(webhook=webhook_to_proto(record), secret=secret)

    @maps_errors
    async def ListWebhookDeliveries(
        self, request: pb.ListWebhookDeliveriesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListWebhookDeliveriesResponse:
        state = None
        if request.state != pb.DELIVERY_STATE_UNSPECIFIED:
            if request.state not in _STATE_NAMES:
                raise InvalidArgument("state", f"state {request.state} is not a DeliveryState")
            state = _STATE_NAMES[request.state]
        found, token = await self._webhooks.deliveries(
            callers.current().project_id,
            request.webhook_id,
            state,
            request.event_type or None,
            request.page_size,
            request.page_token,
        )
        return pb.ListWebhookDeliveriesResponse(deliveries=[delivery_to_proto(r) for r in found], next_page_token=token)

    @maps_errors
    async def RedeliverWebhook(
        self, request: pb.RedeliverWebhookRequest, context: grpc.aio.ServicerContext
    ) -> pb.RedeliverWebhookResponse:
        record = await self._webhooks.redeliver(callers.current().project_id, request.webhook_id, request.delivery_id)
        return pb.RedeliverWebhookResponse(delivery=delivery_to_proto(record))
