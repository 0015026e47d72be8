"""The resuming watch behind `AstraBoxClient.watch`: a session's events after a seq, stored then
live, each seq exactly once and in order, the stream re-opened after the last event delivered
whenever the server, its database or the connection goes away (see `AstraBoxClient.watch`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from typing import Any

import grpc

from astrabox.backoff import Backoff
from astrabox.errors import AstraBoxError
from astrabox.events import Delta
from astrabox.sessionkernel.v1 import events_pb2
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as api

# The client's logger: a watch's resumptions are the client's to report.
log = logging.getLogger("astrabox.client")

WATCH_ADMITTED = "astrabox-watch"
"""Metadata key of the headers a server sends as soon as it has admitted a watch, before any event."""

# Codes after which a watch is resumed rather than surfaced: the server, its
# database or the connection went away (a server shutting down cancels its
# streams), or the server asks for a re-read (ABORTED).
_RESUMABLE = frozenset({
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
})  # fmt: skip
# A stream reset on the way (a proxy or load balancer cutting it) reads as INTERNAL or UNKNOWN
# without an ErrorInfo; the service's own answers always carry one.
_RESET = frozenset({grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN})
WATCH_GIVE_UP_AFTER = 600.0
"""Seconds `watch` goes on trying to resume by default before it raises the last error."""
# A watch behind gets up to this many events per response (a server that predates `events` sends one each).
_WATCH_EVENTS_PER_RESPONSE = 500


async def watch_events(
    stub: Any,
    metadata: tuple[tuple[str, str], ...],
    reconnect: Backoff,
    session_id: str,
    after_seq: int,
    give_up_after: float | None,
    deltas: bool,
) -> AsyncGenerator[events_pb2.SessionEvent | Delta, None]:
    """`AstraBoxClient.watch`: the calls on `stub` with `metadata`, resumed with `reconnect`."""
    loop = asyncio.get_running_loop()
    last = after_seq
    failures = 0
    failing_since: float | None = None
    while True:
        request = api.WatchSessionEventsRequest(
            session_id=session_id,
            after_seq=last,
            include_deltas=deltas,
            max_events_per_response=_WATCH_EVENTS_PER_RESPONSE,
            omit_content=True,  # the SDK reads payload_json itself (astrabox.messages)
        )
        call = stub.WatchSessionEvents(request, metadata=metadata)
        error: AstraBoxError | None = None
        try:
            if WATCH_ADMITTED in dict(await call.initial_metadata() or ()):
                failing_since = None
            gap = False
            async for response in call:
                if response.HasField("delta"):
                    yield Delta.from_proto(response.delta)
                    continue
                # Several events when behind; one in `event` from a server that predates `events`.
                for event in response.events or [response.event]:
                    if event.seq <= last:
                        continue  # already delivered
                    if event.seq != last + 1:
                        log.warning("watch gap: expected seq %d, got %d; resuming", last + 1, event.seq)
                        gap = True
                        break
                    last, failures, failing_since = event.seq, 0, None
                    yield event
                if gap:
                    break
            else:
                log.info("watch stream of %s ended after seq %d; resuming", session_id, last)
        except grpc.aio.AioRpcError as rpc_error:
            error = AstraBoxError.from_rpc_error(rpc_error)
            if not _resumable(error):
                raise error from rpc_error
            log.info("watch of %s interrupted after seq %d (%s); resuming", session_id, last, error)
        finally:
            call.cancel()
        now = loop.time()
        failing_since = now if failing_since is None else failing_since
        if give_up_after is not None and now - failing_since >= give_up_after:
            raise error or AstraBoxError(
                grpc.StatusCode.UNAVAILABLE, f"the watch of {session_id} could not resume in {give_up_after:g}s"
            )
        await asyncio.sleep(reconnect.delay(failures))
        failures += 1


def _resumable(error: AstraBoxError) -> bool:
    """Whether a watch that failed with `error` is resumed."""
    return error.code in _RESUMABLE or (error.code in _RESET and not error.reason)
