"""Credentials on raw gRPC channels, for tests that call the services without the SDK."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import grpc


def metadata(key: str | None = None) -> tuple[tuple[str, str], ...]:
    """`authorization: Bearer <key>`; `key` None: the test run's admin key (ASTRABOX_API_KEY)."""
    return (("authorization", f"Bearer {os.environ['ASTRABOX_API_KEY'] if key is None else key}"),)


class _WithKey:
    """Adds the key to every call that carries no `authorization` of its own (grpc.aio files each
    interceptor under the first call kind it is an instance of: one subclass per kind, below)."""

    def __init__(self, key: str | None) -> None:
        self._metadata = metadata(key)

    def _details(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        given: Sequence[tuple[str, Any]] = tuple(details.metadata or ())
        if any(name == "authorization" for name, _ in given):
            return details
        return details._replace(metadata=grpc.aio.Metadata(*given, *self._metadata))


class _UnaryUnary(_WithKey, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._details(details), request)


class _UnaryStream(_WithKey, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._details(details), request)


class _StreamUnary(_WithKey, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(self._details(details), requests)


class _StreamStream(_WithKey, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(self._details(details), requests)


def channel(address: str, key: str | None = None, **kwargs: Any) -> grpc.aio.Channel:
    """An insecure channel whose calls carry `key` (default: the run's admin key)."""
    interceptors = [kind(key) for kind in (_UnaryUnary, _UnaryStream, _StreamUnary, _StreamStream)]
    return grpc.aio.insecure_channel(address, interceptors=interceptors, **kwargs)
