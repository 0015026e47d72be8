"""A real PostgreSQL HA stack for tests: etcd and two Patroni nodes, one primary and one synchronous
standby, all on loopback ports, all in one temporary directory.

`PatroniCluster.start()` bootstraps it and waits until the standby is the synchronous one; `dsn` is
the multi-host URL a control plane is given (`target_session_attrs=read-write`: the primary,
whichever it is). `crash_primary()` SIGKILLs the primary's Patroni and its PostgreSQL (a machine
lost): etcd's leader key expires after `TTL` seconds and Patroni promotes the synchronous standby.
`switchover()` is the planned move, through Patroni's REST API (what `patronictl switchover` calls).

Run as root, Patroni (and so PostgreSQL, which refuses root) runs as the `postgres` user through
`setpriv`, and the directory is made searchable by it; etcd runs as the test's user. Logs go to
`<root>/logs/` (removed by `stop()`); PATRONI_TEST_LOG=DEBUG makes Patroni's verbose.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controlplane.embedded_postgres import find_bindir
from tests.support.processes import Process

SCOPE = "astrabox-test"
# Patroni's smallest leader TTL: a lost primary is replaced about this many seconds after it went.
TTL = 20
INSTALL_HINT = (
    "install them with `apt-get install etcd-server` and `pip install 'patroni[etcd3]'` "
    "(scripts/test installs both for CI)"
)


def missing() -> str | None:
    """What of the HA stack is not installed here (None: everything is)."""
    if shutil.which("etcd") is None:
        return f"etcd is not installed: {INSTALL_HINT}"
    if importlib.util.find_spec("patroni") is None:
        return f"patroni is not installed: {INSTALL_HINT}"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Node:
    """One Patroni node: its REST API, its PostgreSQL's port and data directory, its process."""

    name: str
    api_port: int
    pg_port: int
    data_dir: Path
    config: Path
    process: Process | None = None

    def api(self, path: str, body: dict[str, Any] | None = None, timeout: float = 5) -> tuple[int, Any]:
        """(HTTP status, decoded body) of a call to this node's REST API; (0, None) when it is down."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"http://127.0.0.1:{self.api_port}{path}", data=data)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                status, text = response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            status, text = error.code, error.read().decode()
        except OSError:
            return 0, None
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None


class PatroniCluster:
    """etcd + two Patroni nodes. `start()`, then the test's moves, then `stop()`."""

    def __init__(self, *, strict: bool = False) -> None:
        # Under /tmp: its parents must be searchable by the `postgres` user.
        self.root = Path(tempfile.mkdtemp(prefix="astrabox-patroni-"))
        self.root.chmod(0o755)
        self.strict = strict
        self.etcd: Process | None = None
        self.etcd_port = _free_port()
        self.nodes = [
            Node(f"node{i}", _free_port(), _free_port(), self.root / f"node{i}" / "data", self.root / f"node{i}.yml")
            for i in range(2)
        ]
        self._as_postgres = os.geteuid() == 0

    @property
    def dsn(self) -> str:
        hosts = ",".join(f"127.0.0.1:{node.pg_port}" for node in self.nodes)
        return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"

    def start(self, timeout: float = 120) -> None:
        (self.root / "logs").mkdir()
        peer = _free_port()
        self.etcd = Process(
            "etcd",
            [
                "etcd", "--name", "etcd0", "--data-dir", str(self.root / "etcd"),
                "--listen-client-urls", f"http://127.0.0.1:{self.etcd_port}",
                "--advertise-client-urls", f"http://127.0.0.1:{self.etcd_port}",
                "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", f"etcd0=http://127.0.0.1:{peer}",
            ],
            self.root / "logs" / "etcd.log",
            env={"ETCD_UNSUPPORTED_ARCH": ""},
        )  # fmt: skip
        self.etcd.wait_for_line(r"ready to serve client requests", timeout=60)
        for node in self.nodes:
            self._write_config(node)
        self.start_node(self.nodes[0])
        self.wait_for(lambda: self.leader() == self.nodes[0].name, timeout, "node0 to bootstrap as the primary")
        self.start_node(self.nodes[1])
        self.wait_for(lambda: self.sync_standby() == self.nodes[1].name, timeout, "node1 to be the synchronous standby")

    def start_node(self, node: Node) -> None:
        node.data_dir.parent.mkdir(exist_ok=True)
        if self._as_postgres:
            user = pwd.getpwnam("postgres")
            os.chown(node.data_dir.parent, user.pw_uid, user.pw_gid)
        python, env = sys.executable, {}
        drop: list[str] = []
        if self._as_postgres:
            drop = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"]
            # The tests' interpreter may live where `postgres` cannot execute it (a pyenv build under
            # /root); Patroni re-executes its interpreter to start PostgreSQL, so it runs on the
            # system's Python of the same version, with this environment's packages.
            system = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
            python = str(system) if system.exists() else sys.executable
            env = {"HOME": str(node.data_dir.parent), "PYTHONPATH": str(self._patroni_packages())}
        argv = [*drop, python, *(["-S"] if self._as_postgres else []), "-m", "patroni", str(node.config)]
        # Its working directory too must be one `postgres` can enter: initdb and PostgreSQL refuse to
        # run where they cannot tell their current directory (a clone under a 0700 directory).
        node.process = Process(node.name, argv, self.root / "logs" / f"{node.name}.log", env, cwd=node.data_dir.parent)

    def _patroni_packages(self) -> Path:
        """A copy of Patroni and the packages it imports, where `postgres` can read them: the tests'
        environment may live where it cannot (a clone in a 0700 directory, a venv under /root)."""
        site = self.root / "site-packages"
        if site.exists():
            return site
        spec = importlib.util.find_spec("patroni")
        assert spec is not None and spec.origin is not None, missing()
        packages = Path(spec.origin).parents[1]
        probe = (
            "import sys, patroni.__main__, patroni.api, patroni.ctl, patroni.dcs.etcd3, patroni.postgresql.bootstrap, "
            "patroni.postgresql.rewind\n"
            f"root = {str(packages)!r} + '/'\n"
            "print('\\n'.join(sorted({m.__file__[len(root):].split('/')[0] for m in list(sys.modules.values())"
            " if (getattr(m, '__file__', None) or '').startswith(root)})))"
        )
        found = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
        tops = set(found.split()) | {"six.py", "wcwidth"}  # imported lazily, by dateutil and prettytable
        tops |= {entry.name for entry in packages.iterdir() if entry.name.endswith(".libs")}  # psycopg2's libpq
        site.mkdir()
        for name in sorted(tops):
            source = packages / name
            if source.is_dir():
                shutil.copytree(source, site / name, ignore=shutil.ignore_patterns("__pycache__"))
            elif source.exists():
                shutil.copy2(source, site / name)
        return site

    def members(self) -> list[dict[str, Any]]:
        for node in self.nodes:
            status, body = node.api("/cluster")
            if status == 200 and isinstance(body, dict):
                return list(body.get("members", []))
        return []

    def leader(self) -> str | None:
        """The running primary's node name, as etcd and Patroni see it."""
        for member in self.members():
            if member.get("role") == "leader" and member.get("state") == "running":
                return str(member["name"])
        return None

    def sync_standby(self) -> str | None:
        """The streaming synchronous standby's node name."""
        for member in self.members():
            if member.get("role") == "sync_standby" and member.get("state") == "streaming":
                return str(member["name"])
        return None

    def node(self, name: str) -> Node:
        return next(node for node in self.nodes if node.name == name)

    def crash_primary(self) -> Node:
        """SIGKILL the primary's Patroni and its PostgreSQL: the machine is gone. Returns that node."""
        name = self.leader()
        assert name is not None, "no primary to crash"
        node = self.node(name)
        postmaster = node.postmaster_pid()
        assert node.process is not None
        node.process.kill()
        if postmaster is not None:
            try:
                os.kill(postmaster, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return node

    def switchover(self, timeout: float = 60) -> str:
        """Patroni's planned switchover to the synchronous standby; returns the new primary's name."""
        leader, candidate = self.leader(), self.sync_standby()
        assert leader and candidate, (leader, candidate)
        status, body = self.node(leader).api("/switchover", {"leader": leader, "candidate": candidate}, timeout=60)
        assert status == 200, (status, body)
        self.wait_for(lambda: self.leader() == candidate, timeout, f"{candidate} to be the primary")
        return candidate

    def wait_for(self, condition: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout} s for {what}; members: {self.members()}\n{self._tails()}")
            time.sleep(0.5)

    def stop(self) -> None:
        for node in self.nodes:
            if node.process is not None:
                node.process.stop(timeout=30)
            if (pid := node.postmaster_pid()) is not None:  # an orphan of a crashed Patroni
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self.etcd is not None:
            self.etcd.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def _tails(self) -> str:
        processes = [self.etcd, *(node.process for node in self.nodes)]
        return "\n".join(f"--- {p.name}\n{p.tail(15)}" for p in processes if p is not None)

    def _write_config(self, node: Node) -> None:
        bindir = find_bindir()
        sockets = node.data_dir.parent
        config = {
            "scope": SCOPE,
            "name": node.name,
            "log": {"level": os.environ.get("PATRONI_TEST_LOG", "INFO")},
            "restapi": {"listen": f"127.0.0.1:{node.api_port}", "connect_address": f"127.0.0.1:{node.api_port}"},
            "etcd3": {"hosts": [f"127.0.0.1:{self.etcd_port}"]},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL,
                    "loop_wait": 1,
                    "retry_timeout": 5,
                    "maximum_lag_on_failover": 1048576,
                    # Commits wait for the standby, and only that standby may be promoted.
                    "synchronous_mode": True,
                    "synchronous_mode_strict": self.strict,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "parameters": {
                            "synchronous_commit": "on",
                            "wal_log_hints": "on",
                            "max_connections": 200,
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{node.pg_port}",
                "connect_address": f"127.0.0.1:{node.pg_port}",
                "data_dir": str(node.data_dir),
                "bin_dir": str(bindir),
                "pgpass": str(node.data_dir.parent / "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres", "password": "postgres"},
                    "replication": {"username": "replicator", "password": "replicator"},
                    "rewind": {"username": "postgres", "password": "postgres"},
                },
                "pg_hba": [
                    "local all all trust",
                    "host all all 127.0.0.1/32 trust",
                    "host replication all 127.0.0.1/32 trust",
                ],
                "parameters": {
                    "unix_socket_directories": str(sockets),
                    "logging_collector": "on",
                    "log_directory": str(node.data_dir.parent / "log"),
                },
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False, "nosync": False},
        }
        node.config.write_text(json.dumps(config, indent=2))  # JSON is YAML
        node.config.chmod(0o644)
