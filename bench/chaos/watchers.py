"""Watching clients: each a stream of its own through the clients' proxy, resumed as the SDK's
`watch` resumes (after the last event it delivered), but recording what the stream itself did
wrong (a seq twice, a gap, an error a client must never see) instead of hiding it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import grpc

from astrabox.backoff import Backoff
from astrabox.client import API_KEY_METADATA
from astrabox.sessionkernel.v1 import events_pb2
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as api
from astrabox.sessionkernel.v1 import session_kernel_service_pb2_grpc as api_grpc
from chaos.calls import FORBIDDEN, RETRIED, Calls
from chaos.records import WatcherLog

OnEvent = Callable[[events_pb2.SessionEvent], Awaitable[None]]
_BACKOFF = Backoff(initial=0.1, maximum=2.0)


class Watcher:
    """Follows one session from `log.after_seq` until cancelled (or the session is gone)."""

    def __init__(self, address: str, api_key: str, log: WatcherLog, calls: Calls, on_event: OnEvent | None = None):
        self.log = log
        self._address = address
        self._metadata = ((API_KEY_METADATA, f"Bearer {api_key}"),)
        self._calls = calls
        self._on_event = on_event

    async def run(self) -> None:
        log = self.log
        async with grpc.aio.insecure_channel(self._address) as channel:
            stub = api_grpc.SessionKernelServiceStub(channel)  # type: ignore[no-untyped-call]
            failures = 0
            while True:
                request = api.WatchSessionEventsRequest(session_id=log.session_id, after_seq=log.last_seq)
                call = stub.WatchSessionEvents(request, metadata=self._metadata)
                try:
                    async for response in call:
                        if not self._take(response.event):
                            break
                        failures = 0
                        if self._on_event is not None:
                            await self._on_event(response.event)
                except grpc.aio.AioRpcError as error:
                    code = error.code()
                    self._calls.record("WatchSessionEvents", log.session_id, code, "", error.details() or "")
                    if code == grpc.StatusCode.NOT_FOUND:
                        log.ended = "the session is gone (NOT_FOUND)"
                        return
                    if code not in RETRIED | FORBIDDEN:
                        log.ended = f"{code.name}: {error.details()}"
                        return
                finally:
                    call.cancel()
                log.resumes += 1
                await asyncio.sleep(_BACKOFF.delay(failures))
                failures += 1

    def _take(self, event: events_pb2.SessionEvent) -> bool:
        """Record one event; False when the stream must be re-opened (it skipped a seq)."""
        log, last = self.log, self.log.last_seq
        if event.seq <= last:
            log.anomalies.append(f"seq {event.seq} delivered again after seq {last}")
            return True
        if event.seq != last + 1:
            log.anomalies.append(f"seq {event.seq} delivered after seq {last}: {event.seq - last - 1} skipped")
            return False
        log.received.append((event.seq, event.WhichOneof("payload") or "", event.turn_id))
        return True
