"""The all-in-one stack behind `astrabox up` and `astrabox demo`.

One process runs an embedded PostgreSQL (unless a database URL is given), the
control plane, and one data-plane agent with the local sandbox driver. The
agent serves the built-in offline model when no ANTHROPIC_API_KEY is set.
`astrabox up` takes its database URL like the control plane does: from the
environment or a file, so that nothing here puts a secret on a command line.
The halves' settings it hands on (metrics, idle stop, capacity, allowed networks)
are declared by the halves and reused here, flag, variable and config-file key alike.

Its logs go to `<data dir>/astrabox.log`, warnings and errors echoed readably on
the terminal, so that a person sees the banner and what needs them; `--verbose`
or a `--log-format` puts every line on standard error instead.

Its enrollment token is random, made (0600) in `<data dir>/enrollment-token` on the first start
(ASTRABOX_ENROLLMENT_TOKEN overrides it), never empty; its own agent is admitted by a join token
minted for it at each start (spent at once, or expired in ten minutes). Any other agent, even
with the token, waits until an operator admits it (`astrabox hosts admit ID`).

On a database with no API key yet, the control plane registers an admin key
of the operator project (`controlplane.identity.bootstrap`): the one in
$ASTRABOX_BOOTSTRAP_KEY_FILE, else a new one written to `<data dir>/admin-key`
(0600). `astrabox up` saves it where the client finds it
(`astrabox.credentials.config_path()`, 0600), so `astrabox run`, `astrabox
session …` and programs on this machine authenticate without more set-up.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import asyncpg
import structlog

from astrabox.credentials import config_path, save_api_key
from astrabox.secret_settings import SecretOption, SecretSettingError, remember, warn_on_command_line
from controlplane.credential_store import cipher
from controlplane.database import DatabaseUnreachable
from controlplane.embedded_postgres import EmbeddedPostgres
from controlplane.server import serve
from controlplane.settings import (
    CREDENTIAL_KEY,
    DATABASE_URL,
    DEFAULT_LISTEN,
    DEFAULT_WEB_LISTEN,
    ENROLLMENT_TOKEN,
    ControlPlaneSettings,
)
from dataplane_agent.settings import AgentSettings
from serverkit import heap, logs, private_files
from serverkit import settings as serverkit_settings
from serverkit.settings import option, same_as, secret
from serverkit.waits import bounded

log = structlog.get_logger(__name__)

AGENT_READY_TIMEOUT = 60.0
ENROLLMENT_TOKEN_FILE = "enrollment-token"
# Long enough for the local agent's first Hello after a slow start; it is spent by then.
LOCAL_JOIN_TOKEN_TTL = timedelta(minutes=10)
BOOTSTRAP_KEY_FILE_ENV = "ASTRABOX_BOOTSTRAP_KEY_FILE"
# Where `astrabox up` writes its log in the data directory, unless it logs to the terminal.
LOG_FILE = "astrabox.log"


@dataclass(frozen=True, slots=True)
class RunningStack:
    address: str
    # The bootstrap admin key (empty when the database already had keys and this stack made none).
    api_key: str
    # Where the web API and the console are served (http://host:port), "" when off.
    web_url: str = ""
    # Where the control plane and the agent serve /metrics (host:port), "" when off.
    controlplane_metrics: str = ""
    agent_metrics: str = ""


def _bootstrap_key_file(data_dir: Path) -> Path:
    return Path(os.environ.get(BOOTSTRAP_KEY_FILE_ENV) or data_dir / "admin-key")


DEFAULT_DATA_DIR = "~/.astrabox"
# Root runs the embedded PostgreSQL as `postgres`, which cannot get through root's home (0700).
ROOT_DATA_DIR = "/var/lib/astrabox"


def default_data_dir() -> Path:
    """Where `astrabox up` keeps its state: ~/.astrabox, or /var/lib/astrabox as root."""
    return Path(ROOT_DATA_DIR if os.geteuid() == 0 else DEFAULT_DATA_DIR).expanduser()


@contextlib.asynccontextmanager
async def stack(up: UpSettings) -> AsyncIterator[RunningStack]:
    """Run the whole stack until the context exits; yields its addresses and admin key.

    On the way out it unmounts the workspace images under the data directory (the agent
    mounts them again when it re-opens their sandboxes), so that the directory can
    be deleted and no loop device stays taken."""
    from dataplane_agent.main import Started, run_agent
    from dataplane_agent.sandboxes.disk import release_mounts

    data_dir, database_url = up.data_dir, up.database_url
    _make_private(data_dir)
    postgres = None
    if not database_url:
        postgres = EmbeddedPostgres(data_dir / "postgres")
        database_url = await postgres.start()
    try:
        key_file = _bootstrap_key_file(data_dir)
        # The credential store's key, made (0600) in the state directory on the first start.
        credential_key = os.environ.get(CREDENTIAL_KEY.env) or cipher.key_file(data_dir / "credential-key", create=True)
        remember(credential_key)
        enrollment_token = _enrollment_token(data_dir)
        settings = ControlPlaneSettings(
            database_url=database_url,
            listen=up.listen,
            bootstrap_key_file=str(key_file),
            credential_key=credential_key,
            enrollment_token=enrollment_token,
            web_listen=up.web_listen,
            metrics_listen=up.metrics_listen,
            idle_stop_after=up.idle_stop_after,
        )
        async with serve(settings) as controlplane:
            # The local agent is admitted by construction: a join token for it alone, used at once.
            _, join_token = await controlplane.admission.mint_join_token(LOCAL_JOIN_TOKEN_TTL, None, "astrabox up")
            remember(join_token)
            # `--config ''`: the file ASTRABOX_CONFIG names is one process's, never this local agent's.
            agent_settings = AgentSettings.from_args(
                ["--config", ""],
                controlplane=controlplane.address,
                state_dir=(data_dir / "agent").expanduser(),
                agent_id="local",
                enrollment_token=enrollment_token,
                join_token=join_token,
                capacity=up.capacity,
                egress_allowed_networks=up.egress_allowed_networks,
                mcp_allowed_networks=up.mcp_allowed_networks,
                metrics_listen=agent_metrics_listen(up.metrics_listen),
            )
            stop = asyncio.Event()
            started: list[Started] = []
            agent = asyncio.create_task(run_agent(agent_settings, stop=stop, started=started.append), name="agent")
            try:
                await _wait_for_agent(controlplane.pool, agent)
                api_key = key_file.read_text().strip() if key_file.exists() else ""
                remember(api_key)  # never in a log line
                yield RunningStack(
                    controlplane.address,
                    api_key,
                    controlplane.web_url,
                    controlplane.metrics_address,
                    started[0].metrics_address if started else "",
                )
            finally:
                stop.set()
                await bounded(agent, 30)
    finally:
        try:
            if postgres is not None:
                await postgres.stop()
        finally:
            release_mounts(data_dir)


def agent_metrics_listen(metrics_listen: str) -> str:
    """Where the stack's agent serves /metrics, beside the control plane's `metrics_listen`: the
    next port (9464, 9465, as deploy/prometheus/prometheus.yml has them), a free one of its own
    for port 0; "" (off) with the control plane's."""
    host, sep, port = metrics_listen.rpartition(":")
    if not metrics_listen or not sep or not port.isdigit():
        return metrics_listen  # off, or the control plane refuses it first, saying why
    return f"{host}:{int(port) + 1 if int(port) else 0}"


def _enrollment_token(data_dir: Path) -> str:
    """The stack's enrollment token: ASTRABOX_ENROLLMENT_TOKEN, else a random one made (0600) in the
    state directory on the first start. Never empty: an agent that enrols with it still waits to be
    admitted (`astrabox hosts admit`), and one without it is refused."""
    token = os.environ.get(ENROLLMENT_TOKEN.env, "")
    if not token:
        path = data_dir / ENROLLMENT_TOKEN_FILE
        private_files.create(path, secrets.token_urlsafe(32))
        try:
            token = private_files.read(path, "the enrollment token file", 1024).decode(errors="replace").strip()
        except private_files.NotPrivate as error:
            raise SecretSettingError(str(error)) from None
        if not token:
            raise SecretSettingError(f"the enrollment token file {path} is empty: remove it to make a new one")
    remember(token)
    return token


def _make_private(data_dir: Path) -> None:
    """Make the state directory, private: it holds the database and the agent's state. Root runs
    PostgreSQL as `postgres`, which must get through to its own (0700) directory in here."""
    if not data_dir.exists():
        data_dir.mkdir(parents=True)
        data_dir.chmod(0o711 if os.geteuid() == 0 else 0o700)


async def _wait_for_agent(pool: asyncpg.Pool, agent: asyncio.Task[None]) -> None:
    async with asyncio.timeout(AGENT_READY_TIMEOUT):
        while not await pool.fetchval("SELECT count(*) FROM agents WHERE lease_expires_at > now()"):
            if agent.done():
                agent.result()  # raises the agent's start-up error
                raise RuntimeError("the local agent stopped during start-up")
            await asyncio.sleep(0.05)


@dataclass(frozen=True, slots=True)
class UpSettings:
    """What `astrabox up` is configured with; `astrabox up --help` lists the flags."""

    listen: str = field(default=DEFAULT_LISTEN, metadata=option("--listen", help="gRPC address (default %(default)s)"))
    # The web API and the console; empty: off.
    web_listen: str = field(
        default=DEFAULT_WEB_LISTEN,
        metadata=option(
            "--web-listen",
            help="host:port of the web API and the console, port 0 picks one, '' turns it off (default %(default)s)",
        ),
    )
    # Empty: an embedded PostgreSQL in data_dir.
    database_url: str = field(
        default="",
        repr=False,
        metadata=secret(DATABASE_URL, note="; without one an embedded PostgreSQL is started in --data-dir"),
    )
    data_dir: Path = field(
        default_factory=default_data_dir,
        metadata=option(
            "--data-dir",
            default=str(default_data_dir()),
            convert=Path,
            help=f"state directory (default %(default)s; {DEFAULT_DATA_DIR}, or {ROOT_DATA_DIR} as root, "
            "since PostgreSQL then runs as `postgres`, which must reach it)",
        ),
    )
    # The halves' own settings, declared where they are (flag, variable, default, help) and handed on.
    metrics_listen: str = same_as(
        ControlPlaneSettings, "metrics_listen", note="; the control plane's, and the agent's on the next port"
    )
    idle_stop_after: timedelta = same_as(ControlPlaneSettings, "idle_stop_after")
    capacity: int = same_as(AgentSettings, "capacity")
    egress_allowed_networks: str = same_as(AgentSettings, "egress_allowed_networks")
    mcp_allowed_networks: str = same_as(AgentSettings, "mcp_allowed_networks")
    # Where the logs go: a file in the data directory, with warnings and errors echoed readably on the
    # terminal; or, with a format named or --verbose, all of them to standard error.
    log_format: str = field(
        default="auto",
        metadata=option(
            "--log-format",
            env="ASTRABOX_LOG_FORMAT",
            choices=("auto", "json", "console"),
            help=f"auto: the logs go to <data dir>/{LOG_FILE}, warnings and errors also to the terminal, "
            "readable; json or console: all of them to standard error in that format (env %(env)s; "
            "default %(default)s)",
        ),
    )
    verbose: bool = field(
        default=False,
        metadata=option(
            "--verbose",
            switch=True,
            help="all the logs to standard error, readable on a terminal (JSON elsewhere, or as --log-format "
            "says), rather than to the log file",
        ),
    )
    log_level: str = same_as(AgentSettings, "log_level")
    # The secrets given as flags rather than by environment or file (warned about at start).
    secrets_on_command_line: tuple[SecretOption, ...] = ()

    @property
    def log_file(self) -> Path | None:
        """The file the logs go to; None when they go to the terminal."""
        return None if self.verbose or self.log_format != "auto" else self.data_dir / LOG_FILE

    @classmethod
    def from_args(cls, argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> UpSettings:
        """SecretSettingError when the database URL is given twice or its file cannot be read."""
        return serverkit_settings.from_args(
            cls, argv, environ, prog="astrabox up", description="Run the whole stack on this machine."
        )


def main(argv: Sequence[str]) -> None:
    """`astrabox up`."""
    try:
        up = UpSettings.from_args(argv)
    except SecretSettingError as error:
        sys.exit(f"astrabox up: {error}")
    if up.log_file is not None:
        _make_private(up.data_dir)
    log_to(up.log_file, up.log_format, up.log_level, "astrabox up")
    warn_on_command_line(up.secrets_on_command_line, "astrabox up", log)
    try:
        sys.exit(asyncio.run(run_up(up)))
    except SecretSettingError as error:  # the local agent's
        sys.exit(f"astrabox up: {error}")
    except DatabaseUnreachable as error:
        log.error("database_unreachable", database_url=up.database_url, error=str(error))
        sys.exit(f"astrabox up: cannot connect to the database: {error}")


def log_to(path: Path | None, fmt: str, level: str, prog: str) -> None:
    """The process's logs: appended to `path` (0600) as JSON, warnings and errors echoed readably on
    standard error; without a path, all to standard error in `fmt`."""
    if path is None:
        logs.configure(fmt, level)
        return
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError as error:
        sys.exit(f"{prog}: cannot write its log to {path}: {error.strerror} (--verbose logs to the terminal)")
    # Open for the life of the process: every log line is written (and flushed) to it.
    logs.configure("json", level, stream=open(descriptor, "a", encoding="utf-8"), echo=sys.stderr)  # noqa: SIM115


async def run_up(up: UpSettings) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with stack(up) as running:
        address = running.address
        if running.api_key:
            saved = save_api_key(running.api_key)
            key_note = f"  admin API key of project default: saved in {saved} (mode 0600)\n"
        else:
            key_note = f"  the database has API keys already: use one of them (or {config_path()} if saved before)\n"
        console = f"  console: {running.web_url}  (sign in with that key)\n" if running.web_url else ""
        print(
            f"AstraBox is up on {address} (state in {up.data_dir})\n{key_note}{console}{_metrics_note(running)}"
            f"{_logs_note(up.log_file)}"
            f'  try:  astrabox run --target {address} "Create hello.txt"\n'
            f'        grpcurl -plaintext -H "authorization: Bearer $(cat {config_path()})" {address} list\n'
            "  Ctrl-C stops it.",
            flush=True,
        )
        heap.freeze_startup()  # both servers' startup objects out of every later collection
        await stop.wait()
    return 0


def _metrics_note(running: RunningStack) -> str:
    if not running.controlplane_metrics:
        return ""
    agent = f", agent http://{running.agent_metrics}/metrics" if running.agent_metrics else ""
    return f"  metrics: control plane http://{running.controlplane_metrics}/metrics{agent}\n"


def _logs_note(path: Path | None) -> str:
    return f"  logs: {path}  (warnings and errors are shown here too; --verbose shows them all here)\n" if path else ""


async def run_demo(args: argparse.Namespace, prompt: str) -> int:
    from astrabox.cli import run_prompt
    from astrabox.sessionkernel.v1 import session_pb2
    from dataplane_agent.sandboxes.disk import release_mounts

    log_file = None
    if not (args.verbose or args.log_format != "auto"):
        # Kept after the demo, whose directory goes: what it logged stays readable.
        descriptor, name = tempfile.mkstemp(prefix="astrabox-demo-", suffix=".log")
        os.close(descriptor)
        log_file = Path(name)
    log_to(log_file, args.log_format, "info", "astrabox demo")
    with tempfile.TemporaryDirectory(prefix="astrabox-demo-") as scratch:
        os.chmod(scratch, 0o711)  # the embedded PostgreSQL runs as `postgres` when we are root
        try:
            async with stack(UpSettings(data_dir=Path(scratch), listen="127.0.0.1:0", web_listen="")) as running:
                print(
                    f"AstraBox is up on {running.address} (embedded PostgreSQL, local bubblewrap sandbox, "
                    f"offline model unless ANTHROPIC_API_KEY is set)\n{_logs_note(log_file)}",
                    flush=True,
                )
                status, session = await run_prompt(
                    running.address, prompt, timeout=args.timeout, api_key=running.api_key
                )
                written = sorted((Path(scratch) / "agent").rglob("workspace/*"))
                print("\nworkspace after the turn:")
                for path in written:
                    content = path.read_text(errors="replace") if path.is_file() and path.stat().st_size < 4096 else ""
                    print(f"  {path.name}: {content.strip()}")
                state = session_pb2.SessionState.Name(session.state).removeprefix("SESSION_STATE_")
                print(f"\nsession {session.session_id} is {state}")
        finally:  # the workspace images go with the demo's directory
            release_mounts(Path(scratch))
    return status
