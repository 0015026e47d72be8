"""Webhooks end to end: a real control plane (in-process), the real SDK, a real HTTP receiver on
loopback; signatures checked with the standardwebhooks library."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import secrets
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta

import pytest
import pytest_asyncio
from standardwebhooks import Webhook, WebhookVerificationError

from astrabox.client import AstraBoxClient
from astrabox.errors import AstraBoxError
from controlplane.credential_store.cipher import keyring
from controlplane.database import create_pool
from controlplane.journal import EventKind, NewEvent
from controlplane.kernel import CreateSession
from controlplane.page_tokens import PageTokens
from controlplane.server import RunningControlPlane, serve
from controlplane.settings import ControlPlaneSettings
from controlplane.webhooks.destinations import Destinations
from controlplane.webhooks.dispatcher import DeliverySettings, Dispatcher
from controlplane.webhooks.events import EVENT_TYPES
from controlplane.webhooks.sender import Sender
from controlplane.webhooks.subscriptions import Webhooks
from tests.controlplane.conftest import Plane
from tests.support.webhook_receiver import Received, Receiver, serve_receiver

CREDENTIAL_KEY = base64.b64encode(b"W" * 32).decode()


def settings(database_url: str, bootstrap_key_file: str, **more: object) -> ControlPlaneSettings:
    given: dict[str, object] = {
        "database_url": database_url,
        "listen": "127.0.0.1:0",
        "bootstrap_key_file": bootstrap_key_file,
        "lease_ttl": timedelta(minutes=10),
        "credential_key": CREDENTIAL_KEY,
        "webhook_allowed_networks": "127.0.0.0/8",
        "webhook_retry_first": timedelta(seconds=0.2),
        "webhook_retry_longest": timedelta(seconds=0.4),
        "webhook_poll_interval": timedelta(seconds=0.1),
        "webhook_timeout": 3.0,
    }
    return ControlPlaneSettings(**{**given, **more})  # type: ignore[arg-type]


@pytest_asyncio.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async for serving in serve_receiver():
        yield serving


@pytest_asyncio.fixture
async def running(plane: Plane, database_url: str, bootstrap_key_file: str) -> AsyncIterator[RunningControlPlane]:
    await plane.connect_agent()
    async with serve(settings(database_url, bootstrap_key_file)) as control_plane:
        yield control_plane


@pytest_asyncio.fixture
async def client(running: RunningControlPlane) -> AsyncIterator[AstraBoxClient]:
    async with AstraBoxClient.connect(running.address) as connected:
        yield connected


async def new_session(plane: Plane) -> str:
    session = await plane.kernel.create_session(CreateSession(secrets.token_hex(6), plane.project_id))
    return str(session.session_id)


def verified(request: Received, secret: str) -> dict[str, object]:
    """The body of a request whose signature `secret` verifies (else WebhookVerificationError)."""
    payload: dict[str, object] = Webhook(secret).verify(request.body, request.headers)
    return payload


def signatures(request: Received) -> list[str]:
    return request.headers["webhook-signature"].split(" ")


async def until(check, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout):
        while not (found := await check()):
            await asyncio.sleep(0.05)
    return found


async def deliveries(client: AstraBoxClient, webhook_id: str, **filters: str) -> list:  # type: ignore[type-arg]
    return [d async for d in client.webhooks.deliveries(webhook_id, **filters)]


async def test_the_event_types_are_the_triggers_kinds(plane: Plane) -> None:
    async with plane.pool.acquire() as conn:
        for event_type, kind in EVENT_TYPES.items():
            assert await conn.fetchval("SELECT webhook_event_type($1)", kind.value) == event_type
        assert await conn.fetchval("SELECT webhook_event_type('engine_message')") is None


async def test_a_receiver_answering_500_three_times_gets_the_event_then_signed_under_one_id(
    plane: Plane, running: RunningControlPlane, client: AstraBoxClient, receiver: Receiver
) -> None:
    receiver.statuses = [500, 500, 500]
    created = await client.webhooks.create(receiver.url, ["session.created"], description="ops")
    assert created.secret.startswith("whsec_")
    session_id = await new_session(plane)
    requests = await receiver.wait_for(4)
    assert len({r.message_id for r in requests}) == 1, "every retry of one delivery carries its webhook-id"
    for request in requests:
        payload = verified(request, created.secret)
        assert payload["type"] == "session.created"
        assert payload["data"]["session_id"] == session_id  # type: ignore[index]
        with pytest.raises(WebhookVerificationError):
            verified(request, "whsec_" + base64.b64encode(b"x" * 24).decode())

    async def delivered():  # type: ignore[no-untyped-def]
        found = await deliveries(client, created.webhook.webhook_id, state="delivered")
        return found if found and len(found[0].attempt_log) == 4 and found[0].attempt_log[-1].end_time else None

    [delivery] = await until(delivered)
    assert delivery.attempts == 4
    assert delivery.message_id == requests[0].message_id
    assert [a.status_code for a in delivery.attempt_log] == [500, 500, 500, 200]
    assert delivery.attempt_log[0].response_excerpt == "answered 500"
    registry = running.metrics.registry
    attempts = "astrabox_webhook_attempts_total"
    assert registry.get_sample_value(attempts, {"outcome": "rejected"}) == 3
    assert registry.get_sample_value(attempts, {"outcome": "delivered"}) == 1
    # Read at scrape time from the database, on the server's loop: scraped off it, as /metrics is.
    assert await asyncio.to_thread(registry.get_sample_value, "astrabox_webhook_deliveries_pending") == 0
    await asyncio.sleep(0.5)
    assert len(receiver.received) == 4, "a delivered event is not sent again"


async def test_only_subscribed_events_of_the_projects_sessions_are_delivered(
    plane: Plane, client: AstraBoxClient, receiver: Receiver
) -> None:
    created = await client.webhooks.create(receiver.url, ["turn.completed"])
    session_id = await new_session(plane)
    async with plane.journal.transaction() as tx:
        await tx.append(session_id, [NewEvent(EventKind.TURN_COMPLETED, {"subtype": "success"}, turn_id="t-1")])
    [request] = await receiver.wait_for(1)
    payload = verified(request, created.secret)
    assert payload["type"] == "turn.completed"
    assert payload["data"]["turn_id"] == "t-1"  # type: ignore[index]
    await client.webhooks.update(created.webhook.webhook_id, enabled=False)
    async with plane.journal.transaction() as tx:
        await tx.append(session_id, [NewEvent(EventKind.TURN_COMPLETED, {}, turn_id="t-2")])
    await asyncio.sleep(0.5)
    assert len(receiver.received) == 1, "a disabled webhook gets no new deliveries (and session.created none)"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("https://127.0.0.1/hook", "loopback"),
        ("https://169.254.169.254/latest/meta-data", "link-local"),
        ("https://10.1.2.3/hook", "private"),
        ("https://[::ffff:127.0.0.1]/hook", "loopback"),
        ("http://8.8.8.8/hook", "use https"),
        ("ftp://8.8.8.8/hook", "must be https"),
    ],
)
async def test_a_private_or_plain_http_target_is_refused_at_create(
    plane: Plane, database_url: str, bootstrap_key_file: str, url: str, why: str
) -> None:
    strict = settings(database_url, bootstrap_key_file, webhook_allowed_networks="")
    async with serve(strict) as running, AstraBoxClient.connect(running.address) as client:
        with pytest.raises(AstraBoxError) as refused:
            await client.webhooks.create(url, ["session.created"])
        assert refused.value.reason == "WEBHOOK_URL_REFUSED"
        assert why in str(refused.value)
        assert [w async for w in client.webhooks.list()] == []


class SwitchedResolver:
    """A name server whose answer the test changes (DNS rebinding)."""

    def __init__(self, address: str) -> None:
        self.address = address

    async def __call__(self, host: str, port: int) -> Sequence[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        return [ipaddress.ip_address(self.address)]


async def test_a_name_that_resolves_to_loopback_at_delivery_time_is_not_delivered_to(
    plane: Plane, receiver: Receiver
) -> None:
    await plane.connect_agent()
    resolver = SwitchedResolver("203.0.113.7")  # public (a documentation range) when the webhook is made
    destinations = Destinations((ipaddress.ip_network("203.0.113.0/24"),), resolver=resolver)
    keys = keyring(CREDENTIAL_KEY)
    page_tokens = PageTokens(b"k" * 32)
    webhooks = Webhooks(plane.pool, keys, destinations, page_tokens)
    port = receiver.url.split(":")[2].split("/")[0]
    record, _secret = await webhooks.create(
        plane.project_id, f"http://hooks.example.test:{port}/hooks", ["session.created"], "", ""
    )
    resolver.address = "127.0.0.1"  # the receiver's address: reachable, but loopback
    dispatcher = Dispatcher(plane.pool, webhooks, Sender(destinations, 2.0), DeliverySettings())
    await new_session(plane)
    assert await dispatcher.pass_once() == 1
    [delivery], _ = await webhooks.deliveries(plane.project_id, str(record.webhook_id), None, None, 0, "")
    assert delivery.state == "pending"
    assert "127.0.0.1, a loopback address" in delivery.log[0].error
    assert receiver.received == []
    # The same dispatcher delivers to that address once the operator allows its network.
    allowed = Destinations((ipaddress.ip_network("127.0.0.0/8"),), resolver=resolver)
    await plane.pool.execute("UPDATE webhook_deliveries SET next_attempt_at = now()")
    assert await Dispatcher(plane.pool, webhooks, Sender(allowed, 2.0), DeliverySettings()).pass_once() == 1
    assert len(await receiver.wait_for(1)) == 1


async def test_a_rotated_secret_signs_beside_the_old_one_during_the_overlap(
    plane: Plane, client: AstraBoxClient, receiver: Receiver
) -> None:
    created = await client.webhooks.create(receiver.url, ["session.created"])
    rotated = await client.webhooks.rotate_secret(created.webhook.webhook_id, overlap_seconds=3600)
    assert rotated.secret != created.secret and rotated.webhook.secret_version == 2
    assert rotated.webhook.previous_secret_expire_time is not None
    await new_session(plane)
    [request] = await receiver.wait_for(1)
    assert len(signatures(request)) == 2
    verified(request, rotated.secret)
    verified(request, created.secret)  # a receiver not yet given the new secret still verifies
    # A second rotation ends the first secret's overlap: it signs no more.
    again = await client.webhooks.rotate_secret(created.webhook.webhook_id, overlap_seconds=3600)
    await new_session(plane)
    requests = await receiver.wait_for(2)
    assert len(signatures(requests[1])) == 2
    verified(requests[1], again.secret)
    verified(requests[1], rotated.secret)
    with pytest.raises(WebhookVerificationError):
        verified(requests[1], created.secret)


async def test_a_redelivery_is_a_new_attempt_under_the_same_webhook_id(
    plane: Plane, client: AstraBoxClient, receiver: Receiver
) -> None:
    created = await client.webhooks.create(receiver.url, ["session.created"])
    await new_session(plane)
    [first] = await receiver.wait_for(1)
    webhook_id = created.webhook.webhook_id
    [delivery] = await until(lambda: deliveries(client, webhook_id, state="delivered"))
    redelivered = await client.webhooks.redeliver(webhook_id, delivery.delivery_id)
    assert redelivered.state == "pending"
    second = (await receiver.wait_for(2))[1]
    assert second.message_id == first.message_id
    assert verified(second, created.secret) == verified(first, created.secret)
    [after] = await until(lambda: deliveries(client, webhook_id, state="delivered"))
    assert after.attempts == 2
    with pytest.raises(AstraBoxError) as missing:
        await client.webhooks.redeliver(webhook_id, str(uuid.uuid4()))
    assert missing.value.reason == "WEBHOOK_DELIVERY_NOT_FOUND"


async def test_webhooks_are_listed_updated_deleted_and_another_projects_look_absent(
    running: RunningControlPlane, client: AstraBoxClient, receiver: Receiver
) -> None:
    first = await client.webhooks.create(receiver.url, ["turn.failed"], request_id="hook-1")
    again = await client.webhooks.create(receiver.url, ["turn.failed"], request_id="hook-1")
    assert again.webhook.webhook_id == first.webhook.webhook_id and again.secret == first.secret
    with pytest.raises(AstraBoxError) as reused:
        await client.webhooks.create(receiver.url, ["turn.completed"], request_id="hook-1")
    assert reused.value.reason == "REQUEST_ID_REUSED"
    with pytest.raises(AstraBoxError) as unknown:
        await client.webhooks.create(receiver.url, ["turn.finished"])
    assert unknown.value.reason == "INVALID_ARGUMENT"
    second = await client.webhooks.create(receiver.url, ["session.archived"])
    listed = [w.webhook_id async for w in client.webhooks.list(page_size=1)]
    assert listed == [first.webhook.webhook_id, second.webhook.webhook_id]
    changed = await client.webhooks.update(second.webhook.webhook_id, event_types=["turn.completed", "turn.failed"])
    assert changed.event_types == ("turn.completed", "turn.failed") and changed.url == receiver.url
    await client.webhooks.delete(second.webhook.webhook_id)
    with pytest.raises(AstraBoxError) as gone:
        await client.webhooks.get(second.webhook.webhook_id)
    assert gone.value.reason == "WEBHOOK_NOT_FOUND"
    other = await client.admin.create_project("webhooks-other")
    key = await client.admin.create_api_key("other-admin", role="admin", project_id=other.project_id)
    async with AstraBoxClient.connect(running.address, api_key=key.secret) as outsider:
        assert [w async for w in outsider.webhooks.list()] == []
        with pytest.raises(AstraBoxError) as hidden:
            await outsider.webhooks.get(first.webhook.webhook_id)
        assert hidden.value.reason == "WEBHOOK_NOT_FOUND"
    developer = await client.admin.create_api_key("dev", role="developer")
    async with AstraBoxClient.connect(running.address, api_key=developer.secret) as dev:
        with pytest.raises(AstraBoxError) as denied:
            await dev.webhooks.list().__anext__()
        assert denied.value.reason == "ROLE_INSUFFICIENT"


async def test_without_a_credentials_key_webhooks_are_unavailable(
    plane: Plane, database_url: str, bootstrap_key_file: str, receiver: Receiver
) -> None:
    async with (
        serve(settings(database_url, bootstrap_key_file, credential_key="")) as running,
        AstraBoxClient.connect(running.address) as client,
    ):
        with pytest.raises(AstraBoxError) as refused:
            await client.webhooks.create(receiver.url, ["session.created"])
        assert refused.value.reason == "CREDENTIALS_UNAVAILABLE"


async def test_one_replica_at_a_time_attempts_a_delivery(plane: Plane, database_url: str, receiver: Receiver) -> None:
    """Two dispatchers passing at once over one due delivery: one of them leases it, once."""
    await plane.connect_agent()
    destinations = Destinations((ipaddress.ip_network("127.0.0.0/8"),))
    webhooks = Webhooks(plane.pool, keyring(CREDENTIAL_KEY), destinations, PageTokens(b"k" * 32))
    await webhooks.create(plane.project_id, receiver.url, ["session.created"], "", "")
    receiver.statuses = [None]  # held: the first attempt stays in flight
    await new_session(plane)
    other_pool = await create_pool(database_url, min_size=1, max_size=2)
    try:
        a = Dispatcher(plane.pool, webhooks, Sender(destinations, 30.0), DeliverySettings())
        b = Dispatcher(other_pool, webhooks, Sender(destinations, 30.0), DeliverySettings())
        first = asyncio.create_task(a.pass_once())
        await receiver.wait_for(1)
        assert await b.pass_once() == 0, "the delivery's lease is held"
        receiver.released.set()
        assert await first == 1
        assert await b.pass_once() == 0, "delivered: nothing is due"
    finally:
        with contextlib.suppress(Exception):
            await other_pool.close()
    assert len(receiver.received) == 1


async def test_finished_deliveries_leave_the_log_after_the_retention_and_pending_ones_stay(
    plane: Plane, receiver: Receiver
) -> None:
    await plane.connect_agent()
    destinations = Destinations((ipaddress.ip_network("127.0.0.0/8"),))
    webhooks = Webhooks(plane.pool, keyring(CREDENTIAL_KEY), destinations, PageTokens(b"k" * 32))
    await webhooks.create(plane.project_id, receiver.url, ["session.created"], "", "")
    receiver.statuses = [200, 500]
    await new_session(plane)
    await new_session(plane)
    dispatcher = Dispatcher(
        plane.pool, webhooks, Sender(destinations, 5.0), DeliverySettings(retention=timedelta(days=1))
    )
    assert await dispatcher.pass_once() == 2  # one delivered, one failed and pending again
    states = "SELECT state, count(*) FROM webhook_deliveries GROUP BY state"
    assert dict(await plane.pool.fetch(states)) == {"delivered": 1, "pending": 1}
    assert await dispatcher.prune_once() == 0, "delivered just now: within the retention"

    await plane.pool.execute("UPDATE webhook_deliveries SET finished_at = now() - interval '2 days'")
    assert await dispatcher.prune_once() == 1
    assert dict(await plane.pool.fetch(states)) == {"pending": 1}, "a pending delivery is never pruned"
    assert await plane.pool.fetchval("SELECT count(*) FROM webhook_attempts") == 1, "the pruned one's attempts go too"
    forever = Dispatcher(plane.pool, webhooks, Sender(destinations, 5.0), DeliverySettings(retention=timedelta(0)))
    await plane.pool.execute("UPDATE webhook_deliveries SET state = 'failed', finished_at = now() - interval '9 days'")
    assert await forever.prune_once() == 0, "zero retention keeps the log forever"
