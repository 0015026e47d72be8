"""Pages of a session's journal bounded by bytes as well as by count, on a real PostgreSQL and a real
gRPC server: large events are listed in pages a default gRPC client takes, a watcher behind never
reads more than its page's budget (plus one event) at a time, and nothing is lost, reordered or
repeated: events journaled before their sizes were (no `payload_offset`) included."""

from __future__ import annotations

import json

import pytest

from astrabox.client import AstraBoxClient
from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane import kernel as kernel_module
from controlplane.journal import ClientPage, EventKind, NewEvent, StoredEvent
from controlplane.kernel import LIST_PAGE_BYTES, CreateSession
from tests.controlplane.conftest import Plane

# What a gRPC client accepts by default, and so what a page of ListSessionEvents must stay within.
CLIENT_LIMIT = 4 * 1024 * 1024

# Texts of the journal: small ones and large ones, ASCII and not (4-byte UTF-8 characters, escapes
# that JSON writes long and PostgreSQL short, quotes that it writes long in both).
TEXTS = [
    "short",
    "x" * 900_000,
    "🚀" * 225_000,  # 900,000 bytes of UTF-8
    'é\\u00e9"\n' * 60_000,
    "\U0001d518" * 10,
    "y" * 2_600_000,  # alone larger than a list page's budget
    "z" * 700_000,
    "",
    "🚀" * 300_000,
    "w" * 800_000,
]


async def journal_texts(plane: Plane, texts: list[str]) -> str:
    """A session whose journal holds `texts` as engine messages, in order: by turns, written both by
    the agent's outputs (the relay's path) and by the control plane's own appends, with a small event
    of another kind between some."""
    await plane.connect_agent()
    session_id = (await plane.kernel.create_session(CreateSession("pages", plane.project_id))).session_id
    await plane.runtime_started(session_id)
    for n, text in enumerate(texts):
        message = {"message_id": f"msg_{n}", "content": [{"type": "text", "text": text}]}
        if n % 2:
            engine = runner_pb2.EngineMessage(type_name="AssistantMessage", payload_json=json.dumps(message))
            await plane.report(session_id, engine_message=engine)
        else:
            async with plane.journal.transaction() as tx:
                events = [NewEvent(EventKind.ENGINE_MESSAGE, {"type_name": "AssistantMessage", "message": message})]
                if n % 3 == 0:
                    events.append(NewEvent(EventKind.PERMISSION_MODE_CHANGED, {"mode": "plan"}))
                await tx.append(session_id, events)
    return session_id


def texts_of(events) -> list[str]:
    return [
        json.loads(e.engine_message.payload_json)["content"][0]["text"] for e in events if e.HasField("engine_message")
    ]


class PageSpy:
    """Records every page the journal reads for clients: its events' payload sizes as journaled."""

    def __init__(self, plane: Plane) -> None:
        self.pages: list[list[int]] = []
        read = plane.journal.read_for_clients
        pool = plane.pool

        async def spied(session_id: str, after_seq: int, limit: int, max_bytes: int) -> ClientPage:
            page = await read(session_id, after_seq, limit, max_bytes)
            if page.rows:
                sizes = await pool.fetch(
                    "SELECT coalesce(payload_bytes, octet_length(payload::text)) AS size FROM events"
                    " WHERE session_id = $1 AND seq = ANY($2::bigint[]) ORDER BY seq",
                    session_id,
                    [row["seq"] for row in page.rows],
                )
                self.pages.append([r["size"] for r in sizes])
            return page

        plane.journal.read_for_clients = spied  # type: ignore[method-assign]


async def test_events_lie_end_to_end_in_their_session_whichever_path_wrote_them(plane: Plane) -> None:
    session_id = await journal_texts(plane, TEXTS)
    rows = await plane.pool.fetch(
        "SELECT seq, payload_bytes, payload_offset, octet_length(payload::text) AS rendered FROM events"
        " WHERE session_id = $1 ORDER BY seq",
        session_id,
    )
    offset = 0  # a new session's first payload starts at 0
    for row in rows:
        assert row["payload_offset"] == offset, row
        # The size as written; PostgreSQL renders it at most about 1.5 times as long.
        assert 0 < row["rendered"] <= 1.5 * row["payload_bytes"] + 16
        offset += row["payload_bytes"]
    assert await plane.pool.fetchval("SELECT payload_bytes FROM sessions WHERE session_id = $1", session_id) == offset


async def test_large_events_are_listed_in_pages_a_default_client_takes(plane: Plane, client: AstraBoxClient) -> None:
    session_id = await journal_texts(plane, TEXTS)
    last = (await plane.kernel.get_session(session_id)).last_seq
    pages = []
    token = ""
    while True:
        page = await client.list_events(session_id, page_size=1000, page_token=token)
        pages.append(page)
        if not (token := page.next_page_token):
            break
    events = [e for page in pages for e in page.events]
    assert [e.seq for e in events] == list(range(1, last + 1))
    assert texts_of(events) == TEXTS
    # Each response within what the client took; the 2.6 MB event, larger than a page's budget alone,
    # came on a page of its own.
    assert all(page.ByteSize() < CLIENT_LIMIT for page in pages)
    assert len(pages) > 3
    alone = [page for page in pages if any(len(e.engine_message.payload_json) > LIST_PAGE_BYTES for e in page.events)]
    assert len(alone) == 1 and len(alone[0].events) == 1
    # Nothing after the last page, and a small session still fits one page with no token.
    assert not (await client.list_events(session_id, after_seq=last)).events


async def test_a_watcher_behind_reads_pages_within_their_budget_and_misses_nothing(
    plane: Plane, monkeypatch: pytest.MonkeyPatch
) -> None:
    budget = 1_000_000
    monkeypatch.setattr(kernel_module, "WATCH_PAGE_BYTES", budget)
    session_id = await journal_texts(plane, TEXTS * 2)
    last = (await plane.kernel.get_session(session_id)).last_seq
    spy = PageSpy(plane)
    got: list[StoredEvent] = []
    async for item in plane.kernel.watch(session_id, 0):
        assert isinstance(item, StoredEvent)
        got.append(item)
        if item.seq == last:
            break
    assert [e.seq for e in got] == list(range(1, last + 1))
    texts = [json.loads(e.message_json)["content"][0]["text"] for e in got if e.message_json is not None]
    assert texts == TEXTS * 2
    # Every page (read ahead included) held at most its budget, or one event alone: none of the
    # journal's 20 MB was read at once.
    assert len(spy.pages) > 5
    for sizes in spy.pages:
        assert sum(sizes) <= budget or len(sizes) == 1, sizes


async def test_events_journaled_before_their_sizes_are_paged_whole(plane: Plane, client: AstraBoxClient) -> None:
    session_id = await journal_texts(plane, ["a" * 300_000] * 6 + TEXTS)
    # The first eight as a control plane before migration 0031 left them: no size, no offset.
    await plane.pool.execute(
        "UPDATE events SET payload_bytes = NULL, payload_offset = NULL WHERE session_id = $1 AND seq <= 8",
        session_id,
    )
    last = (await plane.kernel.get_session(session_id)).last_seq
    listed = [e async for e in client.iter_events(session_id, page_size=1000)]
    assert [e.seq for e in listed] == list(range(1, last + 1))
    assert texts_of(listed) == ["a" * 300_000] * 6 + TEXTS
    for after in (1, 5, 7, 8, 9, 12, last - 1):  # from old rows or new, the rest comes whole and in order
        rest = [e async for e in client.iter_events(session_id, after_seq=after, page_size=1000)]
        assert [e.seq for e in rest] == list(range(after + 1, last + 1))


async def test_an_event_larger_than_a_default_grpc_message_is_watched_and_listed(
    plane: Plane, client: AstraBoxClient
) -> None:
    # An image a tool read, say: 6 MB of base64, more than the 4 MiB gRPC takes by default.
    image = "iVBORw0KGgo" * 550_000
    session_id = await journal_texts(plane, ["before", image, "after"])
    last = (await plane.kernel.get_session(session_id)).last_seq
    watched = []
    async for event in client.watch(session_id):
        watched.append(event)
        if event.seq == last:
            break
    listed = [e async for e in client.iter_events(session_id)]
    assert texts_of(watched) == texts_of(listed) == ["before", image, "after"]
