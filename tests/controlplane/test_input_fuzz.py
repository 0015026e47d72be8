"""Thousands of generated requests, plausible and hostile, to every SessionKernelService RPC of a
real control plane (gRPC over a socket, real PostgreSQL): NUL characters, megabytes, unicode,
control characters, forged page tokens, and bytes that are no protobuf at all.

Whatever comes back is a documented answer: OK, or a code and ErrorInfo reason listed in the
service's comment in session_kernel_service.proto; never UNKNOWN or INTERNAL; and the message is
short and never carries the oversized input back. Every mutating call, refused or not, leaves
exactly one audit record, its identifiers escaped and bounded. A seeded generator rather than
hypothesis: one server and database for the whole run, the same requests every run.
"""

from __future__ import annotations

import asyncio
import random
import re
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import asyncpg
import grpc
import pytest
import pytest_asyncio
from google.protobuf.message import Message

from astrabox.admin.v1 import admin_service_pb2 as admin_pb2
from astrabox.runner.v1 import runner_service_pb2
from astrabox.sessionkernel.v1 import session_kernel_service_pb2 as pb
from astrabox.sessionkernel.v1 import session_kernel_service_pb2_grpc as pb_grpc
from controlplane import errors
from controlplane.edge import MALFORMED_REQUEST
from controlplane.forwarding import SECRET_METADATA, read_cluster_secret
from controlplane.identity import audit
from controlplane.identity.callers import Caller, Role
from controlplane.identity.rules import RULES
from controlplane.kernel import CreateSession
from controlplane.server import RunningControlPlane, serve
from controlplane.settings import ControlPlaneSettings
from controlplane.status import ERROR_DOMAIN, code_for, error_info
from controlplane.validation import FIELD_TOO_LONG, PAGE_TOKEN_INVALID
from serverkit import versions
from tests.support import admission, auth
from tests.support.kernel_requests import MB, Values, garbage, refusable, request_for

PROTO = Path(__file__).resolve().parents[2] / "proto/astrabox/sessionkernel/v1/session_kernel_service.proto"
SERVICE = pb.DESCRIPTOR.services_by_name["SessionKernelService"]
SEED = 20240808
REQUESTS_PER_RPC = 200
RAW_REQUESTS_PER_RPC = 30
CONCURRENCY = 16
MAX_DETAILS = 1024


def documented_reasons() -> dict[str, set[grpc.StatusCode]]:
    """The reasons the proto's service comment lists, each with its codes: `//   REASON  (CODE, CODE) …`."""
    lines = re.findall(r"^//   ([A-Z][A-Z_]+) +\(([A-Z_, ]+)\)", PROTO.read_text(), re.MULTILINE)
    return {reason: {grpc.StatusCode[c.strip()] for c in codes.split(",")} for reason, codes in lines}


DOCUMENTED = documented_reasons()


def test_the_proto_lists_every_reason_of_the_control_plane() -> None:
    assert DOCUMENTED["PATH_OUTSIDE_WORKSPACE"] == {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED}
    domain_errors = [errors.Internal("ref"), errors.SessionNotFound("s"), errors.InvalidArgument("f", "m")]
    domain_errors += [
        kind("m")
        for kind in vars(errors).values()
        if isinstance(kind, type)
        and issubclass(kind, errors.KernelError)
        and kind.__init__ is errors.KernelError.__init__
    ]
    assert len(domain_errors) >= 10
    for error in domain_errors:
        assert code_for(error) in DOCUMENTED[error.reason], error
    for reason in (FIELD_TOO_LONG, PAGE_TOKEN_INVALID, MALFORMED_REQUEST, "PERMISSION_MODE_INVALID"):
        assert DOCUMENTED[reason] == {grpc.StatusCode.INVALID_ARGUMENT}


# ---- answers -----------------------------------------------------------------------------------


@dataclass
class Seen:
    answers: dict[tuple[str, str], int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def ok(self, rpc: str, refuse: bool) -> None:
        self.answers[(rpc, "OK")] = self.answers.get((rpc, "OK"), 0) + 1
        if refuse:
            self.problems.append(f"{rpc}: OK for a request with a NUL or more than 1 MiB")

    def error(self, rpc: str, error: grpc.aio.AioRpcError, long_prefixes: set[str], refuse: bool) -> None:
        code, details = error.code(), error.details() or ""
        info = error_info(error)
        reason = info.reason if info else "<no ErrorInfo>"
        key = (rpc, f"{code.name}/{reason}")
        self.answers[key] = self.answers.get(key, 0) + 1
        where = f"{rpc}: {code.name} {reason} {details[:200]!r}"
        if code in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL):
            self.problems.append(f"{where}: never UNKNOWN or INTERNAL")
        if info is None or info.domain != ERROR_DOMAIN:
            self.problems.append(f"{where}: no ErrorInfo of {ERROR_DOMAIN}")
        elif code not in DOCUMENTED.get(info.reason, set()):
            self.problems.append(f"{where}: not a documented reason and code")
        if refuse and code is not grpc.StatusCode.INVALID_ARGUMENT:
            self.problems.append(f"{where}: not INVALID_ARGUMENT for a request with a NUL or more than 1 MiB")
        if len(details) >= MAX_DETAILS:
            self.problems.append(f"{where}: a message of {len(details)} characters")
        if info is not None and sum(len(k) + len(v) for k, v in info.metadata.items()) >= MAX_DETAILS:
            self.problems.append(f"{where}: ErrorInfo metadata of more than {MAX_DETAILS} characters")
        if any(prefix in details for prefix in long_prefixes):
            self.problems.append(f"{where}: echoes 100 characters of input or more")


def more_of(rpc: str, values: Values) -> Message:
    """A later message of a client stream: an upload's chunk, a terminal's keystrokes or size."""
    if rpc == "OpenTerminal":
        return pb.OpenTerminalRequest(input=values.chunk(), size=values.rng.choice([None, values.terminal_size()]))
    return pb.UploadWorkspaceArchiveRequest(chunk=values.chunk())


async def read_some(call: grpc.aio.UnaryStreamCall, quiet: float | None) -> None:
    """Read a streaming answer until it ends, or stays `quiet` that long (a watch follows live
    events forever); a call the server ended with an error raises it from `read`."""
    try:
        while True:
            if await asyncio.wait_for(call.read(), quiet) is grpc.aio.EOF:
                return
    except TimeoutError:
        pass
    finally:
        call.cancel()


async def exchange(
    channel: grpc.aio.Channel,
    rpc: str,
    request: Message | bytes,
    more: list[bytes | Message] | None = None,
    refused: bool = False,
) -> None:
    """Make one call; raw `bytes` go out as they are. Raises AioRpcError for a refusal."""
    method = SERVICE.methods_by_name[rpc]
    path = f"/{SERVICE.full_name}/{rpc}"
    raw = isinstance(request, bytes)
    serialize = None if raw else type(request).SerializeToString
    output = getattr(pb, method.output_type.name)
    deserialize = None if raw else output.FromString
    if method.client_streaming and method.server_streaming:  # OpenTerminal
        both = channel.stream_stream(path, request_serializer=serialize, response_deserializer=deserialize)
        await read_some(both(iter([request, *(more or [])])), None)
    elif method.client_streaming:
        call = channel.stream_unary(path, request_serializer=serialize, response_deserializer=deserialize)
        await call(iter([request, *(more or [])]))
    elif method.server_streaming:
        call = channel.unary_stream(path, request_serializer=serialize, response_deserializer=deserialize)
        # A watch follows live events forever: read until it is quiet, unless it must be refused (then
        # until the refusal comes, however loaded the machine).
        await read_some(call(request), 0.3 if rpc == "WatchSessionEvents" and not refused else None)
    else:
        await channel.unary_unary(path, request_serializer=serialize, response_deserializer=deserialize)(request)


# ---- the audit trail ---------------------------------------------------------------------------

# What a recorded text may be at most: MAX_RECORDED_CHARS, then the marker of what was cut.
MAX_RECORDED = audit.MAX_RECORDED_CHARS + len("…[99999999 more characters]")


def mutates(service: str, rpc: str) -> bool:
    return RULES[f"/{service}/{rpc}"].mutates


async def audited_calls(pool: asyncpg.Pool) -> Counter[str]:
    """How many audit records each method has."""
    rows = await pool.fetch("SELECT method, count(*) AS n FROM audit_records GROUP BY method")
    return Counter({row["method"]: row["n"] for row in rows})


async def audit_problems(pool: asyncpg.Pool, expected: Counter[str]) -> list[str]:
    """What is wrong with the audit trail, given the mutating calls made per method: a call with no
    record or more than one (waited for a while: a call's record is written as it ends), a text not
    escaped or not bounded."""
    for _ in range(100):
        found = await audited_calls(pool)
        if found == expected:
            break
        await asyncio.sleep(0.1)
    problems = [
        f"{method}: {found[method]} audit records for {n} calls" for method, n in expected.items() if found[method] != n
    ]
    problems += [f"{method}: {n} audit records, no such calls" for method, n in found.items() if method not in expected]
    for row in await pool.fetch("SELECT actor, method, details, code FROM audit_records"):
        texts = [row["actor"], row["method"], row["code"], *row["details"], *row["details"].values()]
        for text in texts:
            if len(text) > MAX_RECORDED or any(ord(c) < 0x20 or 0xD800 <= ord(c) <= 0xDFFF for c in text):
                problems.append(f"{row['method']}: an audit text not escaped or bounded: {text[:200]!r}")
    return problems


# ---- the run -----------------------------------------------------------------------------------


@pytest_asyncio.fixture
async def control_plane(
    database_url: str, plane, bootstrap_key_file: str
) -> AsyncIterator[tuple[RunningControlPlane, list[str]]]:
    """A control plane with an agent on record (not attached) and sessions: creating, ready, archived."""
    await plane.connect_agent(capacity=1000)
    sessions = [
        (
            await plane.kernel.create_session(CreateSession(request_id=f"fuzz-{i}", project_id=plane.project_id))
        ).session_id
        for i in range(3)
    ]
    await plane.runtime_started(sessions[1])
    await plane.kernel.archive_session(sessions[2], "")
    settings = ControlPlaneSettings(
        database_url=database_url,
        listen="127.0.0.1:0",
        lease_ttl=timedelta(minutes=10),
        idle_stop_after=timedelta(0),
        bootstrap_key_file=bootstrap_key_file,
        **admission.AUTOMATIC,
    )
    async with serve(settings) as running:
        yield running, sessions


async def test_every_rpc_answers_generated_input_with_a_documented_status(control_plane) -> None:
    running, sessions = control_plane
    rng = random.Random(SEED)
    values = Values(rng, sessions)
    seen = Seen()
    jobs: list[tuple[str, Message | bytes, list[bytes | Message]]] = []
    for method in SERVICE.methods:
        for _ in range(REQUESTS_PER_RPC):
            request = request_for(method.name, values)
            more: list[bytes | Message] = []
            if method.client_streaming:
                more = [more_of(method.name, values) for _ in range(rng.randrange(3))]
            jobs.append((method.name, request, more))
        for _ in range(RAW_REQUESTS_PER_RPC):
            valid = request_for(method.name, values).SerializeToString()
            jobs.append((method.name, garbage(rng, valid), [garbage(rng, valid)] if method.client_streaming else []))
    rng.shuffle(jobs)
    calls = Counter(rpc for rpc, _, _ in jobs if mutates(SERVICE.full_name, rpc))

    limit = asyncio.Semaphore(CONCURRENCY)
    options = [("grpc.max_send_message_length", 64 * MB), ("grpc.max_receive_message_length", 64 * MB)]
    async with auth.channel(running.address, options=options) as channel:

        async def one(rpc: str, request: Message | bytes, more: list[bytes | Message]) -> None:
            # Only the first message of an upload is read before its session is looked up.
            refuse = isinstance(request, Message) and refusable(request)
            async with limit:
                try:
                    await asyncio.wait_for(exchange(channel, rpc, request, more, refused=refuse), 60)
                    seen.ok(rpc, refuse)
                except grpc.aio.AioRpcError as error:
                    seen.error(rpc, error, values.long_prefixes, refuse)

        await asyncio.gather(*(one(*job) for job in jobs))

        # The server still answers, and every RPC was reached.
        answer = await pb_grpc.SessionKernelServiceStub(channel).GetSession(
            pb.GetSessionRequest(session_id=sessions[1])
        )
        assert answer.session.session_id == sessions[1]

    assert seen.problems == [], "\n".join(sorted(set(seen.problems))[:40])
    assert len(jobs) >= 3000
    reached = {rpc for rpc, _ in seen.answers}
    assert reached == {m.name for m in SERVICE.methods}
    refusals = {answer.split("/")[1] for _, answer in seen.answers if answer != "OK"}
    assert {"INVALID_ARGUMENT", "FIELD_TOO_LONG", "MALFORMED_REQUEST", "PAGE_TOKEN_INVALID"} <= refusals
    # Valid workspace calls reach the (unattached) agent's turn: the session has no runtime, or no stream here.
    assert {"RUNTIME_NOT_AVAILABLE", "AGENT_NOT_CONNECTED"} <= refusals

    # Every mutating call, refused or not, left exactly one audit record, whatever its identifiers held.
    assert sum(calls.values()) >= 2000
    problems = await audit_problems(running.pool, calls)
    assert problems == [], "\n".join(problems[:40])
    values = [
        v for row in await running.pool.fetch("SELECT details FROM audit_records") for v in row["details"].values()
    ]
    escaped = sum("\\x00" in value for value in values)
    cut = sum(value.endswith(" more characters]") for value in values)
    assert escaped > 100 and cut > 100, (escaped, cut)


async def test_bytes_that_are_no_request_are_invalid_argument(control_plane) -> None:
    running, _ = control_plane
    async with auth.channel(running.address) as channel:
        for method in SERVICE.methods:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await asyncio.wait_for(exchange(channel, method.name, b"\xff\xfe\xfd"), 30)
            info = error_info(refused.value)
            assert (refused.value.code(), info and info.reason) == (
                grpc.StatusCode.INVALID_ARGUMENT,
                "MALFORMED_REQUEST",
            )
            assert refused.value.details() == f"the request is not a valid {method.input_type.name} message"


async def test_bytes_that_are_no_request_to_the_runner_service_are_invalid_argument(control_plane) -> None:
    """The agents' and replicas' service is reachable by anyone who reaches the port: garbage is refused
    as clearly there, before any credential is looked at."""
    running, _ = control_plane
    runner = runner_service_pb2.DESCRIPTOR.services_by_name["RunnerService"]
    # Replicas present the cluster secret before their requests are read.
    replica = ((SECRET_METADATA, await read_cluster_secret(running.pool)),)
    rng = random.Random(SEED)
    async with grpc.aio.insecure_channel(running.address) as channel:
        for method in runner.methods:
            for body in (b"\xff\xfe\xfd", bytes(rng.randrange(256) for _ in range(4096))):
                call = channel.stream_stream(f"/{runner.full_name}/{method.name}")
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    async with asyncio.timeout(30):
                        async for _ in call(iter([body]), metadata=replica):
                            pass
                info = error_info(refused.value)
                assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
                assert info is not None and info.reason == "MALFORMED_REQUEST"


async def test_an_agent_stream_that_turns_to_garbage_is_refused_as_malformed(control_plane) -> None:
    """After a valid Hello and its Welcome, bytes that are no ConnectRequest end the stream with
    INVALID_ARGUMENT, not with OK or UNKNOWN."""
    running, _ = control_plane
    hello = runner_service_pb2.ConnectRequest(
        hello=runner_service_pb2.Hello(
            agent_id="garbage-agent",
            agent_credential="c" * 43,
            enrollment_token=admission.TOKEN,
            instance_id="i1",
            agent_version=versions.VERSION,
        )
    )
    connect = "/astrabox.runner.v1.RunnerService/Connect"
    async with grpc.aio.insecure_channel(running.address) as channel:
        call = channel.stream_stream(connect)(iter([hello.SerializeToString(), b"\xff\xfe\xfd" * 100]))
        answers = []
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            async with asyncio.timeout(30):
                async for answer in call:
                    answers.append(runner_service_pb2.ConnectResponse.FromString(answer))
        assert answers and answers[0].WhichOneof("message") == "welcome"
        info = error_info(refused.value)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and info is not None
        assert info.reason == "MALFORMED_REQUEST"


# ---- the operator's RPCs (AdminService) -----------------------------------------------------------

ADMIN = admin_pb2.DESCRIPTOR.services_by_name["AdminService"]
# AdminService's RPCs this run reaches (the older ones are covered by test_authorization and test_tenancy).
OPERATOR_RPCS = ("GetStatus", "CordonAgent", "UncordonAgent", "DrainAgent")


def admin_request_for(rpc: str, v: Values) -> Message:
    rng = v.rng
    agent_id = v.either(lambda: rng.choice(["agent-1", "agent-2", "Agent-1", "x" * 128]))
    if rpc == "GetStatus":
        token = rng.choice(["", "YWdlbnQtMQ==", "%%%", v.token()])
        return admin_pb2.GetStatusRequest(page_size=rng.choice([0, 1, 500, 501, -1, 2**31 - 1]), page_token=token)
    if rpc == "CordonAgent":
        return admin_pb2.CordonAgentRequest(agent_id=agent_id)
    if rpc == "UncordonAgent":
        return admin_pb2.UncordonAgentRequest(agent_id=agent_id)
    if rpc == "DrainAgent":
        seconds = rng.choice([0, 1, 604_800, 604_801, -1, 2**31 - 1])
        return admin_pb2.DrainAgentRequest(agent_id=agent_id, timeout_seconds=seconds)
    raise AssertionError(f"no generator for {rpc}")


async def test_the_operators_rpcs_answer_generated_input_with_a_documented_status(control_plane) -> None:
    running, sessions = control_plane
    rng = random.Random(SEED)
    values = Values(rng, sessions)
    seen = Seen()
    calls: Counter[str] = Counter()
    async with auth.channel(running.address) as channel:
        for rpc in OPERATOR_RPCS:
            method = ADMIN.methods_by_name[rpc]
            call = channel.unary_unary(
                f"/{ADMIN.full_name}/{rpc}",
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=getattr(admin_pb2, method.output_type.name).FromString,
            )
            for _ in range(60):
                request = admin_request_for(rpc, values)
                calls[rpc] += mutates(ADMIN.full_name, rpc)
                try:
                    await asyncio.wait_for(call(request), 60)
                    seen.ok(rpc, refusable(request))
                except grpc.aio.AioRpcError as error:
                    seen.error(rpc, error, values.long_prefixes, refusable(request))
    assert seen.problems == [], "\n".join(sorted(set(seen.problems))[:40])
    answers = {answer for _, answer in seen.answers}
    assert {"OK", "NOT_FOUND/AGENT_NOT_FOUND", "INVALID_ARGUMENT/PAGE_TOKEN_INVALID"} <= answers, answers
    assert await audit_problems(running.pool, +calls) == []


# The texts a caller controls in an audit record, where a gRPC request cannot carry them all: a
# single-sign-on subject comes from a token's JSON (a lone surrogate is valid JSON).
HOSTILE_TEXTS = [
    "",
    "\x00",
    "a\x00b",
    "\x00" * 300,
    "x" * 3 * MB,
    "é" * 129,
    "\ud800",
    "a\udfffb",
    "\udc80" * 200,
    "\\x00",
    "\\" * 100,
    "\u202e\u2028\u2029\ufeff\u200d",
    "\U000e0001tag",
    "".join(chr(c) for c in range(0x20)) + "\x7f\x80\x9f",
    "'; DROP TABLE audit_records; --",
    "🦀" * 200,
]


@dataclass
class Named:
    """A request as the audit trail reads it: the identifiers it names."""

    session_id: str = ""
    request_id: str = ""
    name: str = ""
    agent_id: str = ""


async def test_hostile_actors_methods_and_identifiers_each_leave_one_escaped_bounded_record(plane) -> None:
    calls: Counter[str] = Counter()
    for i, text in enumerate(HOSTILE_TEXTS):
        for j, other in enumerate(HOSTILE_TEXTS):
            caller = Caller(plane.project_id, "default", Role.ADMIN, "", subject=text)
            method = f"M{i}{other}" if j % 3 == 0 else f"M{i}"
            await audit.record(plane.pool, caller, method, Named(other, text, other[::-1], "agent-1"), other)
            calls[audit.recorded(method)] += 1
    assert await audit_problems(plane.pool, calls) == []
    records = await audit.page(plane.pool, plane.project_id, None, None, 500)
    by_actor = {record.actor for record in records}
    assert {"oidc:", "oidc:\\x00", "oidc:a\\x00b", "oidc:\\ud800", "oidc:\\\\x00"} <= by_actor
    assert "oidc:" + "x" * 123 + f"…[{3 * MB - 123} more characters]" in by_actor
    assert {r.details.get("session_id") for r in records} >= {"a\\udfffb", "\\u202e\\u2028\\u2029\\ufeff\\u200d"}
    # A session id that is a UUID goes to its column.
    session_id = uuid.uuid4()
    await audit.record(plane.pool, plane.caller, "CreateSession", Named(str(session_id)), "OK")
    [latest] = await audit.page(plane.pool, plane.project_id, session_id, None, 10)
    assert (latest.session_id, latest.details) == (session_id, {})
