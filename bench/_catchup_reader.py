"""The reading side of bench/watch_catchup.py, in a process of its own, as a client and its server
are: each mode reads a session's events from seq 0, the watches through the control plane (in the
benchmark's process), the SQL read straight from PostgreSQL (in its own). With the readers in the
control plane's process, a watch's client and server shared one interpreter while the SQL read's
server worked alongside in PostgreSQL's.

`serve_reads` runs in the child: it reads for each mode the parent sends down the pipe and answers
(events read, seconds, this process's CPU seconds), or a line saying why the read failed (then it
exits); None ends it."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection

import asyncpg

from astrabox.client import AstraBoxClient
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as api


def serve_reads(
    pipe: Connection, address: str, api_key: str, dsn: str, session_id: str, last: int, per_response: int, page: int
) -> None:
    asyncio.run(_serve(pipe, address, api_key, dsn, session_id, last, per_response, page))


async def _serve(
    pipe: Connection, address: str, api_key: str, dsn: str, session_id: str, last: int, per_response: int, page: int
) -> None:
    async with AstraBoxClient.connect(address, api_key=api_key) as client:
        # Open for the whole run, as the control plane's pool is (a connection made in each read
        # would count its set-up, and its server process's exit would slow the mode after it).
        sql = await asyncpg.connect(dsn)
        try:
            modes: dict[str, Callable[[], Awaitable[int]]] = {
                "sql": lambda: read_sql(sql, session_id, last, page),
                "watch runs": lambda: read_watch(client, session_id, last, per_response),
                "watch single": lambda: read_watch(client, session_id, last, 0),
                "client watch": lambda: read_client_watch(client, session_id, last),
                "list": lambda: read_list(client, session_id, last),
            }
            while (mode := await asyncio.to_thread(pipe.recv)) is not None:
                gc.collect()  # each read pays for the collections of its own garbage, not of the one before
                began, cpu = time.perf_counter(), time.process_time()
                try:
                    read = await modes[mode]()
                except Exception as error:  # told to the parent, which would otherwise wait out its timeout
                    pipe.send(f"{mode}: {error!r}"[:2000])
                    raise
                pipe.send((read, time.perf_counter() - began, time.process_time() - cpu))
        finally:
            await sql.close()


async def read_sql(conn: asyncpg.Connection, session_id: str, last: int, page: int) -> int:
    read, cursor = 0, 0
    while cursor < last:
        rows = await conn.fetch(
            "SELECT * FROM events WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3", session_id, cursor, page
        )
        read += len(rows)
        cursor = rows[-1]["seq"]
    return read


async def read_watch(client: AstraBoxClient, session_id: str, last: int, per_response: int) -> int:
    runs = {"max_events_per_response": per_response} if per_response else {}  # a tree without it: 0 only
    request = api.WatchSessionEventsRequest(session_id=session_id, **runs)
    call = client._stub.WatchSessionEvents(request, metadata=client._metadata)
    read = 0
    try:
        async for response in call:
            events = (per_response and response.events) or [response.event]
            read += len(events)
            if events[-1].seq >= last:
                return read
    finally:
        call.cancel()
    raise RuntimeError("the watch ended")


async def read_client_watch(client: AstraBoxClient, session_id: str, last: int) -> int:
    read = 0
    async for event in client.watch(session_id):
        read += 1
        if event.seq >= last:
            return read
    raise RuntimeError("the watch ended")


async def read_list(client: AstraBoxClient, session_id: str, last: int) -> int:
    read = 0
    async for _ in client.iter_events(session_id, page_size=1000):
        read += 1
    return read
