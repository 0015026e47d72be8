"""Secrets off the command line, end to end, with the real `astrabox` processes.

Given by environment and by file, the database password, the enrollment token
and the API key show in no process's command line (the control plane, the
agent, the engine's CLI, the sandbox, anything else on the machine) nor in any
log; nor do AstraBox API keys (used, created, or guessed and refused) and the
agent's own credential, in logs, the journal or the audit trail. Given as a flag, a secret works but is warned about; a file that cannot
be read stops the process with a message that says which; a database that
refuses the connection is logged with its URL's password masked.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest
import pytest_asyncio

from astrabox.client import AstraBoxClient
from astrabox.errors import AstraBoxError
from controlplane.identity import keys
from tests.support.processes import Process, start_agent

pytestmark = pytest.mark.e2e

ASTRABOX = str(Path(sys.executable).with_name("astrabox"))
TURN_TIMEOUT = 180


def _private_file(path: Path, content: str) -> Path:
    path.write_text(content + "\n")
    path.chmod(0o600)
    return path


def _command_lines() -> dict[int, str]:
    """Every process's command line, as `ps` shows it to any user of the machine."""
    lines = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                lines[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:  # gone meanwhile
                continue
    return lines


def _assert_on_no_command_line(secrets: dict[str, str]) -> dict[int, str]:
    lines = _command_lines()
    ps = subprocess.run(["ps", "-eo", "pid,args", "--no-headers"], capture_output=True, text=True, check=True).stdout
    for name, secret in secrets.items():
        assert secret not in ps, (
            f"the {name} is on a command line: {[line for line in ps.splitlines() if secret in line]}"
        )
        shown = {pid: line for pid, line in lines.items() if secret in line}
        assert not shown, f"the {name} is on a command line: {shown}"
    return lines


@pytest_asyncio.fixture
async def database_role(database_url: str) -> AsyncIterator[str]:
    """The test database's URL with a role and password of this test's own, so that nothing else
    running on the machine could have put the same password on a command line."""
    role, password = f"secrets_{uuid.uuid4().hex[:12]}", f"pw-{uuid.uuid4().hex}"
    admin = await asyncpg.connect(database_url, timeout=10)
    try:
        await admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        await admin.execute(f'ALTER DATABASE "{urlsplit(database_url).path[1:]}" OWNER TO {role}')
        parts = urlsplit(database_url)
        yield parts._replace(netloc=f"{role}:{password}@{parts.hostname}:{parts.port}").geturl()
        await admin.execute(f"REASSIGN OWNED BY {role} TO CURRENT_USER; DROP OWNED BY {role}; DROP ROLE {role}")
    finally:
        await admin.close(timeout=10)


@pytest.fixture
def offline_model(tmp_path: Path) -> Iterator[str]:
    """An offline model of its own process, so that the agent holds an API key and forwards to it."""
    model = Process("offline-model", [sys.executable, "-m", "dataplane_agent.offline_model"], tmp_path / "model.log")
    try:
        yield model.wait_for_line(r"(http://\S+)").group(1)
    finally:
        model.stop()


async def test_secrets_by_environment_and_file_reach_no_command_line_nor_log(
    database_role: str, offline_model: str, tmp_path: Path
) -> None:
    token, api_key = f"enroll-{uuid.uuid4().hex}", f"sk-ant-api03-{uuid.uuid4().hex}"
    secrets = {
        "database password": str(urlsplit(database_role).password),
        "enrollment token": token,
        "API key": api_key,
    }
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    url_file = _private_file(tmp_path / "database-url", database_role)
    token_file = _private_file(tmp_path / "enrollment-token", token)
    key_file = _private_file(tmp_path / "api-key", api_key)

    controlplane = Process(
        "controlplane", [ASTRABOX, "controlplane", "--listen", "127.0.0.1:0"], log_dir / "controlplane.log",
        env={"ASTRABOX_DATABASE_URL_FILE": str(url_file), "ASTRABOX_ENROLLMENT_TOKEN": token,
             "ASTRABOX_AGENT_ADMISSION": "automatic"},
    )  # fmt: skip
    processes = [controlplane]
    try:
        address = controlplane.wait_for_line(r"controlplane listening on (\S+)").group(1)
        # Connected only with the right token: the control plane refuses any other.
        agent = start_agent(
            address, tmp_path / "agent-state", log_dir, args=("--enrollment-token-file", str(token_file)),
            env={"ANTHROPIC_API_KEY_FILE": str(key_file), "ASTRABOX_MODEL_BASE_URL": offline_model},
        )  # fmt: skip
        processes.append(agent)
        async with AstraBoxClient.connect(address) as admin:  # the run's bootstrap admin key
            created = await admin.admin.create_api_key("secrets", role="developer")
        secrets["AstraBox admin key"] = os.environ["ASTRABOX_API_KEY"]
        secrets["AstraBox developer key"] = created.secret
        guessed = keys.new_key().secret
        secrets["a guessed key"] = guessed
        async with AstraBoxClient.connect(address, api_key=guessed) as stranger:
            with pytest.raises(AstraBoxError) as refused:
                await stranger.list_sessions()
            assert guessed not in str(refused.value)
        async with AstraBoxClient.connect(address, api_key=created.secret) as client:
            session = await client.create_session(request_id="secrets")
            await client.wait_for_state(session.session_id, ["READY"], timeout=120)
            accepted = await client.send_message(session.session_id, "run: echo the model answered")
            async with asyncio.timeout(TURN_TIMEOUT):
                async for event in client.watch(session.session_id):
                    if event.turn_id == accepted.turn_id and event.WhichOneof("payload") in (
                        "turn_completed",
                        "turn_failed",
                    ):
                        break
            # The model was reached with the key from the file: the turn's tool ran.
            assert event.WhichOneof("payload") == "turn_completed" and not event.turn_completed.is_error

            lines = _assert_on_no_command_line(secrets)  # while the engine and its sandbox run

        # Not vacuous: the stack's own processes and the engine's CLI were among those looked at.
        assert any(pid == controlplane.proc.pid for pid in lines) and any(pid == agent.proc.pid for pid in lines)
        assert any("claude" in line for line in lines.values())
    finally:
        for process in reversed(processes):
            process.stop()
    secrets["agent credential"] = (tmp_path / "agent-state" / "agent-credential").read_text().strip()
    database = await asyncpg.connect(database_role)
    try:
        journal = "\n".join(r[0] for r in await database.fetch("SELECT kind || ' ' || payload::text FROM events"))
        audit = "\n".join(str(r) for r in await database.fetch("SELECT * FROM audit_records"))
    finally:
        await database.close()
    assert "turn_completed" in journal.lower() and "CreateSession" in audit  # not vacuous
    for where, text in (("the journal", journal), ("the audit trail", audit)):
        assert not [name for name, secret in secrets.items() if secret in text], f"a secret is in {where}"
    for log in log_dir.iterdir():
        text = log.read_text()
        assert not [name for name, secret in secrets.items() if secret in text], f"a secret is in {log.name}"
    assert "secret_on_command_line" not in (log_dir / "controlplane.log").read_text()


def _run(argv: list[str], env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "ASTRABOX_DATABASE_URL": "", **(env or {})},
    )


def _refused_url(postgres_dsn: str) -> tuple[str, str]:
    """A URL of the test server with a wrong password, and that password."""
    password = f"wrong-{uuid.uuid4().hex}"
    parts = urlsplit(postgres_dsn)
    return parts._replace(netloc=f"{parts.username}:{password}@{parts.hostname}:{parts.port}").geturl(), password


@pytest.mark.parametrize(
    "command",
    [["controlplane", "--listen", "127.0.0.1:0"], ["up", "--listen", "127.0.0.1:0", "--web-listen", "127.0.0.1:0"]],
)
def test_a_database_url_on_the_command_line_is_warned_about_and_its_password_never_logged(
    command: list[str], postgres_dsn: str, tmp_path: Path
) -> None:
    url, password = _refused_url(postgres_dsn)
    extra = ["--data-dir", str(tmp_path / "data")] if command[0] == "up" else []

    result = _run([ASTRABOX, *command, *extra, "--database-url", url])

    assert result.returncode != 0
    assert f"astrabox {command[0]}: warning: --database-url puts a secret on the command line" in result.stderr
    assert "set ASTRABOX_DATABASE_URL or use --database-url-file" in result.stderr
    # `up` logs to a file in its data directory, its warnings and errors shown on the terminal too.
    logged = (tmp_path / "data" / "astrabox.log").read_text() if command[0] == "up" else result.stderr
    assert '"event": "secret_on_command_line"' in logged and '"flag": "--database-url"' in logged
    unreachable = [line for line in logged.splitlines() if '"database_unreachable"' in line]
    assert unreachable and "InvalidPasswordError" in unreachable[0]
    masked = f"{urlsplit(url).username}:***@{urlsplit(url).hostname}:{urlsplit(url).port}"
    assert masked in unreachable[0]
    if command[0] == "up":
        shown = [line for line in result.stderr.splitlines() if "database_unreachable" in line]
        assert shown and not shown[0].startswith("{") and masked in shown[0]
    assert password not in result.stdout + result.stderr + logged


def test_a_refused_database_url_from_the_environment_is_logged_without_its_password(postgres_dsn: str) -> None:
    url, password = _refused_url(postgres_dsn)

    result = _run([ASTRABOX, "controlplane", "--listen", "127.0.0.1:0"], env={"ASTRABOX_DATABASE_URL": url})

    assert result.returncode != 0
    assert "warning" not in result.stderr and "secret_on_command_line" not in result.stderr
    assert "cannot connect to the database: InvalidPasswordError" in result.stderr
    assert '"database_unreachable"' in result.stderr and ":***@" in result.stderr
    assert password not in result.stdout + result.stderr


def test_an_unreadable_secret_file_stops_the_process_and_says_which(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-file"

    controlplane = _run([ASTRABOX, "controlplane", "--database-url-file", str(missing)])
    agent = _run(
        [ASTRABOX, "agent", "--state-dir", str(tmp_path / "state")],
        env={"ASTRABOX_ENROLLMENT_TOKEN_FILE": str(missing)},
    )
    nothing = _run([ASTRABOX, "controlplane"])

    assert controlplane.returncode != 0 and agent.returncode != 0
    assert controlplane.stderr.strip() == (
        f"astrabox controlplane: cannot read the PostgreSQL DSN from --database-url-file {missing}: "
        f"No such file or directory; give the path of a file holding only the PostgreSQL DSN, readable by this "
        f"user (uid {os.getuid()})"
    )
    assert agent.stderr.startswith(
        f"astrabox agent: cannot read the control plane's enrollment token from ASTRABOX_ENROLLMENT_TOKEN_FILE {missing}"
    )
    assert (
        nothing.returncode != 0
        and "needs the PostgreSQL DSN: set ASTRABOX_DATABASE_URL or give --database-url-file" in nothing.stderr
    )


def test_a_token_on_the_agents_command_line_is_warned_about(tmp_path: Path) -> None:
    token = f"enroll-{uuid.uuid4().hex}"
    agent = Process(
        "agent",
        [ASTRABOX, "agent", "--controlplane", "127.0.0.1:1", "--state-dir", str(tmp_path / "state"),
         "--enrollment-token", token, "--log-format", "json"],
        tmp_path / "agent.log", env={"ANTHROPIC_API_KEY": "", "ASTRABOX_MODEL_BASE_URL": ""},
    )  # fmt: skip
    try:
        agent.wait_for_line(r"astrabox agent: warning: --enrollment-token puts a secret on the command line")
        agent.wait_for_line(r'"event": "secret_on_command_line"')
    finally:
        agent.stop()
    assert token not in (tmp_path / "agent.log").read_text()
