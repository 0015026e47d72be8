"""Workspace requests on the agent against a real bubblewrap sandbox: upload a
repository, list it, run git in it, download it byte for byte; escapes refused."""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import tarfile
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.sandboxes.base import Sandbox, SandboxSpec
from dataplane_agent.sandboxes.local import LocalSandboxDriver
from dataplane_agent.workspace.service import MAX_UPLOAD_BYTES, WorkspaceService
from tests.support.archives import unpack


@pytest.fixture
async def sandbox(sandbox_root: Path, bwrap: str) -> tuple[LocalSandboxDriver, Sandbox]:
    driver = LocalSandboxDriver(sandbox_root, bwrap=bwrap)
    return driver, await driver.create(SandboxSpec(session_id="s1", agent_id="a1"))


class Client:
    """Plays the control plane: sends requests, collects each request's replies."""

    def __init__(self, service: WorkspaceService) -> None:
        self.service = service
        self.replies: dict[str, list[pb.WorkspaceReply]] = {}
        self.done: dict[str, asyncio.Event] = {}
        self.count = 0

    async def _reply(self, reply: pb.WorkspaceReply) -> None:
        self.replies.setdefault(reply.request_id, []).append(reply)
        if reply.last:
            self.done[reply.request_id].set()

    async def call(self, session_id: str = "s1", **op) -> list[pb.WorkspaceReply]:
        self.count += 1
        rid = f"r{self.count}"
        self.done[rid] = asyncio.Event()
        self.service.submit(pb.WorkspaceRequest(request_id=rid, session_id=session_id, **op), self._reply)
        await asyncio.wait_for(self.done[rid].wait(), 60)
        return self.replies[rid]

    async def upload(self, path: str, archive: bytes, chunk: int = 4096) -> list[pb.WorkspaceReply]:
        self.count += 1
        rid = f"r{self.count}"
        self.done[rid] = asyncio.Event()
        pieces = [archive[i : i + chunk] for i in range(0, len(archive), chunk)] or [b""]
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            self.service.submit(
                pb.WorkspaceRequest(
                    request_id=rid,
                    session_id="s1",
                    write_archive=pb.WriteArchive(path=path if i == 0 else "", chunk=piece, last=last),
                ),
                self._reply,
            )
        await asyncio.wait_for(self.done[rid].wait(), 60)
        return self.replies[rid]


def error_reason(reply: pb.WorkspaceReply) -> tuple[grpc.StatusCode, str]:
    info = error_details_pb2.ErrorInfo()
    reply.error.details[0].Unpack(info)
    return grpc.StatusCode(next(c for c in grpc.StatusCode if c.value[0] == reply.error.code)), info.reason


def make_repository(root: Path) -> bytes:
    repo = root / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "README.md").write_text("# demo\n")
    (repo / "src" / "main.py").write_bytes(bytes(range(256)) * 40)
    git = ["git", "-c", "user.email=a@b", "-c", "user.name=t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "first"], cwd=repo, check=True)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        archive.add(repo, arcname="repo")
    return buffer.getvalue()


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()
    }


async def test_a_repository_round_trips_and_git_runs_inside(sandbox, tmp_path: Path):
    driver, box = sandbox

    async def lookup(session_id: str) -> Sandbox | None:
        return box if session_id == "s1" else None

    client = Client(WorkspaceService(lookup, driver))
    written = await client.upload("", make_repository(tmp_path / "src"))
    assert written[-1].WhichOneof("body") == "written" and written[-1].written.entries > 5

    listing = (await client.call(list_directory=pb.ListDirectory(path="repo")))[-1].listing
    assert [(e.name, e.type) for e in listing.entries] == [
        (".git", "directory"),
        ("README.md", "file"),
        ("src", "directory"),
    ]

    replies = await client.call(exec_command=pb.ExecCommand(command="cd repo && ls && git status --short --branch"))
    stdout = b"".join(r.stdout for r in replies).decode()
    assert replies[-1].exit_code == 0, b"".join(r.stderr for r in replies)
    assert "README.md" in stdout and "## main" in stdout

    failing = await client.call(exec_command=pb.ExecCommand(command="echo oops >&2; exit 3"))
    assert failing[-1].exit_code == 3 and b"oops" in b"".join(r.stderr for r in failing)

    archive = b"".join(r.archive_chunk for r in await client.call(read_archive=pb.ReadArchive(path="repo")))
    out = tmp_path / "downloaded"
    unpack(archive, out)
    downloaded, original = tree(out / "repo"), tree(tmp_path / "src" / "repo")
    # `git status` refreshes the stat cache in .git/index; every other byte is unchanged.
    assert downloaded.keys() == original.keys()
    assert {k: v for k, v in downloaded.items() if k != ".git/index"} == {
        k: v for k, v in original.items() if k != ".git/index"
    }


async def test_escapes_are_refused(sandbox, tmp_path: Path):
    driver, box = sandbox

    async def lookup(session_id: str) -> Sandbox | None:
        return box if session_id == "s1" else None

    client = Client(WorkspaceService(lookup, driver))
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key").write_text("do not read")
    os.symlink(secret, box.workspace / "escape")

    for op in (
        {"list_directory": pb.ListDirectory(path="../")},
        {"read_archive": pb.ReadArchive(path="a/../../etc")},
        {"read_archive": pb.ReadArchive(path="/etc")},
    ):
        assert error_reason((await client.call(**op))[-1]) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "PATH_OUTSIDE_WORKSPACE",
        )
    for op in (
        {"list_directory": pb.ListDirectory(path="escape")},
        {"read_archive": pb.ReadArchive(path="escape/key")},
    ):
        assert error_reason((await client.call(**op))[-1]) == (
            grpc.StatusCode.PERMISSION_DENIED,
            "PATH_OUTSIDE_WORKSPACE",
        )
    assert error_reason((await client.upload("escape", b""))[-1])[1] == "PATH_OUTSIDE_WORKSPACE"

    # An archive whose member climbs out, or whose link points outside, is refused and writes nothing outside.
    for name, kind in (("../evil", tarfile.REGTYPE), ("link", tarfile.SYMTYPE)):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            member = tarfile.TarInfo(name)
            member.type = kind
            if kind == tarfile.SYMTYPE:
                member.linkname = str(secret)
            archive.addfile(member, io.BytesIO(b""))
        reply = (await client.upload("", buffer.getvalue()))[-1]
        assert error_reason(reply) == (grpc.StatusCode.PERMISSION_DENIED, "PATH_OUTSIDE_WORKSPACE")
    assert not (box.workspace.parent / "evil").exists() and not (box.workspace / "link").exists()

    missing = (await client.call(list_directory=pb.ListDirectory(path="nope")))[-1]
    assert error_reason(missing) == (grpc.StatusCode.NOT_FOUND, "PATH_NOT_FOUND")
    unknown = (await client.call(session_id="other", list_directory=pb.ListDirectory()))[-1]
    assert error_reason(unknown) == (grpc.StatusCode.FAILED_PRECONDITION, "RUNTIME_NOT_AVAILABLE")


async def test_limits_uploads_and_command_time(sandbox, monkeypatch):
    driver, box = sandbox

    async def lookup(session_id: str) -> Sandbox | None:
        return box

    client = Client(WorkspaceService(lookup, driver))
    monkeypatch.setattr("dataplane_agent.workspace.service.MAX_UPLOAD_BYTES", 1000)
    reply = (await client.upload("", b"x" * 5000, chunk=1000))[-1]
    assert error_reason(reply) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "TOO_LARGE")
    assert MAX_UPLOAD_BYTES == 256 * 1024 * 1024
    slow = await client.call(exec_command=pb.ExecCommand(command="sleep 30", timeout_ms=300))
    assert slow[-1].exit_code < 0 and b"killed after" in b"".join(r.stderr for r in slow)
