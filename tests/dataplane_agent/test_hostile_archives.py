"""Hostile uploads against both drivers: every archive in the corpus is refused or neutralised,
nothing lands outside the workspace, and a refused archive writes nothing at all — with tarfile's
extraction filters replaced by ones that accept anything, as on an interpreter whose filters are
known to be bypassable (CPython before 3.11.13), because the agent never relies on them."""

from __future__ import annotations

import contextlib
import io
import os
import stat
import tarfile
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import grpc
import pytest

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.claude_code import BUNDLED_CLI
from dataplane_agent.sandboxes.base import AGENT_LABEL, SESSION_LABEL, Sandbox, SandboxDriver, SandboxSpec
from dataplane_agent.sandboxes.docker import ContainerLimits, DockerSandboxDriver
from dataplane_agent.sandboxes.local import LocalSandboxDriver
from dataplane_agent.workspace.archives import UnpackLimits
from dataplane_agent.workspace.service import WorkspaceService
from tests.dataplane_agent.test_workspace import Client, error_reason
from tests.support.containers import Containers, new_installation, require_docker, require_runtime

Member = tuple[tarfile.TarInfo, bytes | None]


def member(
    name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", linkname: str = "", mode: int = 0o644
) -> Member:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname = kind, mode, linkname
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, data if kind == tarfile.REGTYPE else None


def archive(*members: Member, compression: str = "") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(
        fileobj=buffer, mode=f"w:{compression}" if compression else "w", format=tarfile.PAX_FORMAT
    ) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def cve_2025_4517() -> bytes:
    """The public shape of CVE-2025-4517: nested links whose resolved path passes PATH_MAX, so
    os.path.realpath stops resolving and the filter's check passes, then a link out and a write
    through it."""
    component = "d" * 247
    steps = "abcdefghijklmnop"
    members, path = [], ""
    for step in steps:
        members.append(member(os.path.join(path, component), tarfile.DIRTYPE, mode=0o755))
        members.append(member(os.path.join(path, step), tarfile.SYMTYPE, linkname=component))
        path = os.path.join(path, component)
    chain = os.path.join(*steps, "l" * 254)
    members.append(member(chain, tarfile.SYMTYPE, linkname="../" * len(steps)))
    members.append(member("escape", tarfile.SYMTYPE, linkname=os.path.join(chain, "../" * 8 + "tmp")))
    members.append(member("escape/planted", data=b"owned"))
    return archive(*members)


def gzip_bomb(unpacked: int) -> bytes:
    """One file of `unpacked` zero bytes, gzip-compressed (about 1/1000 of that)."""
    info = tarfile.TarInfo("zeros")
    info.size = unpacked
    header = info.tobuf(format=tarfile.PAX_FORMAT)
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = [compressor.compress(header)]
    block = bytes(1024 * 1024)
    for _ in range(unpacked // len(block)):
        out.append(compressor.compress(block))
    out.append(compressor.compress(bytes(1024)) + compressor.flush())  # end-of-archive blocks
    return b"".join(out)


def liar(size: int) -> bytes:
    """A header that claims `size` bytes of data, followed by almost none."""
    info = tarfile.TarInfo("big")
    info.size = size
    return info.tobuf(format=tarfile.PAX_FORMAT) + bytes(2048)


def giant_pax_header(size: int) -> bytes:
    """A gzip'd archive whose first member has a PAX extended header of `size` bytes (one long
    record), which a reader would otherwise take into memory whole."""
    record_body = b" comment=" + b"a" * (size - 40) + b"\n"
    length = len(record_body) + len(str(len(record_body))) + 1
    record = str(length).encode() + record_body
    header = tarfile.TarInfo("././@PaxHeader")
    header.type, header.size = tarfile.XHDTYPE, len(record)
    blocks = header.tobuf(format=tarfile.USTAR_FORMAT) + record + bytes(-len(record) % 512)
    blocks += archive(member("after", data=b"x"))
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
    return compressor.compress(blocks) + compressor.flush()


def many_entries(count: int) -> bytes:
    return archive(*(member(f"f{i}") for i in range(count)))


# name -> (archive, the code and reason it is refused with)
REFUSED: dict[str, tuple[Callable[[], bytes], grpc.StatusCode, str]] = {
    "dot-dot": (
        lambda: archive(member("../evil", data=b"x")),
        grpc.StatusCode.PERMISSION_DENIED,
        "PATH_OUTSIDE_WORKSPACE",
    ),
    "deep dot-dot": (
        lambda: archive(member("a/../../../../evil", data=b"x")),
        grpc.StatusCode.PERMISSION_DENIED,
        "PATH_OUTSIDE_WORKSPACE",
    ),
    "absolute": (
        lambda: archive(member("/tmp/evil", data=b"x")),
        grpc.StatusCode.PERMISSION_DENIED,
        "PATH_OUTSIDE_WORKSPACE",
    ),
    "symlink out, then write through it": (
        lambda: archive(member("out", tarfile.SYMTYPE, linkname="/tmp"), member("out/evil", data=b"x")),
        grpc.StatusCode.PERMISSION_DENIED,
        "PATH_OUTSIDE_WORKSPACE",
    ),
    "relative symlink out": (
        lambda: archive(member("a/b", tarfile.SYMTYPE, linkname="../../../etc")),
        grpc.StatusCode.PERMISSION_DENIED,
        "PATH_OUTSIDE_WORKSPACE",
    ),
    "write through an inside symlink": (
        lambda: archive(
            member("sub", tarfile.DIRTYPE), member("in", tarfile.SYMTYPE, linkname="sub"), member("in/x", data=b"x")
        ),
        grpc.StatusCode.PERMISSION_DENIED,
        "PATH_OUTSIDE_WORKSPACE",
    ),
    "CVE-2025-4517 link chain past PATH_MAX": (
        cve_2025_4517,
        grpc.StatusCode.PERMISSION_DENIED,
        "PATH_OUTSIDE_WORKSPACE",
    ),
    "hard link out": (
        lambda: archive(member("passwd", tarfile.LNKTYPE, linkname="/etc/passwd")),
        grpc.StatusCode.PERMISSION_DENIED,
        "PATH_OUTSIDE_WORKSPACE",
    ),
    "hard link climbing out": (
        lambda: archive(member("h", tarfile.LNKTYPE, linkname="../../run/sandbox.json")),
        grpc.StatusCode.PERMISSION_DENIED,
        "PATH_OUTSIDE_WORKSPACE",
    ),
    "character device": (
        lambda: archive(member("null", tarfile.CHRTYPE)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "ARCHIVE_MEMBER_UNSUPPORTED",
    ),
    "block device": (
        lambda: archive(member("sda", tarfile.BLKTYPE)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "ARCHIVE_MEMBER_UNSUPPORTED",
    ),
    "fifo": (
        lambda: archive(member("pipe", tarfile.FIFOTYPE)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "ARCHIVE_MEMBER_UNSUPPORTED",
    ),
    "gzip bomb": (lambda: gzip_bomb(64 * 1024 * 1024), grpc.StatusCode.RESOURCE_EXHAUSTED, "UNPACKED_TOO_LARGE"),
    "a header that lies about a huge size": (
        lambda: liar(2**40),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "UNPACKED_TOO_LARGE",
    ),
    "a 100 MiB PAX header": (
        lambda: giant_pax_header(100 * 1024 * 1024),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "UNPACKED_TOO_LARGE",
    ),
    "100k entries": (lambda: many_entries(100_001), grpc.StatusCode.RESOURCE_EXHAUSTED, "TOO_MANY_ENTRIES"),
    "a 300-byte name": (
        lambda: archive(member("n" * 300, data=b"x")),
        grpc.StatusCode.INVALID_ARGUMENT,
        "PATH_TOO_LONG",
    ),
    "2,000 directories deep": (
        lambda: archive(member("d/" * 2000 + "f", data=b"x")),
        grpc.StatusCode.INVALID_ARGUMENT,
        "PATH_TOO_LONG",
    ),
    "garbage": (lambda: os.urandom(4096), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARCHIVE"),
    "truncated gzip": (
        lambda: archive(member("f", data=os.urandom(100_000)), compression="gz")[:50_000],
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARCHIVE",
    ),
    "truncated": (
        lambda: archive(member("f", data=os.urandom(100_000)))[:50_000],
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARCHIVE",
    ),
}


SPEC = SandboxSpec(session_id="s1", agent_id="a1", labels={SESSION_LABEL: "s1", AGENT_LABEL: "a1"})


@contextlib.asynccontextmanager
async def sandbox_of(
    kind: str, sandbox_root: Path, bwrap: str, spec: SandboxSpec = SPEC, **options: object
) -> AsyncIterator[tuple[SandboxDriver, Sandbox]]:
    """A sandbox of the `kind` driver made from `spec` (docker: skips without a Docker daemon;
    "docker-runsc": under gVisor, skipping without runsc registered), destroyed afterwards."""
    driver: SandboxDriver
    containers = None
    kind, _, runtime = kind.partition("-")
    if runtime:
        await require_docker()
        await require_runtime(runtime)
        options = {**options, "runtime": runtime}
    if kind == "local":
        driver = LocalSandboxDriver(sandbox_root, bwrap=bwrap, **options)  # type: ignore[arg-type]
    else:
        await require_docker()
        containers = Containers(new_installation())
        driver = DockerSandboxDriver(
            sandbox_root,
            installation=containers.installation,
            agent_id="a1",
            limits=ContainerLimits(cpus=1, memory_mb=512, pids=256),
            programs=[BUNDLED_CLI],
            **options,
        )  # type: ignore[arg-type]
    try:
        sandbox = await driver.create(spec)
        yield driver, sandbox
        await driver.destroy(sandbox)
    finally:
        if containers is not None:
            await containers.remove_all()


@pytest.fixture(params=["local", "docker", "docker-runsc"])
async def box(
    request: pytest.FixtureRequest, sandbox_root: Path, bwrap: str
) -> AsyncIterator[tuple[SandboxDriver, Sandbox]]:
    """A sandbox of each driver, the docker driver's under runc and under runsc (gVisor)."""
    async with sandbox_of(request.param, sandbox_root, bwrap) as made:
        yield made


@pytest.fixture
def permissive_filters(monkeypatch: pytest.MonkeyPatch) -> None:
    """tarfile's filters, replaced by ones that accept anything (or added so, on an interpreter older
    than 3.11.4, which has none): the agent must not depend on them."""
    for name in ("data_filter", "tar_filter", "fully_trusted_filter"):
        monkeypatch.setattr(tarfile, name, lambda member, path: member, raising=False)


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under `root` (links not followed) with its mode and size."""
    seen = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(top, name)
            info = os.lstat(path)
            seen[os.path.relpath(path, root)] = (info.st_mode, info.st_size)
    return seen


def service(
    driver: SandboxDriver,
    sandbox: Sandbox,
    limits: UnpackLimits = UnpackLimits(),
    room: Callable[[Sandbox], Awaitable[int]] | None = None,
) -> Client:
    async def lookup(session_id: str) -> Sandbox | None:
        return sandbox

    return Client(WorkspaceService(lookup, driver, limits, room=room))


@pytest.mark.usefixtures("permissive_filters")
async def test_every_hostile_archive_is_refused_and_writes_nothing(box, tmp_path: Path, sandbox_root: Path) -> None:
    driver, sandbox = box
    client = service(driver, sandbox, UnpackLimits(max_bytes=16 * 1024 * 1024))
    assert (await client.upload("", archive(member("kept/file", data=b"before"))))[-1].WhichOneof("body") == "written"
    before_sandboxes, before_tmp = snapshot(sandbox_root), set(os.listdir("/tmp"))
    for name, (make, code, reason) in REFUSED.items():
        reply = (await client.upload("", make(), chunk=1024 * 1024))[-1]
        assert reply.WhichOneof("body") == "error", name
        assert error_reason(reply) == (code, reason), f"{name}: {reply.error.message}"
        assert len(reply.error.message) < 300 and str(sandbox_root) not in reply.error.message, name
        assert snapshot(sandbox_root) == before_sandboxes, f"{name} changed the sandbox directory"
    assert not {"evil", "planted"} & set(os.listdir("/tmp")) - before_tmp
    assert (sandbox.workspace / "kept" / "file").read_bytes() == b"before"


@pytest.mark.usefixtures("permissive_filters")
async def test_what_an_archive_may_hold_is_unpacked_neutralised_as_the_sandbox_user(box) -> None:
    driver, sandbox = box
    client = service(driver, sandbox)
    upload = archive(
        member("bin/sh-copy", data=b"#!/bin/sh\nid -u\n", mode=0o6755),
        member("shared", tarfile.DIRTYPE, mode=0o1777),
        member("bin/again", tarfile.LNKTYPE, linkname="bin/sh-copy"),
        member("latest", tarfile.SYMTYPE, linkname="bin"),
        member("absolute", tarfile.SYMTYPE, linkname="/workspace/bin/sh-copy"),
        member("./flat", data=b"ok"),
    )
    written = (await client.upload("dest", upload))[-1]
    assert written.WhichOneof("body") == "written", written.error.message
    assert written.written.entries == 6
    dest = sandbox.workspace / "dest"
    owner = os.stat(sandbox.workspace).st_uid
    for path in (dest / "bin" / "sh-copy", dest / "shared", dest / "flat"):
        info = os.lstat(path)
        assert not info.st_mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX), path
        assert info.st_uid == owner and (info.st_uid != 0 or os.geteuid() != 0), path
    assert os.lstat(dest / "bin" / "again").st_ino == os.lstat(dest / "bin" / "sh-copy").st_ino
    assert os.readlink(dest / "latest") == "bin" and os.readlink(dest / "absolute") == "/workspace/bin/sh-copy"
    listing = (await client.call(list_directory=pb.ListDirectory(path="/workspace/dest/latest")))[-1].listing
    assert [e.name for e in listing.entries] == ["again", "sh-copy"]


async def test_an_absolute_link_is_read_as_the_sandbox_sees_it(box) -> None:
    """/workspace/... in a link the sandbox made means the workspace, not the host's /workspace."""
    driver, sandbox = box
    client = service(driver, sandbox)
    assert (
        await client.upload(
            "", archive(member("real/f", data=b"1"), member("via", tarfile.SYMTYPE, linkname="/workspace/real"))
        )
    )[-1].written
    listing = (await client.call(list_directory=pb.ListDirectory(path="via")))[-1].listing
    assert [e.name for e in listing.entries] == ["f"]
    for target in ("/etc", "/home/agent", "../../"):
        os.symlink(target, sandbox.workspace / "out")
        reply = (await client.call(list_directory=pb.ListDirectory(path="out")))[-1]
        assert error_reason(reply) == (grpc.StatusCode.PERMISSION_DENIED, "PATH_OUTSIDE_WORKSPACE"), target
        os.unlink(sandbox.workspace / "out")
    os.symlink("loop", sandbox.workspace / "loop")
    assert error_reason((await client.call(list_directory=pb.ListDirectory(path="loop")))[-1]) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "PATH_LOOP",
    )


def test_the_upload_limits_and_the_sandbox_host_uid_are_settings() -> None:
    from dataplane_agent.settings import AgentSettings

    defaults = AgentSettings.from_args([], {})
    assert (defaults.upload_max_bytes, defaults.upload_max_entries) == (
        UnpackLimits().max_bytes,
        UnpackLimits().max_entries,
    )
    assert defaults.sandbox_host_uid == 2_000_000_000
    given = AgentSettings.from_args(
        ["--upload-max-bytes", "4096"], {"ASTRABOX_UPLOAD_MAX_ENTRIES": "10", "ASTRABOX_SANDBOX_HOST_UID": "3000000"}
    )
    assert (given.upload_max_bytes, given.upload_max_entries, given.sandbox_host_uid) == (4096, 10, 3_000_000)
    for argv in (["--sandbox-host-uid", "0"], ["--upload-max-entries", "0"]):
        with pytest.raises(SystemExit):
            AgentSettings.from_args(argv, {})
