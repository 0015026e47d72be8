"""The Connect protocol's wire format (https://connectrpc.com/docs/protocol), as far as the web API
speaks it: codecs, envelopes, timeouts and the error JSON. Pure functions, no I/O.

    unary            POST, Content-Type application/json | application/proto, the message as the body;
                     an error is a non-200 status with the error JSON
    streaming        POST, Content-Type application/connect+json | application/connect+proto; both
                     bodies are envelopes (flags byte, 4-byte big-endian length, message); the response
                     is 200 and ends with an end-of-stream envelope (flag 0x02) holding {"error": …}

Errors carry the gRPC status's details (ErrorInfo, RetryInfo …) as Connect details: the Any's type
name, its value base64 without padding, and a `debug` rendering in JSON for people and curl.
"""

from __future__ import annotations

import base64
import json
import re
import struct
from collections.abc import Iterable, Sequence
from typing import Any

import grpc
from google.protobuf import any_pb2, json_format, symbol_database
from google.protobuf.message import DecodeError, Message
from google.rpc import error_details_pb2, status_pb2

# Registers error_details' types in the default pool, so `debug` can render them.
ERROR_DETAIL_TYPES = (error_details_pb2.ErrorInfo, error_details_pb2.RetryInfo, error_details_pb2.BadRequest)

JSON = "json"
PROTO = "proto"
UNARY_CONTENT_TYPES = {"application/json": JSON, "application/proto": PROTO}
STREAM_CONTENT_TYPES = {"application/connect+json": JSON, "application/connect+proto": PROTO}

ENVELOPE_HEADER = struct.Struct(">BI")
FLAG_COMPRESSED = 0x01
FLAG_END_STREAM = 0x02

# How much of a caller's input an error message repeats.
ECHO_LIMIT = 200
# Connect-Timeout-Ms is at most 10 digits (the protocol's bound).
_TIMEOUT_MS = re.compile(r"[0-9]{1,10}")

# The protocol's HTTP status for each code (connectrpc.com/docs/protocol#error-codes).
HTTP_STATUS = {
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500,
    grpc.StatusCode.UNAUTHENTICATED: 401,
}


def code_name(code: grpc.StatusCode) -> str:
    """The Connect spelling of a code: "invalid_argument"."""
    return str(code.name).lower()


def echo(text: str | bytes) -> str:
    """A bounded, printable echo of a caller's input for an error message."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    shown = text[:ECHO_LIMIT]
    return repr(shown) + (f" … ({len(text)} characters)" if len(text) > ECHO_LIMIT else "")


class ConnectError(Exception):
    """An error the gateway answers itself, before or instead of a gRPC call (a protocol error);
    `reason` goes into an ErrorInfo like the control plane's own errors."""

    def __init__(self, code: grpc.StatusCode, message: str, reason: str, http_status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason
        # Overrides HTTP_STATUS where HTTP has its own word for it (405, 413, 415).
        self.http_status = http_status

    def error_json(self) -> dict[str, Any]:
        info = error_details_pb2.ErrorInfo(reason=self.reason, domain="astrabox.dev")
        return error_json(self.code, self.message, [_packed(info)])

    def status(self) -> int:
        return self.http_status or HTTP_STATUS[self.code]


def _packed(message: Message) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def error_json(code: grpc.StatusCode, message: str, details: Iterable[Any]) -> dict[str, Any]:
    """The Connect error object: code, message and the status's details."""
    error: dict[str, Any] = {"code": code_name(code)}
    if message:
        error["message"] = message
    rendered = [_detail(detail) for detail in details]
    if rendered:
        error["details"] = rendered
    return error


def _detail(packed: Any) -> dict[str, Any]:
    type_name = packed.TypeName()
    detail: dict[str, Any] = {
        "type": type_name,
        "value": base64.b64encode(packed.value).decode().rstrip("="),
    }
    try:
        message = symbol_database.Default().GetSymbol(type_name)()
        message.ParseFromString(packed.value)
        detail["debug"] = json_format.MessageToDict(message)
    except (KeyError, DecodeError):
        pass  # a type this process does not know: the value alone
    return detail


def status_details(trailing_metadata: Sequence[tuple[str, str | bytes]] | None) -> list[Any]:
    """The details of a gRPC error's rich status (grpc-status-details-bin), [] when it has none."""
    for key, value in trailing_metadata or ():
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            try:
                return list(status_pb2.Status.FromString(value).details)
            except DecodeError:
                return []
    return []


def timeout_seconds(header: str | None) -> float | None:
    """Connect-Timeout-Ms as seconds; None when absent. ConnectError when malformed."""
    if header is None:
        return None
    if not _TIMEOUT_MS.fullmatch(header):
        raise ConnectError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"Connect-Timeout-Ms must be 1 to 10 digits (milliseconds), not {echo(header)}",
            "MALFORMED_REQUEST",
        )
    return int(header) / 1000


def decode(codec: str, data: bytes, message_type: type[Message]) -> Message:
    """A request message from its JSON or binary form; ConnectError INVALID_ARGUMENT when malformed.
    Unknown JSON fields are ignored, as Connect servers do, so newer clients work with older servers."""
    message = message_type()
    try:
        if codec == JSON:
            json_format.Parse(data.decode("utf-8") if data else "{}", message, ignore_unknown_fields=True)
        else:
            message.ParseFromString(data)
    except (json_format.ParseError, UnicodeDecodeError, DecodeError, RecursionError) as error:
        raise ConnectError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"the body is not a valid {message_type.DESCRIPTOR.full_name} in {codec.upper()}: "
            f"{echo(str(error))}; body {echo(data)}",
            "MALFORMED_REQUEST",
        ) from None
    return message


def encode(codec: str, message: Message) -> bytes:
    if codec == JSON:
        return json.dumps(json_format.MessageToDict(message), separators=(",", ":")).encode()
    return message.SerializeToString()


def envelope(data: bytes, flags: int = 0) -> bytes:
    return ENVELOPE_HEADER.pack(flags, len(data)) + data


def end_of_stream(error: dict[str, Any] | None) -> bytes:
    """The last envelope of a streaming response: {} when the call succeeded."""
    body = {"error": error} if error is not None else {}
    return envelope(json.dumps(body, separators=(",", ":")).encode(), FLAG_END_STREAM)
