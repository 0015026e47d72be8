"""Server reflection that `grpcurl describe` can use fully: every symbol a client may ask for,
methods included, and the protos' comments.

grpc_reflection looks symbols up in the process's descriptor pool, which knows no method by its
full name ("Symbol not found" for `describe pkg.Service.Method`) and whose files have lost their
comments. Here the files come from the descriptor set generated with the code
(`astrabox/descriptors.binpb`, source info kept); symbols are still resolved by the process's
pool, a method through its service.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import grpc
from google.protobuf import descriptor, descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection

DESCRIPTOR_SET = "descriptors.binpb"


class _SourceFile:
    """A file as reflection serializes it: its FileDescriptorProto with comments."""

    def __init__(self, proto: descriptor_pb2.FileDescriptorProto, files: _SourcePool) -> None:
        self.name = proto.name
        self._proto = proto
        self._files = files

    @property
    def dependencies(self) -> list[Any]:
        return [self._files.FindFileByName(name) for name in self._proto.dependency]

    def CopyToProto(self, proto: descriptor_pb2.FileDescriptorProto) -> None:
        proto.CopyFrom(self._proto)


class _SourcePool:
    """The pool grpc_reflection reads: files with comments where the set has them, the process's
    own otherwise (health, reflection); symbols and extensions from the process's pool."""

    def __init__(self, files: descriptor_pb2.FileDescriptorSet) -> None:
        self._pool = descriptor_pool.Default()
        self._files = {proto.name: _SourceFile(proto, self) for proto in files.file}

    def FindFileByName(self, name: str) -> Any:
        return self._files.get(name) or self._pool.FindFileByName(name)

    def FindFileContainingSymbol(self, symbol: str) -> Any:
        try:
            found: descriptor.FileDescriptor = self._pool.FindFileContainingSymbol(symbol)
        except KeyError:
            service, _, method = symbol.rpartition(".")
            service_descriptor = self._pool.FindServiceByName(service)  # KeyError: not found, as asked
            if method not in service_descriptor.methods_by_name:
                raise
            found = service_descriptor.file
        return self.FindFileByName(found.name)

    def FindMessageTypeByName(self, name: str) -> Any:
        return self._pool.FindMessageTypeByName(name)

    def FindExtensionByNumber(self, message: Any, number: int) -> Any:
        return self._pool.FindExtensionByNumber(message, number)

    def FindAllExtensions(self, message: Any) -> Any:
        return self._pool.FindAllExtensions(message)


def source_pool() -> _SourcePool:
    data = resources.files("astrabox").joinpath(DESCRIPTOR_SET).read_bytes()
    return _SourcePool(descriptor_pb2.FileDescriptorSet.FromString(data))


def enable(service_names: tuple[str, ...], server: grpc.aio.Server) -> None:
    """Serve reflection for `service_names` (theirs and reflection's own) on `server`."""
    reflection.enable_server_reflection((*service_names, reflection.SERVICE_NAME), server, pool=source_pool())
