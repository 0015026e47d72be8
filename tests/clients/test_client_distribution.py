"""The client SDK is a distribution of its own: its wheel, installed alone into a new venv, pulls
in no server dependency and drives a session end to end against a stack started separately (by
`astrabox.testing.LocalStack`, in this process, where the server is installed)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from astrabox.testing import LocalStack

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "python"
# What only the server needs: its packages and the libraries only they import.
SERVER_MODULES = (
    "controlplane",
    "dataplane_agent",
    "astrabox_server",
    "asyncpg",
    "aiodocker",
    "claude_agent_sdk",
    "structlog",
    "grpc_tools",
    "grpc_health",
    "grpc_reflection",
    "opentelemetry.sdk",
)
CLIENT_REQUIREMENTS = {
    "grpcio",
    "grpcio-status",
    "protobuf",
    "googleapis-common-protos",
    "pyyaml",
    "opentelemetry-api",
    "rich",
}

# Run by the client venv's python: one session, one turn, through the SDK only.
DRIVE_A_SESSION = """
import asyncio, json, sys
from astrabox.client import AstraBoxClient
from astrabox.messages import UserMessage

async def main(target):
    async with AstraBoxClient.connect(target) as client:
        session = await client.start_session(ready_timeout=120)
        turn = await session.send("run: echo from-the-client-wheel")
        async with asyncio.timeout(180):
            result = await turn.result()
        stored = [event.kind async for event in session.events()]
        tool_results = [r.content for e in result.events if isinstance(e.message, UserMessage) for r in e.message.tool_results]
        print(json.dumps({"kinds": stored, "tool_results": tool_results, "outcome": result.outcome.name}))

asyncio.run(main(sys.argv[1]))
"""

# Run by the client venv's python: the local test stack needs the server, and says so.
LOCAL_STACK_WITHOUT_SERVER = """
import asyncio
from astrabox.testing import LocalStack, ServerNotInstalledError

async def main():
    try:
        async with LocalStack():
            print("started")
    except ServerNotInstalledError as error:
        print(error)

asyncio.run(main())
"""


def run(
    argv: list[str], cwd: Path, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    # Out of the repository and without PYTHONPATH, so nothing but what the venv holds is importable.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")} | (env or {})
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest_asyncio.fixture(scope="module")
async def local_stack() -> AsyncIterator[LocalStack]:
    async with LocalStack() as stack:
        yield stack


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Built from a copy: a build writes beside its sources, and the repository's are shared.
    source, out = tmp_path_factory.mktemp("client-source") / "python", tmp_path_factory.mktemp("wheel")
    shutil.copytree(CLIENT, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    result = run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--wheel-dir",
            str(out),
            str(source),
        ],
        cwd=out,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    [built] = out.glob("astrabox_client-*.whl")
    return built


@pytest.fixture(scope="module")
def client_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A new venv holding the client wheel and what it requires, nothing else; yields its bin/."""
    venv = tmp_path_factory.mktemp("client-venv")
    result = run([sys.executable, "-m", "venv", str(venv)], cwd=venv)
    assert result.returncode == 0, result.stderr
    result = run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", str(wheel)],
        cwd=venv,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    yield venv / "bin"


def test_the_wheel_holds_the_sdk_alone_and_requires_only_grpc_protobuf_and_yaml(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
        requires = {
            line.split(":", 1)[1].strip()
            for line in archive.read(metadata).decode().splitlines()
            if line.startswith("Requires-Dist:")
        }
    packages = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert packages == {"astrabox"}
    for expected in (
        "astrabox/py.typed",
        "astrabox/client.py",
        "astrabox/cli.py",
        "astrabox/sessions.py",
        "astrabox/agent_files.py",
        "astrabox/messages.py",
        "astrabox/events.py",
        "astrabox/testing.py",
        "astrabox/__main__.py",
        "astrabox/sessionkernel/v1/session_kernel_service_pb2_grpc.py",
        "astrabox/sessionkernel/v1/events_pb2.pyi",
        "astrabox/runner/v1/runner_service_pb2.py",
    ):
        assert expected in names
    assert {r.split(">")[0].split("=")[0].split("<")[0].strip() for r in requires} == CLIENT_REQUIREMENTS


def test_the_installed_client_imports_and_no_server_module_is_importable(client_venv: Path, tmp_path: Path) -> None:
    probe = (
        "import importlib.util, json, astrabox.client, astrabox.cli, astrabox.render, astrabox.errors\n"
        "import astrabox.sessions, astrabox.messages, astrabox.events, astrabox.testing\n"
        "from astrabox.runner.v1 import runner_service_pb2_grpc\n"
        f"print(json.dumps([m for m in {SERVER_MODULES!r} if importlib.util.find_spec(m)]))\n"
    )
    result = run([str(client_venv / "python"), "-c", probe], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


def test_the_client_command_offers_only_the_client_commands(client_venv: Path, tmp_path: Path) -> None:
    result = run([str(client_venv / "astrabox"), "--help"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (
        "{run,session,agents,credentials,environments,schedules,memory,whoami,projects,keys,audit,hosts,quotas,status,top,webhooks}"
        in result.stdout
    )
    assert "astrabox-server distribution" in result.stdout
    result = run([str(client_venv / "astrabox"), "up"], cwd=tmp_path)
    assert result.returncode == 2 and "invalid choice: 'up'" in result.stderr


def test_the_local_stack_of_the_client_alone_says_it_needs_the_server(client_venv: Path, tmp_path: Path) -> None:
    script = tmp_path / "local_stack.py"
    script.write_text(LOCAL_STACK_WITHOUT_SERVER)
    result = run([str(client_venv / "python"), str(script)], cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "runs `astrabox up`" in result.stdout and "install astrabox-server" in result.stdout
    assert "started" not in result.stdout


def test_the_installed_client_drives_a_session_end_to_end(
    client_venv: Path, local_stack: LocalStack, tmp_path: Path
) -> None:
    script = tmp_path / "drive.py"
    script.write_text(DRIVE_A_SESSION)
    # The SDK finds the key in the environment ...
    with_key = {"ASTRABOX_API_KEY": local_stack.api_key}
    result = run([str(client_venv / "python"), str(script), local_stack.address], cwd=tmp_path, env=with_key)
    assert result.returncode == 0, result.stdout + result.stderr
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen["kinds"][:2] == ["session_created", "startup_requested"]
    assert "runtime_ready" in seen["kinds"] and seen["kinds"][-1] == "turn_completed"
    assert seen["outcome"] == "COMPLETED"
    assert seen["tool_results"] == ["from-the-client-wheel"], "the command's output never came back through the stream"

    # ... and the command in a file it is told of.
    key_file = tmp_path / "key"
    key_file.write_text(local_stack.api_key + "\n")
    result = run(
        [
            str(client_venv / "astrabox"),
            "run",
            "--target",
            local_stack.address,
            "--api-key-file",
            str(key_file),
            "--timeout",
            "180",
            "run: echo through-the-cli",
        ],
        cwd=tmp_path,
        env={"ASTRABOX_API_KEY": ""},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "through-the-cli" in result.stdout and "✓ turn completed" in result.stdout
