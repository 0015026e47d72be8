"""What the egress proxy adds to a request: the same GET to a loopback HTTP server, direct and
through the agent's egress proxy (its unix socket, a LIMITED policy naming the server), one at a
time, interleaved, in one run. Timed on the client (perf_counter around a whole request on a fresh
connection, as the proxy serves one request per connection). The proxy is called over its socket
from this process: the sandbox's socat relay is not part of the measurement.

Prints the median (and p90) of each and the ratio of medians. Timings are printed, never asserted.

    python bench/egress_proxy.py --requests 500
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import logging
import tempfile
import time
from pathlib import Path

import structlog
from _common import percentile

from astrabox.environments.v1 import environment_pb2 as env_pb
from dataplane_agent.engines.mcp_destinations import parse_networks
from dataplane_agent.routes.egress.bindings import NoBindings
from dataplane_agent.routes.egress.policy import EgressPolicy
from dataplane_agent.routes.egress.proxy import EgressProxy


async def _origin() -> tuple[asyncio.Server, int]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _request(opened: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]], request: bytes) -> float:
    began = time.perf_counter()
    reader, writer = await opened
    writer.write(request)
    await writer.drain()
    answer = await reader.read()
    writer.close()
    elapsed = time.perf_counter() - began
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok"), answer[:200]
    return elapsed


async def main(requests: int) -> None:
    server, port = await _origin()
    with tempfile.TemporaryDirectory() as directory:
        proxy = EgressProxy(Path(directory), NoBindings(), allowed_networks=parse_networks("127.0.0.0/8"))
        async with proxy:
            network = env_pb.NetworkPolicy(mode=env_pb.NETWORK_MODE_LIMITED, allowed_hosts=[f"localhost:{port}"])
            proxy.register("bench", EgressPolicy.from_proto(env_pb.EnvironmentSpec(network=network), None, ()))
            userinfo = proxy.env("bench")["HTTP_PROXY"].removeprefix("http://").rpartition("@")[0]
            auth = base64.b64encode(userinfo.encode()).decode()
            direct_request = f"GET /x HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n".encode()
            proxied_request = (
                f"GET http://localhost:{port}/x HTTP/1.1\r\nHost: localhost:{port}\r\n"
                f"Proxy-Authorization: Basic {auth}\r\n\r\n"
            ).encode()
            direct: list[float] = []
            proxied: list[float] = []
            for _ in range(requests):
                direct.append(
                    await _request(asyncio.ensure_future(asyncio.open_connection("127.0.0.1", port)), direct_request)
                )
                proxied.append(
                    await _request(
                        asyncio.ensure_future(asyncio.open_unix_connection(str(proxy.socket))), proxied_request
                    )
                )
    server.close()
    d50, p50 = percentile(direct, 50), percentile(proxied, 50)
    print("| path | p50 ms | p90 ms |\n|---|---|---|")
    print(f"| direct | {d50 * 1000:.3f} | {percentile(direct, 90) * 1000:.3f} |")
    print(f"| egress proxy | {p50 * 1000:.3f} | {percentile(proxied, 90) * 1000:.3f} |")
    print(f"ratio of medians (proxy / direct): {p50 / d50:.2f} over {requests} requests each")


if __name__ == "__main__":
    # As the agent runs: no per-request debug line.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300)
    asyncio.run(main(parser.parse_args().requests))
