"""Webhook deliveries across a control-plane SIGKILL: every subscribed event reaches the receiver
under one webhook-id per delivery, including the one in flight when the process died (retried once
its lease lapsed) and those journaled while no control plane ran."""

from __future__ import annotations

import asyncio
import base64
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from standardwebhooks import Webhook

from astrabox.client import AstraBoxClient
from controlplane.journal import EventKind, NewEvent
from controlplane.kernel import CreateSession
from tests.controlplane.conftest import Plane, plane  # noqa: F401 - fixture
from tests.support.processes import start_controlplane
from tests.support.webhook_receiver import Receiver, serve_receiver


@pytest_asyncio.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async for serving in serve_receiver():
        yield serving


async def new_session(plane: Plane) -> str:
    session = await plane.kernel.create_session(CreateSession(secrets.token_hex(6), plane.project_id))
    return str(session.session_id)


async def test_each_event_reaches_the_receiver_under_one_id_across_a_sigkill(
    plane: Plane, database_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    await plane.connect_agent()
    key_file = tmp_path / "credential.key"
    key_file.write_text(base64.b64encode(b"C" * 32).decode())
    key_file.chmod(0o600)
    args = [
        "--credential-key-file", str(key_file),
        "--webhook-allowed-networks", "127.0.0.0/8",
        "--webhook-timeout", "2",
        "--webhook-poll-interval", "0.1",
        "--webhook-retry-first", "0.2",
        "--webhook-retry-longest", "0.5",
    ]  # fmt: skip
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    controlplane, address = start_controlplane(database_url, tmp_path / "first", args=args)
    try:
        async with AstraBoxClient.connect(address) as client:
            created = await client.webhooks.create(receiver.url, ["session.created", "turn.completed"])
        receiver.statuses = [None]  # the first request is held open: in flight when the process dies
        first = await new_session(plane)
        await receiver.wait_for(1)
        sessions = [first, await new_session(plane)]
        controlplane.kill()
        # Journaled with no control plane running: the outbox keeps them.
        sessions += [await new_session(plane), await new_session(plane)]
        async with plane.journal.transaction() as tx:
            await tx.append(first, [NewEvent(EventKind.TURN_COMPLETED, {}, turn_id="t-1")])
        controlplane, address = start_controlplane(database_url, tmp_path / "second", args=args)

        async def all_delivered() -> list[str]:
            rows = await plane.pool.fetch("SELECT delivery_id, state FROM webhook_deliveries")
            return [str(r["delivery_id"]) for r in rows] if all(r["state"] == "delivered" for r in rows) else []

        async with asyncio.timeout(60):
            while not (delivered := await all_delivered()):
                await asyncio.sleep(0.2)
    finally:
        controlplane.stop()
    assert len(delivered) == len(sessions) + 1
    expected_ids = {"msg_" + d.replace("-", "") for d in delivered}
    received = receiver.received
    assert {r.message_id for r in received} == expected_ids
    events: dict[str, set[tuple[str, str]]] = {}
    for request in received:
        payload = Webhook(created.secret).verify(request.body, request.headers)
        events.setdefault(request.message_id, set()).add((payload["type"], payload["data"]["session_id"]))
    assert all(len(found) == 1 for found in events.values()), "one webhook-id names one event"
    announced = sorted(next(iter(found)) for found in events.values())
    assert announced == sorted([("session.created", s) for s in sessions] + [("turn.completed", first)])
    held = received[0].message_id
    assert sum(r.message_id == held for r in received) >= 2, "the attempt cut off by the SIGKILL was made again"
