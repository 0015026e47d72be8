"""`astrabox credentials` run as a user runs it, against a real control plane on PostgreSQL: the
secret goes in by stdin or a file, never the command line, and never comes back out."""

from __future__ import annotations

import asyncio
import base64
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from astrabox.client import AstraBoxClient
from controlplane.server import RunningControlPlane, serve
from controlplane.settings import ControlPlaneSettings

SECRET = "glpat-s3cr3t-from-stdin"


@pytest_asyncio.fixture
async def running(database_url: str, bootstrap_key_file: str) -> AsyncIterator[RunningControlPlane]:
    settings = ControlPlaneSettings(
        database_url=database_url,
        listen="127.0.0.1:0",
        bootstrap_key_file=bootstrap_key_file,
        credential_key=base64.b64encode(os.urandom(32)).decode(),
    )
    async with serve(settings) as control_plane:
        yield control_plane


async def astrabox(running: RunningControlPlane, *args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "astrabox",
        *args,
        env={**os.environ, "ASTRABOX_TARGET": running.address},
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(stdin), 120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_put_from_stdin_and_file_list_and_delete(running: RunningControlPlane, tmp_path: Path) -> None:
    code, out, err = await astrabox(
        running, "credentials", "put", "git", "--description", "the git host", stdin=f"{SECRET}\n".encode()
    )
    assert (code, out, err) == (0, "created git v1\n", "")
    secret_file = tmp_path / "token"
    secret_file.write_text(SECRET + "-2\n")
    assert (await astrabox(running, "credentials", "put", "git", "--from-file", str(secret_file)))[1] == (
        "replaced git v2\n"
    )
    code, out, _ = await astrabox(running, "credentials", "list")
    assert code == 0 and out.startswith("git ") and " v2 " in out and SECRET not in out
    async with AstraBoxClient.connect(running.address) as client:
        assert [(c.name, c.version) async for c in client.credentials.list()] == [("git", 2)]
    # What was stored is what stdin held, without its newline: sealed, in the row, as long as the secret.
    row = await running.pool.fetchrow("SELECT ciphertext FROM credential_store WHERE name = 'git'")
    assert len(bytes(row["ciphertext"])) == len(SECRET + "-2") + 16
    assert (await astrabox(running, "credentials", "delete", "git"))[:2] == (0, "deleted git\n")
    code, _, err = await astrabox(running, "credentials", "delete", "git")
    assert code != 0 and "does not exist" in err


async def test_an_empty_stdin_stores_nothing(running: RunningControlPlane) -> None:
    code, _, err = await astrabox(running, "credentials", "put", "git", stdin=b"")
    assert code == 2 and "empty" in err
    assert await running.pool.fetchval("SELECT count(*) FROM credential_store") == 0


async def test_the_secret_is_no_argument(running: RunningControlPlane) -> None:
    code, _, err = await astrabox(running, "credentials", "put", "git", SECRET, stdin=b"x")
    assert code == 2 and "unrecognized arguments" in err
    assert await running.pool.fetchval("SELECT count(*) FROM credential_store") == 0
