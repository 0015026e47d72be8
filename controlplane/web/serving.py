"""Starting the web API: the private socket the gateway calls the gRPC server on, and the HTTP server.

The gRPC server listens, besides its own address, on a unix socket in a fresh 0700 directory, so
only this process's user can reach the calls the gateway makes (they are authenticated like any
other call all the same). The HTTP side is aiohttp; handlers are cancelled when a browser goes
away, which cancels their gRPC call.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
import tempfile
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from aiohttp import web
from google.protobuf import descriptor

from controlplane.web.console import Console
from controlplane.web.gateway import Gateway, internal_errors, routes
from controlplane.web.origins import Origins
from controlplane.web.sign_in import ConsoleSignIn

# How long calls in flight (watchers, downloads) may go on when the server stops; then they are cancelled.
SHUTDOWN_GRACE_S = 2.0
# aiohttp reads no more than this of a request before a handler decides (the gateway bounds bodies itself).
MAX_HEADER_BYTES = 16 * 1024


class WebListenError(OSError):
    """The web API cannot listen where it was told to."""


def _bind(host: str, port: int, listen: str) -> socket.socket:
    """A listening TCP socket on host:port (the first address the host resolves to)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as error:
        raise WebListenError(f"the web API cannot listen on {listen}: {error.strerror or error}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(256)
    except OSError as error:
        sock.close()
        raise WebListenError(f"the web API cannot listen on {listen}: {error.strerror or error}") from None
    return sock


class InternalSocket:
    """A unix socket path in a private directory, removed with the directory on close."""

    def __init__(self) -> None:
        self._directory = Path(tempfile.mkdtemp(prefix="astrabox-web-"))  # 0700
        self.path = self._directory / "grpc.sock"

    @property
    def target(self) -> str:
        return f"unix:{self.path}"

    def close(self) -> None:
        shutil.rmtree(self._directory, ignore_errors=True)


@dataclass(frozen=True, slots=True)
class RunningWeb:
    address: str  # host:port it listens on
    tls: bool

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.address}"


@contextlib.asynccontextmanager
async def serve_web(
    listen: str,
    grpc_target: str,
    services: Sequence[descriptor.ServiceDescriptor],
    extra_origins: Sequence[str],
    max_message_bytes: int,
    tls: ssl.SSLContext | None = None,
    sign_in: ConsoleSignIn | None = None,
) -> AsyncIterator[RunningWeb]:
    """Serve the web API and the console on `listen` (host:port, port 0 picks one; HTTPS with `tls`)
    until the context exits, calling the gRPC server at `grpc_target`."""
    host, _, port_text = listen.rpartition(":")
    host = host.strip("[]")
    channel = grpc.aio.insecure_channel(
        grpc_target,
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
        ],
    )
    runner: web.AppRunner | None = None
    try:
        sock = _bind(host, int(port_text), listen)
        bound = sock.getsockname()[1]
        app = web.Application(middlewares=[internal_errors], handler_args={"max_field_size": MAX_HEADER_BYTES})
        Console(sign_in or ConsoleSignIn(None)).add_to(app)  # first: GET /assets/… is the console's, not a method's
        Gateway(
            channel, routes(services), Origins(bound, extra_origins, "https" if tls else "http"), max_message_bytes
        ).add_to(app)
        runner = web.AppRunner(
            app, handle_signals=False, access_log=None, handler_cancellation=True, shutdown_timeout=SHUTDOWN_GRACE_S
        )
        await runner.setup()
        await web.SockSite(runner, sock, ssl_context=tls).start()
        yield RunningWeb(f"[{host}]:{bound}" if ":" in host else f"{host}:{bound}", tls is not None)
    finally:
        if runner is not None:
            await runner.cleanup()
        await channel.close()
