"""WebhookService from a client: a project's webhooks (`client.webhooks`).

    created = await client.webhooks.create("https://hooks.example.com/astrabox", ["turn.completed"])
    print(created.secret)  # whsec_…, shown once: the receiver verifies signatures with it
    async for delivery in client.webhooks.deliveries(created.webhook.webhook_id):
        print(delivery.event_type, delivery.state, delivery.attempts)
    await client.webhooks.redeliver(webhook_id, delivery_id)

Deliveries are signed POSTs following the Standard Webhooks specification: a receiver verifies them
with any Standard Webhooks library (`standardwebhooks.Webhook(secret).verify(body, headers)`) and
drops repeats by their `webhook-id`, which stays the same on every retry and redelivery.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import grpc

from astrabox.administration import Unary
from astrabox.webhooks.v1 import webhook_service_pb2 as api
from astrabox.webhooks.v1 import webhook_service_pb2_grpc as api_grpc

__all__ = ["CreatedWebhook", "DeliveryAttempt", "Webhook", "WebhookDelivery", "Webhooks"]

EVENT_TYPES = (
    "session.created",
    "session.ready",
    "session.failed",
    "session.runtime_lost",
    "session.waiting_for_input",
    "session.archived",
    "session.deleted",
    "turn.completed",
    "turn.failed",
    "turn.interrupted",
)
"""The event types a webhook may subscribe to."""
_STATES = {
    "pending": api.DELIVERY_STATE_PENDING,
    "delivered": api.DELIVERY_STATE_DELIVERED,
    "failed": api.DELIVERY_STATE_FAILED,
}
_STATE_NAMES = {value: name for name, value in _STATES.items()}


def _time(value: object, present: bool = True) -> datetime | None:
    if not present:
        return None
    return value.ToDatetime(tzinfo=UTC)  # type: ignore[attr-defined, no-any-return]


@dataclass(frozen=True, slots=True)
class Webhook:
    """A webhook (never its secret)."""

    webhook_id: str
    project_id: str
    url: str
    event_types: tuple[str, ...]
    description: str
    enabled: bool
    secret_version: int
    previous_secret_expire_time: datetime | None
    """Until when the secret before the last rotation signs too (None: no overlap)."""
    create_time: datetime
    update_time: datetime

    @classmethod
    def from_proto(cls, webhook: api.Webhook) -> Webhook:
        """The webhook a WebhookService answer carries."""
        return cls(
            webhook.webhook_id,
            webhook.project_id,
            webhook.url,
            tuple(webhook.event_types),
            webhook.description,
            webhook.enabled,
            webhook.secret_version,
            _time(webhook.previous_secret_expire_time, webhook.HasField("previous_secret_expire_time")),
            webhook.create_time.ToDatetime(tzinfo=UTC),
            webhook.update_time.ToDatetime(tzinfo=UTC),
        )


@dataclass(frozen=True, slots=True)
class CreatedWebhook:
    """A webhook with its new secret (from `create` and `rotate_secret`: shown only there)."""

    webhook: Webhook
    secret: str


@dataclass(frozen=True, slots=True)
class DeliveryAttempt:
    """One POST of a delivery, as the delivery log keeps it."""

    attempt: int
    start_time: datetime
    end_time: datetime | None
    status_code: int
    """0: no answer (see `error`)."""
    error: str
    response_excerpt: str


@dataclass(frozen=True, slots=True)
class WebhookDelivery:
    """One event's delivery to one webhook, with its latest attempts."""

    delivery_id: str
    webhook_id: str
    event_type: str
    session_id: str
    seq: int
    state: str
    """pending, delivered or failed."""
    attempts: int
    create_time: datetime
    next_attempt_time: datetime | None
    attempt_log: tuple[DeliveryAttempt, ...]
    payload_json: str

    @property
    def message_id(self) -> str:
        """The `webhook-id` header its attempts carry."""
        return "msg_" + self.delivery_id.replace("-", "")

    @classmethod
    def from_proto(cls, delivery: api.WebhookDelivery) -> WebhookDelivery:
        """The delivery a WebhookService answer carries."""
        return cls(
            delivery.delivery_id,
            delivery.webhook_id,
            delivery.event_type,
            delivery.session_id,
            delivery.seq,
            _STATE_NAMES.get(delivery.state, "unspecified"),
            delivery.attempts,
            delivery.create_time.ToDatetime(tzinfo=UTC),
            _time(delivery.next_attempt_time, delivery.HasField("next_attempt_time")),
            tuple(
                DeliveryAttempt(
                    a.attempt,
                    a.start_time.ToDatetime(tzinfo=UTC),
                    _time(a.end_time, a.HasField("end_time")),
                    a.status_code,
                    a.error,
                    a.response_excerpt,
                )
                for a in delivery.attempt_log
            ),
            delivery.payload_json,
        )


class Webhooks:
    """The project's webhooks (`client.webhooks`); an admin's calls."""

    def __init__(self, channel: grpc.aio.Channel, unary: Unary) -> None:
        self._stub = api_grpc.WebhookServiceStub(channel)  # type: ignore[no-untyped-call]
        self._unary = unary

    async def create(
        self, url: str, event_types: Sequence[str], *, description: str = "", request_id: str = ""
    ) -> CreatedWebhook:
        """A new webhook and its secret (keep it: it is not shown again)."""
        request = api.CreateWebhookRequest(
            url=url, event_types=event_types, description=description, request_id=request_id
        )
        response: api.CreateWebhookResponse = await self._unary(self._stub.CreateWebhook, request)
        return CreatedWebhook(Webhook.from_proto(response.webhook), response.secret)

    async def list(self, *, page_size: int = 0) -> AsyncIterator[Webhook]:
        """The project's webhooks, oldest first, page by page."""
        token = ""
        while True:
            request = api.ListWebhooksRequest(page_size=page_size, page_token=token)
            page: api.ListWebhooksResponse = await self._unary(self._stub.ListWebhooks, request)
            for webhook in page.webhooks:
                yield Webhook.from_proto(webhook)
            token = page.next_page_token
            if not token:
                return

    async def get(self, webhook_id: str) -> Webhook:
        """One webhook of the project."""
        response: api.GetWebhookResponse = await self._unary(
            self._stub.GetWebhook, api.GetWebhookRequest(webhook_id=webhook_id)
        )
        return Webhook.from_proto(response.webhook)

    async def update(
        self,
        webhook_id: str,
        *,
        url: str | None = None,
        event_types: Sequence[str] | None = None,
        description: str | None = None,
        enabled: bool | None = None,
    ) -> Webhook:
        """Change the fields given (None: unchanged)."""
        request = api.UpdateWebhookRequest(webhook_id=webhook_id)
        if url is not None:
            request.url = url
        if event_types is not None:
            request.event_types.event_types.extend(event_types)
        if description is not None:
            request.description = description
        if enabled is not None:
            request.enabled = enabled
        response: api.UpdateWebhookResponse = await self._unary(self._stub.UpdateWebhook, request)
        return Webhook.from_proto(response.webhook)

    async def delete(self, webhook_id: str) -> None:
        """Delete the webhook with its deliveries (pending ones are not sent)."""
        await self._unary(self._stub.DeleteWebhook, api.DeleteWebhookRequest(webhook_id=webhook_id))

    async def rotate_secret(self, webhook_id: str, *, overlap_seconds: int = 0) -> CreatedWebhook:
        """A new secret; the old one signs beside it for `overlap_seconds` (0: a day)."""
        request = api.RotateWebhookSecretRequest(webhook_id=webhook_id, overlap_seconds=overlap_seconds)
        response: api.RotateWebhookSecretResponse = await self._unary(self._stub.RotateWebhookSecret, request)
        return CreatedWebhook(Webhook.from_proto(response.webhook), response.secret)

    async def deliveries(
        self, webhook_id: str, *, state: str = "", event_type: str = "", page_size: int = 0
    ) -> AsyncIterator[WebhookDelivery]:
        """The webhook's deliveries, newest first; `state` one of pending, delivered, failed ("": any)."""
        token = ""
        while True:
            request = api.ListWebhookDeliveriesRequest(
                webhook_id=webhook_id,
                state=_STATES[state] if state else api.DELIVERY_STATE_UNSPECIFIED,
                event_type=event_type,
                page_size=page_size,
                page_token=token,
            )
            page: api.ListWebhookDeliveriesResponse = await self._unary(self._stub.ListWebhookDeliveries, request)
            for delivery in page.deliveries:
                yield WebhookDelivery.from_proto(delivery)
            token = page.next_page_token
            if not token:
                return

    async def redeliver(self, webhook_id: str, delivery_id: str) -> WebhookDelivery:
        """Send a delivery again now, under the same webhook-id."""
        request = api.RedeliverWebhookRequest(webhook_id=webhook_id, delivery_id=delivery_id)
        response: api.RedeliverWebhookResponse = await self._unary(self._stub.RedeliverWebhook, request)
        return WebhookDelivery.from_proto(response.delivery)
