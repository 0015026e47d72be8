"""Every field of every SessionKernelService and AdminService request is bounded, and refusals quote little."""

from __future__ import annotations

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from astrabox.admin.v1 import admin_service_pb2 as admin_pb
from astrabox.credentialstore.v1 import credential_service_pb2 as credential_pb
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as pb
from controlplane import validation
from controlplane.errors import InvalidArgument

SERVICES = [
    pb.DESCRIPTOR.services_by_name["SessionKernelService"],
    admin_pb.DESCRIPTOR.services_by_name["AdminService"],
    credential_pb.DESCRIPTOR.services_by_name["CredentialService"],
]


def request_fields(message: Descriptor, seen: set[str] | None = None) -> set[tuple[str, str]]:
    """(message, field) for every field of `message` and the messages in it, maps as one field."""
    seen = set() if seen is None else seen
    if message.full_name in seen:
        return set()
    seen.add(message.full_name)
    found = set()
    for field in message.fields:
        if field.type == FieldDescriptor.TYPE_MESSAGE and not field.message_type.GetOptions().map_entry:
            found |= request_fields(field.message_type, seen)
        else:
            found.add((message.name, field.name))
    return found


def test_every_request_field_has_a_bound() -> None:
    fields = set().union(*(request_fields(m.input_type) for service in SERVICES for m in service.methods))
    unbounded = sorted(f"{message}.{name}" for message, name in fields if name not in validation.FIELDS)
    assert unbounded == [], "add them to controlplane.validation.FIELDS and document them in the proto"


def refusal(message) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as refused:
        validation.request(message)
    return refused.value


@pytest.mark.parametrize(
    ("message", "reason", "field"),
    [
        (pb.CreateSessionRequest(request_id="r", model="m" * 257), "FIELD_TOO_LONG", "model"),
        (pb.CreateSessionRequest(request_id="r", model="opus\x00"), "INVALID_ARGUMENT", "model"),
        (pb.CreateSessionRequest(request_id="r", labels={f"k{i}": "v" for i in range(65)}), "FIELD_TOO_LONG", "labels"),
        (pb.CreateSessionRequest(request_id="r", labels={"k y": "v"}), "INVALID_ARGUMENT", "labels key"),
        (pb.CreateSessionRequest(request_id="r", labels={"k": "v\n"}), "INVALID_ARGUMENT", "labels['k']"),
        (pb.CreateSessionRequest(request_id="r" * 129), "INVALID_ARGUMENT", "request_id"),
        (pb.GetSessionRequest(session_id="x" * 8 * 2**20), "INVALID_ARGUMENT", "session_id"),
        (pb.ListSessionsRequest(page_token="t" * 513), "PAGE_TOKEN_INVALID", "page_token"),
        (pb.ListSessionsRequest(page_token="a b"), "PAGE_TOKEN_INVALID", "page_token"),
        (pb.SendMessageRequest(text="x" * (256 * 1024 + 1)), "FIELD_TOO_LONG", "text"),
        (pb.SendMessageRequest(text="a\x00b"), "INVALID_ARGUMENT", "text"),
        (pb.RespondToInteractionRequest(deny=pb.DenyTool(message="\x00")), "INVALID_ARGUMENT", "deny.message"),
        (pb.RespondToInteractionRequest(interaction_id="i\x07"), "INVALID_ARGUMENT", "interaction_id"),
        (pb.ListWorkspaceRequest(path="d/" * 2049), "FIELD_TOO_LONG", "path"),
        (pb.ListWorkspaceRequest(path="n" * 256), "FIELD_TOO_LONG", "path"),
        (pb.ListWorkspaceRequest(path="a\x00"), "INVALID_ARGUMENT", "path"),
        (pb.ListWorkspaceRequest(path="a/../.."), "PATH_OUTSIDE_WORKSPACE", "path"),
        (pb.UploadWorkspaceArchiveRequest(chunk=b"x" * (2**20 + 1)), "FIELD_TOO_LONG", "chunk"),
        (pb.RunCommandRequest(command="c" * (64 * 1024 + 1)), "FIELD_TOO_LONG", "command"),
        (pb.RunCommandRequest(command="ls", timeout_ms=-1), "INVALID_ARGUMENT", "timeout_ms"),
        (pb.WatchSessionEventsRequest(after_seq=-1), "INVALID_ARGUMENT", "after_seq"),
        (
            admin_pb.SetQuotasRequest(quotas=admin_pb.Quotas(live_sessions=-1)),
            "INVALID_ARGUMENT",
            "quotas.live_sessions",
        ),
        (
            admin_pb.SetQuotasRequest(quotas=admin_pb.Quotas(message_bytes=256 * 1024 + 1)),
            "INVALID_ARGUMENT",
            "quotas.message_bytes",
        ),
        (
            admin_pb.SetQuotasRequest(quotas=admin_pb.Quotas(upload_bytes=256 * 2**20 + 1)),
            "INVALID_ARGUMENT",
            "quotas.upload_bytes",
        ),
        (admin_pb.GetQuotasRequest(project_id="p" * 65), "FIELD_TOO_LONG", "project_id"),
        (credential_pb.PutCredentialRequest(secret="s" * (16 * 1024 + 1)), "FIELD_TOO_LONG", "secret"),
        (credential_pb.PutCredentialRequest(secret="tok\nen"), "INVALID_ARGUMENT", "secret"),
        (credential_pb.PutCredentialRequest(description="d" * 257), "FIELD_TOO_LONG", "description"),
    ],
)
def test_a_value_out_of_bounds_is_refused_naming_its_field(message, reason, field) -> None:
    refused = refusal(message)
    assert (refused.reason, refused.metadata["field"]) == (reason, field)
    assert len(refused.message) < 300


def test_values_within_bounds_pass() -> None:
    validation.request(
        pb.CreateSessionRequest(
            request_id="r-1", engine="claude_code", model="claude-opus-4-1[1m]", labels={"team/a": "Ünïcode ok 🦀"}
        )
    )
    validation.request(
        pb.SendMessageRequest(
            session_id="8c3e2a38-7f8b-4f7e-9d7b-9a0b6e0f0e0e", client_message_id="m", text="line\n\ttab é🦀" * 1000
        )
    )
    validation.request(pb.ListWorkspaceRequest(path="/".join(["n" * 255] * 16)))
    validation.request(pb.UploadWorkspaceArchiveRequest(chunk=b"\x00" * 2**20))


@pytest.mark.parametrize("value", ["a" * 10_000, "\x00" * 10_000, "\U000e0001" * 10_000, b"\xff" * 10_000, "short"])
def test_an_echo_is_short(value) -> None:
    echoed = validation.echo(value)
    assert len(echoed) <= 2 * validation.ECHO_CHARS + 40
    if len(value) > validation.ECHO_CHARS:
        assert "10000" in echoed  # says how long the value was
    else:
        assert echoed == repr(value)


@pytest.mark.parametrize("secret", ["hunter2-secret\x00", "hunter2-secret\n", "hunter2-secret" * 2000])
def test_a_refused_secret_is_never_quoted(secret) -> None:
    refused = refusal(credential_pb.PutCredentialRequest(name="n", secret=secret))
    assert refused.metadata["field"] == "secret"
    assert "hunter2" not in refused.message
