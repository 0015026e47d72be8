"""The `/metrics` endpoint both halves of the server serve (`--metrics-listen HOST:PORT`).

prometheus_client's own HTTP server, on a thread of its own, serving one process object's registry
(never the global default one, so a test can run a control plane and an agent in one process).
Collectors that read state owned by the event loop (a database, the agent's SQLite) hop onto that
loop with `on_loop`, bounded, and a scrape that cannot get an answer in time leaves the series out
rather than hanging the scraper.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar
from wsgiref.simple_server import WSGIServer

import prometheus_client
from prometheus_client.registry import CollectorRegistry

T = TypeVar("T")

# How long a scrape waits for the event loop's answer before leaving the series out.
LOOP_TIMEOUT_S = 2.0


class MetricsListenError(ValueError):
    """`--metrics-listen` is not HOST:PORT, or cannot be bound; the message says which."""


@dataclass(slots=True)
class MetricsEndpoint:
    """A serving `/metrics` endpoint; `close()` stops it."""

    address: str
    _server: WSGIServer
    _thread: threading.Thread

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve(listen: str, registry: CollectorRegistry) -> MetricsEndpoint:
    """Serve `registry` at http://`listen`/metrics (port 0 picks a free one)."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise MetricsListenError(f"--metrics-listen {listen!r} is not HOST:PORT (e.g. 127.0.0.1:9464)")
    try:
        server, thread = prometheus_client.start_http_server(int(port), addr=host.strip("[]"), registry=registry)
    except OSError as error:
        raise MetricsListenError(f"cannot serve metrics on {listen}: {error.strerror or error}") from None
    bound = server.server_address[1]
    return MetricsEndpoint(f"{host}:{bound}", server, thread)


def on_loop(loop: asyncio.AbstractEventLoop, read: Callable[[], Awaitable[T]]) -> T | None:
    """`read()` run on `loop` from a scrape's thread; None when it fails or takes too long."""
    try:
        return asyncio.run_coroutine_threadsafe(_call(read), loop).result(LOOP_TIMEOUT_S)
    except Exception:
        return None


async def _call(read: Callable[[], Awaitable[T]]) -> T:
    return await read()


class Cached:
    """The last answer of a scrape-time reading, reused for `ttl` seconds: a dashboard refreshing
    every second and several scrapers do not multiply the queries."""

    def __init__(self, ttl: float) -> None:
        self._ttl = ttl
        self._value: object = None
        self._at = float("-inf")
        self._lock = threading.Lock()

    def get(self, read: Callable[[], T | None]) -> T | None:
        with self._lock:
            if time.monotonic() - self._at < self._ttl:
                return self._value  # type: ignore[return-value]
            value = read()
            if value is not None:
                self._value, self._at = value, time.monotonic()
            return value
