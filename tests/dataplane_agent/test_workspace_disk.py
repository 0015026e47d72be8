"""A workspace disk limit the filesystem enforces, on both drivers: writing past it fails inside the
sandbox with ENOSPC, an upload that would not fit is refused before anything is unpacked, the files
survive a stop and a re-open, and destroying the sandbox unmounts and removes its image.

Where no image can enforce it, the limit is measured: the measurement counts what a sandbox hides in
unreadable directories, hard links once and nothing a link points at outside; an upload past it is
refused. (Stopping a runtime over it: tests/e2e/test_disk_limit_measured.py.)"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.runtimes.disk_limit import MIB, MeasuredDiskLimit
from dataplane_agent.sandboxes.base import Sandbox, SandboxDriver, SandboxLimits
from dataplane_agent.sandboxes.disk import IMAGE, WorkspaceDisk
from dataplane_agent.sandboxes.disk_usage import DiskUsage
from dataplane_agent.sandboxes.host_user import DEFAULT_HOST_UID
from tests.dataplane_agent.test_hostile_archives import SPEC, archive, gzip_bomb, member, sandbox_of, service
from tests.dataplane_agent.test_workspace import error_reason

DISK = WorkspaceDisk(size_mb=32)


@pytest.fixture(params=["local", "docker", "docker-runsc"])
async def limited(
    request: pytest.FixtureRequest, sandbox_root: Path, bwrap: str
) -> AsyncIterator[tuple[SandboxDriver, Sandbox]]:
    if why := DISK.unavailable():
        pytest.skip(f"workspace images cannot be mounted here: {why}")
    async with sandbox_of(request.param, sandbox_root, bwrap, disk=DISK) as made:
        yield made


async def test_a_full_workspace_refuses_writes_and_uploads_and_is_unmounted_with_its_sandbox(limited) -> None:
    driver, sandbox = limited
    assert os.path.ismount(sandbox.workspace)
    assert os.lstat(sandbox.workspace).st_uid != 0 or os.geteuid() != 0
    client = service(driver, sandbox)

    listing = (await client.call(list_directory=pb.ListDirectory(path="")))[-1].listing
    assert [e.name for e in listing.entries] == []  # no lost+found

    filled = await client.call(exec_command=pb.ExecCommand(command="head -c 64M /dev/zero > big; echo exit=$?"))
    out = b"".join(r.stdout + r.stderr for r in filled)
    assert b"No space left on device" in out and b"exit=1" in out, out
    assert os.stat(sandbox.workspace / "big").st_size <= 32 * 1024 * 1024
    await client.call(exec_command=pb.ExecCommand(command="rm big && echo kept > kept.txt"))

    refused = (await client.upload("", gzip_bomb(48 * 1024 * 1024), chunk=1024 * 1024))[-1]
    assert error_reason(refused) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "WORKSPACE_FULL"), refused.error.message
    assert sorted(os.listdir(sandbox.workspace)) == ["kept.txt"]
    fits = (await client.upload("", archive(member("small", data=b"x" * 1000))))[-1]
    assert fits.WhichOneof("body") == "written"

    await driver.stop(sandbox)
    again = await driver.create(SPEC)
    assert os.path.ismount(again.workspace) and (again.workspace / "kept.txt").read_text() == "kept\n"

    directory = sandbox.workspace.parent
    assert (directory / IMAGE).exists()
    await driver.destroy(again)
    assert not os.path.ismount(again.workspace) and not directory.exists()


@pytest.mark.parametrize("kind", ["local", "docker"])
async def test_an_environments_disk_limit_sizes_its_workspace_image(kind: str, sandbox_root: Path, bwrap: str) -> None:
    if why := DISK.unavailable():
        pytest.skip(f"workspace images cannot be mounted here: {why}")
    spec = dataclasses.replace(SPEC, limits=SandboxLimits(disk_mb=8))
    async with sandbox_of(kind, sandbox_root, bwrap, spec, disk=DISK) as (driver, sandbox):
        assert (sandbox.workspace.parent / IMAGE).stat().st_size == 8 * MIB
        client = service(driver, sandbox)
        filled = await client.call(exec_command=pb.ExecCommand(command="head -c 16M /dev/zero > big; echo exit=$?"))
        out = b"".join(r.stdout + r.stderr for r in filled)
        assert b"No space left on device" in out and b"exit=1" in out, out


# -- where no image enforces the limit: measured (disk_limit) -------------------------------------

MEASURED_MB = 4


@pytest.fixture(params=["local", "docker", "docker-runsc"])
async def unlimited(
    request: pytest.FixtureRequest, sandbox_root: Path, bwrap: str
) -> AsyncIterator[tuple[SandboxDriver, Sandbox]]:
    async with sandbox_of(request.param, sandbox_root, bwrap) as made:
        yield made


async def test_a_measured_workspace_counts_what_its_sandbox_hides_and_nothing_outside(unlimited) -> None:
    driver, sandbox = unlimited
    client = service(driver, sandbox)
    usage = DiskUsage(DEFAULT_HOST_UID)
    empty = await usage.used_bytes(sandbox.workspace)
    # 3 MiB in a directory its sandbox made unreadable, a hard link to it (counted once), and links
    # to the host's /usr and to the sandbox's own system files (never followed).
    made = await client.call(
        exec_command=pb.ExecCommand(
            command="mkdir -p hidden/deeper && head -c 3M /dev/urandom > hidden/deeper/blob && ln hidden/deeper/blob twin"
            " && ln -s /usr usr && ln -s / root && chmod 000 hidden/deeper hidden && echo done"
        )
    )
    assert b"done" in b"".join(r.stdout for r in made), made
    used = await usage.used_bytes(sandbox.workspace)
    assert 3 * MIB <= used - empty < 3 * MIB + 256 * 1024, used - empty


async def test_an_upload_past_a_measured_limit_is_refused_before_anything_is_written(unlimited) -> None:
    driver, sandbox = unlimited
    limit = MeasuredDiskLimit(MEASURED_MB, interval=60, usage=DiskUsage(DEFAULT_HOST_UID))
    client = service(driver, sandbox, room=limit.room)
    await client.call(exec_command=pb.ExecCommand(command="head -c 3M /dev/urandom > blob"))

    refused = (await client.upload("", archive(member("more", data=b"x" * (2 * MIB)))))[-1]
    assert error_reason(refused) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "WORKSPACE_FULL"), refused.error.message
    assert sorted(os.listdir(sandbox.workspace)) == ["blob"]
    assert await limit.over("s1", sandbox) is None

    fits = (await client.upload("", archive(member("small", data=b"x" * 1000))))[-1]
    assert fits.WhichOneof("body") == "written"
    await client.call(exec_command=pb.ExecCommand(command="head -c 2M /dev/urandom > past"))
    over = await limit.over("s1", sandbox)
    assert over is not None and f"over its disk limit of {MEASURED_MB} MiB" in over.reason

    # Stopped over it, the session may run again at what it held then (to delete files), not write more.
    await limit.stopped("s1", sandbox)
    assert await limit.over("s1", sandbox) is None
    await client.call(exec_command=pb.ExecCommand(command="head -c 64K /dev/urandom > more"))
    assert await limit.over("s1", sandbox) is not None
    await client.call(exec_command=pb.ExecCommand(command="rm past more"))
    assert await limit.over("s1", sandbox) is None
