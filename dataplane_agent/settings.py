"""The agent's settings: one frozen dataclass, read from flags over environment variables over defaults.

| setting          | flag                 | environment                 | default                   |
|------------------|----------------------|-----------------------------|---------------------------|
| controlplane     | --controlplane       | ASTRABOX_CONTROLPLANE       | 127.0.0.1:7233            |
| agent_id         | --agent-id           | ASTRABOX_AGENT_ID           | stable id kept in state   |
| enrollment_token | (a secret: below)    | ASTRABOX_ENROLLMENT_TOKEN   | empty                     |
| controlplane_ca  | --controlplane-ca    | ASTRABOX_CONTROLPLANE_CA    | empty (plaintext)         |
| state_dir        | --state-dir          | ASTRABOX_AGENT_STATE_DIR    | ~/.astrabox/agent         |
| driver           | --driver             | ASTRABOX_SANDBOX_DRIVER     | local (or docker)         |
| image            | --image              | ASTRABOX_SANDBOX_IMAGE      | astrabox/sandbox:latest   |
| installation     | --installation       | ASTRABOX_INSTALLATION       | default                   |
| sandbox_cpus     | --sandbox-cpus       | ASTRABOX_SANDBOX_CPUS       | 1.0 **                    |
| sandbox_memory_mb| --sandbox-memory-mb  | ASTRABOX_SANDBOX_MEMORY_MB  | 2048 **                   |
| sandbox_pids     | --sandbox-pids       | ASTRABOX_SANDBOX_PIDS       | 512 **                    |
| sandbox_host_uid | --sandbox-host-uid   | ASTRABOX_SANDBOX_HOST_UID   | 2000000000 ***            |
| sandbox_disk_mb  | --sandbox-disk-mb    | ASTRABOX_SANDBOX_DISK_MB    | 10240 (0: no limit) ****  |
| sandbox_disk_by  | --sandbox-disk-by    | ASTRABOX_SANDBOX_DISK_BY    | image ****                |
| sandbox_disk_check_seconds | --sandbox-disk-check-seconds | ASTRABOX_SANDBOX_DISK_CHECK_SECONDS | 10 s ** |
| upload_max_bytes | --upload-max-bytes   | ASTRABOX_UPLOAD_MAX_BYTES   | 1 GiB unpacked            |
| upload_max_entries| --upload-max-entries| ASTRABOX_UPLOAD_MAX_ENTRIES | 100000                    |
| capacity         | --capacity           | ASTRABOX_AGENT_CAPACITY     | 8                         |
| model_base_url   | --model-base-url     | ASTRABOX_MODEL_BASE_URL     | built-in offline model *  |
| api_key          | (a secret: below)    | ANTHROPIC_API_KEY           | empty                     |
| claude_cli       | --claude-cli         | ASTRABOX_CLAUDE_CLI         | the SDK's bundled CLI     |
| log_format       | --log-format         | ASTRABOX_LOG_FORMAT         | auto (console on a tty)   |
| log_level        | --log-level          | ASTRABOX_LOG_LEVEL          | info                      |
| warm_pool        | --warm-pool          | ASTRABOX_WARM_POOL          | 0 (no warm pool)          |
| warm_pool_max_age| --warm-pool-max-age  | ASTRABOX_WARM_POOL_MAX_AGE  | 3600 s                    |
| warm_engines     | --warm-engines       | ASTRABOX_WARM_ENGINES       | on (with a warm pool)     |
| reconcile_interval| --reconcile-interval| ASTRABOX_RECONCILE_INTERVAL | 60 s                      |

* With neither a model base URL nor an API key the agent serves the offline
model on loopback; with only a key it uses https://api.anthropic.com.
** Each sandbox's limits, under either driver (0: unlimited); `--docker-cpus`,
`--docker-memory-mb`, `--docker-pids` and `ASTRABOX_DOCKER_*` are older names.
*** The host uid (and gid) sandboxes run as when the agent is root, local and
docker alike (`sandboxes.host_user`); it must own nothing else on the host.
**** Each workspace's size. `image`: enforced by the file system, an ext4 image
of its own, loop-mounted (`sandboxes.disk`; needs root and loop devices), and
where the host cannot, measured instead; `measurement`: the agent measures each
running workspace every `--sandbox-disk-check-seconds` and stops a runtime over
its limit (`runtimes.disk_limit`).
Secrets come from the environment or from a file (`--enrollment-token-file`,
`$ASTRABOX_ENROLLMENT_TOKEN_FILE`, `--api-key-file`, `$ANTHROPIC_API_KEY_FILE`),
so they never show in `ps`; `--enrollment-token` and `--api-key` work too, with
a warning (`astrabox.secret_settings`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from astrabox.secret_settings import SecretOption
from dataplane_agent.sandboxes.host_user import DEFAULT_HOST_UID
from dataplane_agent.workspace.archives import DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES

DEFAULT_CONTROLPLANE = "127.0.0.1:7233"
DEFAULT_STATE_DIR = "~/.astrabox/agent"
DEFAULT_CAPACITY = 8
# 10 GiB per workspace: a sparse image takes on the host only what is written in it.
DEFAULT_DISK_MB = 10240
DEFAULT_IMAGE = "astrabox/sandbox:latest"
ANTHROPIC_API_URL = "https://api.anthropic.com"

ENROLLMENT_TOKEN = SecretOption("enrollment-token", "ASTRABOX_ENROLLMENT_TOKEN", "the control plane's enrollment token")
API_KEY = SecretOption("api-key", "ANTHROPIC_API_KEY", "the model API key")
SECRETS = (ENROLLMENT_TOKEN, API_KEY)


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """Everything the agent process is configured with."""

    controlplane: str = DEFAULT_CONTROLPLANE
    # Empty: a stable id generated once and kept in the state directory.
    agent_id: str = ""
    enrollment_token: str = field(default="", repr=False)
    # A PEM CA bundle: the control plane is reached over TLS and its certificate verified with it.
    controlplane_ca: str = ""
    state_dir: Path = field(default_factory=lambda: Path(DEFAULT_STATE_DIR).expanduser())
    driver: str = "local"
    # The docker driver's image, and the id its containers are labelled with (so installations
    # sharing a Docker Engine never touch each other's containers).
    image: str = DEFAULT_IMAGE
    installation: str = "default"
    # Each sandbox's CPUs, memory and tasks, whichever the driver; 0: unlimited.
    sandbox_cpus: float = 1.0
    sandbox_memory_mb: int = 2048
    sandbox_pids: int = 512
    # The host uid a root agent's sandboxes run as (what they write is owned by it).
    sandbox_host_uid: int = DEFAULT_HOST_UID
    # Each workspace's size in MiB (0: no limit), enforced by an image of its own ("image", where the
    # host can) or by measurement ("measurement"; see runtimes.disk_limit).
    sandbox_disk_mb: int = DEFAULT_DISK_MB
    sandbox_disk_by: str = "image"
    sandbox_disk_check_seconds: float = 10.0
    # What one workspace upload may unpack to.
    upload_max_bytes: int = DEFAULT_MAX_BYTES
    upload_max_entries: int = DEFAULT_MAX_ENTRIES
    capacity: int = DEFAULT_CAPACITY
    # Empty with no api_key: the built-in offline model.
    model_base_url: str = ""
    api_key: str = field(default="", repr=False)
    # The secrets given as flags rather than by environment or file (warned about at start).
    secrets_on_command_line: tuple[SecretOption, ...] = ()
    # Empty: the Claude Code CLI bundled with claude-agent-sdk.
    claude_cli: str = ""
    log_format: str = "auto"
    log_level: str = "info"
    # Sandboxes kept ready for new sessions; 0: none.
    warm_pool: int = 0
    # Seconds a ready sandbox may wait before it is replaced.
    warm_pool_max_age: float = 3600.0
    # Whether the warm pool also starts the engine in each ready sandbox (a new session adopts it):
    # ready in tens of milliseconds rather than a CLI start, for an idle CLI (~160 MB RSS) per sandbox.
    warm_engines: bool = True
    # Seconds between the reconciler's passes (it also runs after every Welcome).
    reconcile_interval: float = 60.0

    @property
    def uses_offline_model(self) -> bool:
        return not self.model_base_url and not self.api_key

    @classmethod
    def from_args(cls, argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> AgentSettings:
        """SecretSettingError when a secret is given twice or its file cannot be read."""
        env = os.environ if environ is None else environ
        args = build_parser(env).parse_args(argv)
        return cls(
            controlplane=args.controlplane,
            agent_id=args.agent_id,
            enrollment_token=ENROLLMENT_TOKEN.read(args, env),
            controlplane_ca=args.controlplane_ca,
            state_dir=Path(args.state_dir).expanduser(),
            driver=args.driver,
            image=args.image,
            installation=args.installation,
            sandbox_cpus=args.sandbox_cpus,
            sandbox_memory_mb=args.sandbox_memory_mb,
            sandbox_pids=args.sandbox_pids,
            sandbox_host_uid=args.sandbox_host_uid,
            sandbox_disk_mb=args.sandbox_disk_mb,
            sandbox_disk_by=args.sandbox_disk_by,
            sandbox_disk_check_seconds=args.sandbox_disk_check_seconds,
            upload_max_bytes=args.upload_max_bytes,
            upload_max_entries=args.upload_max_entries,
            capacity=args.capacity,
            model_base_url=args.model_base_url,
            api_key=API_KEY.read(args, env),
            secrets_on_command_line=tuple(option for option in SECRETS if option.on_command_line(args)),
            claude_cli=args.claude_cli,
            log_format=args.log_format,
            log_level=args.log_level,
            warm_pool=args.warm_pool,
            warm_pool_max_age=args.warm_pool_max_age,
            warm_engines=args.warm_engines,
            reconcile_interval=args.reconcile_interval,
        )


def build_parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="astrabox agent",
        description=(
            "The AstraBox data-plane agent: dials the control plane, runs sandboxes and engine sessions, "
            "and relays their output. Secrets come from the environment or a file: ASTRABOX_ENROLLMENT_TOKEN "
            "(--enrollment-token-file), ANTHROPIC_API_KEY (--api-key-file)."
        ),
    )
    parser.add_argument(
        "--controlplane",
        default=env.get("ASTRABOX_CONTROLPLANE", DEFAULT_CONTROLPLANE),
        help="control plane gRPC address, host:port (env ASTRABOX_CONTROLPLANE; default %(default)s)",
    )
    parser.add_argument(
        "--controlplane-ca",
        default=env.get("ASTRABOX_CONTROLPLANE_CA", ""),
        help="reach the control plane over TLS, verifying its certificate with this PEM CA bundle "
        "(env ASTRABOX_CONTROLPLANE_CA; default: plaintext)",
    )
    ENROLLMENT_TOKEN.add_to(parser, note="; default none")
    API_KEY.add_to(parser, note="; default none: with no --model-base-url either, the built-in offline model")
    parser.add_argument(
        "--agent-id",
        default=env.get("ASTRABOX_AGENT_ID", ""),
        help="agent identity (env ASTRABOX_AGENT_ID; default: a stable id generated once in the state dir)",
    )
    parser.add_argument(
        "--state-dir",
        default=env.get("ASTRABOX_AGENT_STATE_DIR", DEFAULT_STATE_DIR),
        help="durable outbox, sessions and sandboxes (env ASTRABOX_AGENT_STATE_DIR; default %(default)s)",
    )
    parser.add_argument(
        "--driver",
        default=env.get("ASTRABOX_SANDBOX_DRIVER", "local"),
        choices=("local", "docker"),
        help="sandbox driver: local (bubblewrap) or docker (env ASTRABOX_SANDBOX_DRIVER; default %(default)s)",
    )
    parser.add_argument(
        "--image",
        default=env.get("ASTRABOX_SANDBOX_IMAGE", DEFAULT_IMAGE),
        help="the docker driver's sandbox image, made by `astrabox image build` (env ASTRABOX_SANDBOX_IMAGE; "
        "default %(default)s)",
    )
    parser.add_argument(
        "--installation",
        default=env.get("ASTRABOX_INSTALLATION", "default"),
        help="installation id the docker driver labels its containers with (env ASTRABOX_INSTALLATION; "
        "default %(default)s)",
    )
    parser.add_argument(
        "--sandbox-cpus",
        "--docker-cpus",
        type=float,
        default=float(_sandbox_limit(env, "CPUS", 1.0)),
        help="CPUs of each sandbox, 0: unlimited (env ASTRABOX_SANDBOX_CPUS; default %(default)s)",
    )
    parser.add_argument(
        "--sandbox-memory-mb",
        "--docker-memory-mb",
        type=int,
        default=int(_sandbox_limit(env, "MEMORY_MB", 2048)),
        help="memory of each sandbox in MiB, swap included, 0: unlimited (env ASTRABOX_SANDBOX_MEMORY_MB; "
        "default %(default)s)",
    )
    parser.add_argument(
        "--sandbox-host-uid",
        type=_host_uid,
        default=env.get("ASTRABOX_SANDBOX_HOST_UID", str(DEFAULT_HOST_UID)),  # a string: argparse checks it
        help="host uid and gid a root agent's sandboxes (local and docker) run as; it must own nothing else "
        "(env ASTRABOX_SANDBOX_HOST_UID; default %(default)s)",
    )
    parser.add_argument(
        "--sandbox-disk-mb",
        type=_not_negative,
        default=env.get("ASTRABOX_SANDBOX_DISK_MB", str(DEFAULT_DISK_MB)),
        help="most disk each sandbox's workspace may use, in MiB; 0: no limit (env ASTRABOX_SANDBOX_DISK_MB; "
        "default %(default)s)",
    )
    parser.add_argument(
        "--sandbox-disk-by",
        choices=("image", "measurement"),
        default=env.get("ASTRABOX_SANDBOX_DISK_BY", "image"),
        help="how the disk limit is enforced: image, an ext4 image of its own per workspace (needs root and "
        "loop devices; measurement where the host has not), or measurement, the agent measures running "
        "workspaces and stops a runtime over its limit (env ASTRABOX_SANDBOX_DISK_BY; default %(default)s)",
    )
    parser.add_argument(
        "--sandbox-disk-check-seconds",
        type=_positive_seconds,
        default=env.get("ASTRABOX_SANDBOX_DISK_CHECK_SECONDS", "10"),
        help="how often a measured disk limit is checked (env ASTRABOX_SANDBOX_DISK_CHECK_SECONDS; "
        "default %(default)s)",
    )
    parser.add_argument(
        "--upload-max-bytes",
        type=_positive,
        default=env.get("ASTRABOX_UPLOAD_MAX_BYTES", str(DEFAULT_MAX_BYTES)),
        help="most bytes one workspace upload may unpack to (env ASTRABOX_UPLOAD_MAX_BYTES; default %(default)s)",
    )
    parser.add_argument(
        "--upload-max-entries",
        type=_positive,
        default=env.get("ASTRABOX_UPLOAD_MAX_ENTRIES", str(DEFAULT_MAX_ENTRIES)),
        help="most files, directories and links in one workspace upload (env ASTRABOX_UPLOAD_MAX_ENTRIES; "
        "default %(default)s)",
    )
    parser.add_argument(
        "--sandbox-pids",
        "--docker-pids",
        type=int,
        default=int(_sandbox_limit(env, "PIDS", 512)),
        help="processes and threads of each sandbox, 0: unlimited (env ASTRABOX_SANDBOX_PIDS; default %(default)s)",
    )
    parser.add_argument(
        "--capacity",
        type=int,
        default=int(env.get("ASTRABOX_AGENT_CAPACITY", DEFAULT_CAPACITY)),
        help="sessions this agent accepts (env ASTRABOX_AGENT_CAPACITY; default %(default)s)",
    )
    parser.add_argument(
        "--model-base-url",
        default=env.get("ASTRABOX_MODEL_BASE_URL", ""),
        help=(
            "Anthropic-compatible base URL for the engine (env ASTRABOX_MODEL_BASE_URL; default: the built-in "
            f"offline model when ANTHROPIC_API_KEY is unset, else {ANTHROPIC_API_URL})"
        ),
    )
    parser.add_argument(
        "--claude-cli",
        default=env.get("ASTRABOX_CLAUDE_CLI", ""),
        help="path of the Claude Code CLI (env ASTRABOX_CLAUDE_CLI; default: the CLI bundled with the SDK)",
    )
    parser.add_argument(
        "--log-format",
        choices=("auto", "json", "console"),
        default=env.get("ASTRABOX_LOG_FORMAT", "auto"),
        help="log format (env ASTRABOX_LOG_FORMAT; default %(default)s: console on a terminal, else JSON)",
    )
    parser.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default=env.get("ASTRABOX_LOG_LEVEL", "info"),
        help="log level (env ASTRABOX_LOG_LEVEL; default %(default)s)",
    )
    parser.add_argument(
        "--warm-pool",
        type=int,
        default=int(env.get("ASTRABOX_WARM_POOL", 0)),
        help="sandboxes kept ready for new sessions (env ASTRABOX_WARM_POOL; default %(default)s: none)",
    )
    parser.add_argument(
        "--warm-pool-max-age",
        type=float,
        default=float(env.get("ASTRABOX_WARM_POOL_MAX_AGE", 3600.0)),
        help="seconds a ready sandbox may wait before it is replaced (env ASTRABOX_WARM_POOL_MAX_AGE; "
        "default %(default)s)",
    )
    parser.add_argument(
        "--warm-engines",
        action=argparse.BooleanOptionalAction,
        default=env.get("ASTRABOX_WARM_ENGINES", "1").strip().lower() not in ("0", "false", "no", "off"),
        help="start the engine in every warm-pool sandbox, so a new session only adopts it; each ready "
        "sandbox then holds an idle CLI, ~160 MB (env ASTRABOX_WARM_ENGINES; default on)",
    )
    parser.add_argument(
        "--reconcile-interval",
        type=float,
        default=float(env.get("ASTRABOX_RECONCILE_INTERVAL", 60.0)),
        help="seconds between comparisons of the sandboxes held with the sessions the control plane expects "
        "(env ASTRABOX_RECONCILE_INTERVAL; default %(default)s; also after every reconnect)",
    )
    return parser


def _sandbox_limit(env: Mapping[str, str], name: str, default: float) -> str | float:
    """A sandbox limit from the environment: ASTRABOX_SANDBOX_<name>, else its older name
    ASTRABOX_DOCKER_<name>, else `default`."""
    return env.get(f"ASTRABOX_SANDBOX_{name}", env.get(f"ASTRABOX_DOCKER_{name}", default))


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def _positive_seconds(text: str) -> float:
    value = float(text)
    if not 0 < value <= 86400:
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 86400 seconds, got {text!r}")
    return value


def _not_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text!r}")
    return value


def _host_uid(text: str) -> int:
    value = int(text)
    if not 1000 <= value < 2**31:
        raise argparse.ArgumentTypeError(f"must be an unprivileged uid (1000 to 2147483647), got {text!r}")
    return value
