"""A PostgreSQL cluster owned by this process: `astrabox up` and the tests.

`EmbeddedPostgres` initialises a data directory on first use (or re-uses an
initialised one), starts the server on 127.0.0.1 only, creates the `astrabox`
database and hands back an asyncpg DSN. The server is reached over TCP with a
password that is generated at initdb time and kept in the data directory.

PostgreSQL refuses to run as root, so when this process is root the cluster is
initialised and run as the `postgres` system user, which then owns the data
directory.

    EmbeddedPostgresError
     └── PostgresNotFoundError   no server binaries on this machine
"""

from __future__ import annotations

import asyncio
import os
import pwd
import re
import secrets
import shutil
import socket
import stat
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import asyncpg
import structlog

from serverkit.waits import bounded

log = structlog.get_logger(__name__)

DATABASE = "astrabox"
SUPERUSER = "astrabox"
PASSWORD_FILE = "astrabox.password"
LOG_FILE = "server.log"
BINDIR_ENV = "ASTRABOX_PG_BINDIR"

_PG_CTL_TIMEOUT_S = 60
_CONNECT_TIMEOUT_S = 10
_FAST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
_INSTALL_HINT = (
    "install the PostgreSQL server (Debian/Ubuntu: `apt-get install postgresql`; "
    "Fedora: `dnf install postgresql-server`; macOS: `brew install postgresql`), "
    f"or set {BINDIR_ENV} to the directory holding initdb and pg_ctl, "
    "or give a database URL of a PostgreSQL you run yourself"
)


class EmbeddedPostgresError(Exception):
    """The embedded cluster could not be initialised, started or stopped."""


class PostgresNotFoundError(EmbeddedPostgresError):
    """No PostgreSQL server binaries (initdb, pg_ctl, postgres) were found."""


def find_bindir(explicit: Path | None = None) -> Path:
    """The directory of the newest PostgreSQL server binaries on this machine.

    Only `explicit` is considered when given. Otherwise, in order:
    $ASTRABOX_PG_BINDIR, `pg_config --bindir`, /usr/lib/postgresql/<newest>/bin
    (Debian's layout), then initdb on PATH.
    """
    if explicit is not None:
        if _has_server_binaries(explicit):
            return explicit
        raise PostgresNotFoundError(f"no initdb, pg_ctl and postgres in {explicit}: {_INSTALL_HINT}")
    candidates: list[Path] = []
    if os.environ.get(BINDIR_ENV):
        candidates.append(Path(os.environ[BINDIR_ENV]))
    if pg_config := shutil.which("pg_config"):
        try:
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True)
            candidates.append(Path(out.stdout.strip()))
        except (OSError, subprocess.SubprocessError):
            pass
    debian = Path("/usr/lib/postgresql")
    if debian.is_dir():
        versions = [p for p in debian.iterdir() if p.name.isdigit()]
        candidates += [p / "bin" for p in sorted(versions, key=lambda p: -int(p.name))]
    if initdb := shutil.which("initdb"):
        candidates.append(Path(initdb).resolve().parent)
    for bindir in candidates:
        if _has_server_binaries(bindir):
            return bindir
    raise PostgresNotFoundError(f"PostgreSQL server binaries not found: {_INSTALL_HINT}")


def _has_server_binaries(bindir: Path) -> bool:
    return all(os.access(bindir / tool, os.X_OK) for tool in ("initdb", "pg_ctl", "postgres"))


class _SubprocessUser(TypedDict, total=False):
    """The keyword arguments of `asyncio.create_subprocess_exec` that run it as another user."""

    user: int
    group: int | None
    extra_groups: list[int]


@dataclass(frozen=True, slots=True)
class _RunAs:
    """The system user the server runs as (None fields: this process's own)."""

    uid: int | None = None
    gid: int | None = None
    home: str | None = None
    name: str | None = None

    @classmethod
    def for_current_process(cls, system_user: str) -> _RunAs:
        if os.geteuid() != 0:
            return cls()
        try:
            entry = pwd.getpwnam(system_user)
        except KeyError:
            raise EmbeddedPostgresError(
                f"running as root, PostgreSQL must run as another user, but there is no "
                f"{system_user!r} system user: {_INSTALL_HINT} (it creates one)"
            ) from None
        return cls(entry.pw_uid, entry.pw_gid, entry.pw_dir, entry.pw_name)

    def subprocess_kwargs(self) -> _SubprocessUser:
        if self.uid is None:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        if self.name is not None:
            env.update(HOME=self.home or "/", USER=self.name, LOGNAME=self.name)
        return env

    def chown(self, path: Path) -> None:
        if self.uid is not None:
            os.chown(path, self.uid, -1 if self.gid is None else self.gid)  # -1: group unchanged

    def check_can_reach(self, path: Path) -> None:
        """Fails clearly when a parent directory is closed to the server's user."""
        if self.uid is None:
            return
        for parent in path.parents:
            st = parent.stat()
            if st.st_uid == self.uid:
                bit = stat.S_IXUSR
            elif st.st_gid == self.gid:
                bit = stat.S_IXGRP
            else:
                bit = stat.S_IXOTH
            if not st.st_mode & bit:
                raise EmbeddedPostgresError(
                    f"the {self.name!r} user cannot reach {path}: {parent} is not searchable "
                    f"by it; choose a data directory elsewhere or `chmod o+x {parent}`"
                )


class EmbeddedPostgres:
    """One PostgreSQL cluster in `data_dir`, listening on 127.0.0.1:`port`.

    `port=0` picks a free port at the first start; later starts (after
    `stop()`) re-use it so DSNs handed out stay valid. `fast=True` turns off
    fsync, synchronous commit and full-page writes: only for throwaway
    clusters, as a crash of the server may then lose committed transactions.
    `settings` are extra server settings (`name -> value`) for every start.
    `bindir` pins the server binaries; by default `find_bindir()` looks.
    """

    def __init__(
        self,
        data_dir: Path,
        port: int = 0,
        *,
        fast: bool = False,
        settings: Mapping[str, str] | None = None,
        system_user: str = "postgres",
        bindir: Path | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).absolute()
        self._requested_port = port
        self._port = port
        self._fast = fast
        self._settings = {**(_FAST_SETTINGS if fast else {}), **(settings or {})}
        self._system_user = system_user
        self._dsn: str | None = None
        self._explicit_bindir = bindir
        self._bindir: Path | None = None
        self._run_as = _RunAs()

    @property
    def port(self) -> int:
        """The TCP port; 0 until the first start when it was asked to pick one."""
        return self._port

    @property
    def dsn(self) -> str:
        """The DSN of the `astrabox` database; only valid after `start()`."""
        if self._dsn is None:
            raise EmbeddedPostgresError("the embedded PostgreSQL has not been started")
        return self._dsn

    @property
    def pid(self) -> int | None:
        """The postmaster's process id while the server runs (for fault tests)."""
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def dsn_for(self, database: str) -> str:
        """A DSN for another database of this cluster."""
        return f"postgresql://{SUPERUSER}:{self._password()}@127.0.0.1:{self._port}/{database}"

    async def start(self) -> str:
        """Initialise if needed, start the server, create the database; returns its DSN."""
        self._prepare()
        if not (self.data_dir / "PG_VERSION").is_file():
            await self._initdb()
        if await self._is_running():
            # Left behind by a process that died without stopping it.
            log.warning("embedded_postgres_orphan_stopped", data_dir=str(self.data_dir))
            await self._pg_ctl("stop", "-m", "fast")
        for attempt in range(3):
            if self._requested_port == 0 and (attempt or not self._port):
                self._port = _free_port()
            try:
                await self._pg_ctl("start", "-l", str(self.data_dir / LOG_FILE), "-o", self._options())
                break
            except EmbeddedPostgresError:
                if self._requested_port or attempt == 2 or not self._port_was_taken():
                    raise
        await self._create_database()
        self._dsn = self.dsn_for(DATABASE)
        log.info("embedded_postgres_started", data_dir=str(self.data_dir), port=self._port)
        return self._dsn

    async def stop(self, mode: str = "fast") -> None:
        """Stops the server if it runs. `mode="immediate"` is a crash: no checkpoint."""
        if mode not in ("smart", "fast", "immediate"):
            raise ValueError(f"unknown shutdown mode {mode!r}")
        self._prepare()
        if not await self._is_running():
            return
        await self._pg_ctl("stop", "-m", mode)
        log.info("embedded_postgres_stopped", data_dir=str(self.data_dir), mode=mode)

    async def __aenter__(self) -> EmbeddedPostgres:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def _prepare(self) -> None:
        if self._bindir is None:
            self._bindir = find_bindir(self._explicit_bindir)
            self._run_as = _RunAs.for_current_process(self._system_user)

    async def _initdb(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if any(self.data_dir.iterdir()):
            raise EmbeddedPostgresError(f"{self.data_dir} is neither empty nor a PostgreSQL data directory")
        self._run_as.check_can_reach(self.data_dir)
        self._run_as.chown(self.data_dir)
        self.data_dir.chmod(0o700)
        password = secrets.token_urlsafe(24)
        with tempfile.TemporaryDirectory(prefix="astrabox-initdb-") as scratch:
            pwfile = Path(scratch) / "pw"
            pwfile.write_text(password + "\n")
            for path in (Path(scratch), pwfile):
                self._run_as.chown(path)
            await self._run(
                "initdb", "-D", str(self.data_dir), "-U", SUPERUSER, f"--pwfile={pwfile}",
                "--auth-host=scram-sha-256", "--auth-local=peer", "-E", "UTF8", "--locale=C",
                "--no-instructions", *(["--no-sync"] if self._fast else []),
            )  # fmt: skip
        self._run_as.chown(_write_secret(self.data_dir / PASSWORD_FILE, password))

    def _options(self) -> str:
        socket_dir = str(self.data_dir)
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self._port),
            # Unix-socket paths are limited to ~107 bytes; TCP is what we use anyway.
            "unix_socket_directories": socket_dir if len(socket_dir) < 90 else "",
            "TimeZone": "UTC",
            **self._settings,
        }
        return " ".join(_shell_quote(f"--{name}={value}") for name, value in settings.items())

    def _password(self) -> str:
        try:
            return (self.data_dir / PASSWORD_FILE).read_text().strip()
        except OSError as exc:
            raise EmbeddedPostgresError(
                f"{self.data_dir} was not initialised by astrabox (no {PASSWORD_FILE}): {exc}"
            ) from exc

    def _port_was_taken(self) -> bool:
        log_text = _tail(self.data_dir / LOG_FILE)
        return "could not bind" in log_text or "already in use" in log_text

    async def _is_running(self) -> bool:
        code, _ = await self._exec("pg_ctl", "status", "-D", str(self.data_dir))
        return code == 0

    async def _pg_ctl(self, command: str, *args: str) -> None:
        await self._run(
            "pg_ctl", command, "-D", str(self.data_dir), "-w", "-s",
            "-t", str(_PG_CTL_TIMEOUT_S), *args,
        )  # fmt: skip

    async def _run(self, tool: str, *args: str) -> None:
        code, output = await self._exec(tool, *args)
        if code != 0:
            server_log = _tail(self.data_dir / LOG_FILE)
            raise EmbeddedPostgresError(
                f"{tool} {args[0] if args else ''} failed (exit {code}): {output.strip()}"
                + (f"\n--- {LOG_FILE} (tail) ---\n{server_log}" if server_log else "")
            )

    async def _exec(self, tool: str, *args: str) -> tuple[int, str]:
        assert self._bindir is not None
        proc = await asyncio.create_subprocess_exec(
            str(self._bindir / tool), *args,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            cwd=self.data_dir if self.data_dir.is_dir() else "/",
            env=self._run_as.environment(), **self._run_as.subprocess_kwargs(),
        )  # fmt: skip
        try:
            out, _ = await bounded(proc.communicate(), _PG_CTL_TIMEOUT_S + 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise EmbeddedPostgresError(f"{tool} {' '.join(args[:1])} timed out") from None
        assert proc.returncode is not None
        return proc.returncode, out.decode(errors="replace")

    async def _create_database(self) -> None:
        conn = await asyncpg.connect(self.dsn_for("postgres"), timeout=_CONNECT_TIMEOUT_S)
        try:
            exists = await conn.fetchval(
                "SELECT 1 FROM pg_database WHERE datname = $1", DATABASE, timeout=_CONNECT_TIMEOUT_S
            )
            if not exists:
                await conn.execute(f'CREATE DATABASE "{DATABASE}"', timeout=_PG_CTL_TIMEOUT_S)
        finally:
            await conn.close(timeout=_CONNECT_TIMEOUT_S)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _shell_quote(word: str) -> str:
    # pg_ctl hands -o to /bin/sh.
    if re.fullmatch(r"[\w./=:-]+", word):
        return word
    return "'" + word.replace("'", "'\\''") + "'"


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _write_secret(path: Path, text: str) -> Path:
    """`text` in a file that is 0600 from its creation, whatever the umask."""
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as file:
        file.write(text)
    path.chmod(0o600)
    return path
