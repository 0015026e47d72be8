"""The agent's settings: one frozen dataclass, read from flags over environment variables over defaults.

Each setting is declared once, on its field: its flag (and older names), its environment variable,
its default and its help (`serverkit.settings`); `astrabox agent --help` lists them all. Beyond what
the help says:

- With neither a model base URL nor an API key the agent serves the built-in offline model on
  loopback; with only a key it uses https://api.anthropic.com.
- `--docker-cpus`, `--docker-memory-mb`, `--docker-pids` and `ASTRABOX_DOCKER_CPUS`,
  `ASTRABOX_DOCKER_MEMORY_MB`, `ASTRABOX_DOCKER_PIDS` are older names of the sandbox limits.
- The sandbox host uid (and gid) must own nothing else on the host (`sandboxes.host_user`).
- A workspace disk limit by `image` is an ext4 image of its own, loop-mounted (`sandboxes.disk`),
  and where the host cannot, measured instead; by `measurement` the agent measures each running
  workspace every `--sandbox-disk-check-seconds` and stops a runtime over its limit
  (`runtimes.disk_limit`).
- Secrets come from the environment or from a file (`--enrollment-token-file`,
  `$ASTRABOX_ENROLLMENT_TOKEN_FILE`, `--join-token-file`, `--api-key-file`, `$ANTHROPIC_API_KEY_FILE`), so they never
  show in `ps`; `--enrollment-token` and `--api-key` work too, with a warning
  (`astrabox.secret_settings`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from astrabox.secret_settings import SecretOption
from dataplane_agent.environments.steps import STEP_TIMEOUT
from dataplane_agent.routes.egress.policy import DEFAULT_PACKAGE_REGISTRIES
from dataplane_agent.sandboxes.host_user import DEFAULT_HOST_UID
from dataplane_agent.workspace.archives import DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES
from serverkit import settings as serverkit_settings
from serverkit.settings import CONFIG_ENV, not_negative_int, option, positive_int, positive_seconds, secret, tuned

DEFAULT_CONTROLPLANE = "127.0.0.1:7233"
DEFAULT_STATE_DIR = "~/.astrabox/agent"
DEFAULT_CAPACITY = 8
# 10 GiB per workspace: a sparse image takes on the host only what is written in it.
DEFAULT_DISK_MB = 10240
DEFAULT_IMAGE = "astrabox/sandbox:latest"
ANTHROPIC_API_URL = "https://api.anthropic.com"

ENROLLMENT_TOKEN = SecretOption("enrollment-token", "ASTRABOX_ENROLLMENT_TOKEN", "the control plane's enrollment token")
JOIN_TOKEN = SecretOption("join-token", "ASTRABOX_JOIN_TOKEN", "a join token an operator minted for this agent")
API_KEY = SecretOption("api-key", "ANTHROPIC_API_KEY", "the model API key")
PROG = "astrabox agent"
DESCRIPTION = (
    "The AstraBox data-plane agent: dials the control plane, runs sandboxes and engine sessions, "
    "and relays their output. Secrets come from the environment or a file: ASTRABOX_ENROLLMENT_TOKEN "
    "(--enrollment-token-file), ASTRABOX_JOIN_TOKEN (--join-token-file), ANTHROPIC_API_KEY (--api-key-file)."
)


def _expanded_path(text: str) -> Path:
    return Path(text).expanduser()


def _host_uid(text: str) -> int:
    value = int(text)
    if not 1000 <= value < 2**31:
        raise argparse.ArgumentTypeError(f"must be an unprivileged uid (1000 to 2147483647), got {text!r}")
    return value


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """Everything the agent process is configured with; its fields in the order `--help` lists them."""

    controlplane: str = field(
        default=DEFAULT_CONTROLPLANE,
        metadata=option(
            "--controlplane",
            env="ASTRABOX_CONTROLPLANE",
            help="control plane gRPC address, host:port, or a gRPC target naming several replicas "
            "(ipv4:HOST:PORT,HOST:PORT; env %(env)s; default %(default)s)",
        ),
    )
    # A PEM CA bundle: the control plane is reached over TLS and its certificate verified with it.
    controlplane_ca: str = field(
        default="",
        metadata=option(
            "--controlplane-ca",
            env="ASTRABOX_CONTROLPLANE_CA",
            help="reach the control plane over TLS, verifying its certificate with this PEM CA bundle "
            "(env %(env)s; default: plaintext)",
        ),
    )
    enrollment_token: str = field(default="", repr=False, metadata=secret(ENROLLMENT_TOKEN, note="; default none"))
    # Admits the agent at its first Hello (`astrabox hosts join-token`); without one an agent that
    # enrols with the enrollment token waits for an operator to admit it.
    join_token: str = field(
        default="",
        repr=False,
        metadata=secret(JOIN_TOKEN, note="; default none: wait to be admitted (`astrabox hosts admit ID`)"),
    )
    api_key: str = field(
        default="",
        repr=False,
        metadata=secret(API_KEY, note="; default none: with no --model-base-url either, the built-in offline model"),
    )
    # Empty: a stable id generated once and kept in the state directory.
    agent_id: str = field(
        default="",
        metadata=option(
            "--agent-id",
            env="ASTRABOX_AGENT_ID",
            help="agent identity (env %(env)s; default: a stable id generated once in the state dir)",
        ),
    )
    state_dir: Path = field(
        default_factory=lambda: _expanded_path(DEFAULT_STATE_DIR),
        metadata=option(
            "--state-dir",
            env="ASTRABOX_AGENT_STATE_DIR",
            default=DEFAULT_STATE_DIR,
            convert=_expanded_path,
            help="durable outbox, sessions and sandboxes (env %(env)s; default %(default)s)",
        ),
    )
    # CIDRs of non-public networks sandboxes may reach through the egress proxy (routes/egress/).
    egress_allowed_networks: str = field(
        default="",
        metadata=option(
            "--egress-allowed-networks",
            env="ASTRABOX_AGENT_EGRESS_ALLOWED_NETWORKS",
            help=(
                "comma-separated CIDRs of non-public networks (loopback, private, link-local) that sandboxes"
                " with network access may reach through the egress proxy, e.g. 10.20.0.0/16"
                " (env %(env)s; default: none)"
            ),
        ),
    )
    # The hosts an environment's `allow_package_registries` opens (routes/egress/policy.py).
    package_registries: str = field(
        default=",".join(DEFAULT_PACKAGE_REGISTRIES),
        metadata=option(
            "--package-registries",
            env="ASTRABOX_AGENT_PACKAGE_REGISTRIES",
            help=(
                "comma-separated host patterns of the package registries an environment's network policy"
                " may allow with allow_package_registries (env %(env)s; default: %(default)s)"
            ),
        ),
    )
    # How long the egress proxy keeps a session's resolved credentials (dataplane_agent/credentials.py): a
    # credential replaced or deleted in the control plane takes effect within this time.
    egress_credentials_ttl: float = field(
        default=60.0,
        metadata=option(
            "--egress-credentials-ttl",
            env="ASTRABOX_AGENT_EGRESS_CREDENTIALS_TTL",
            type=positive_seconds,
            help=(
                "seconds the egress proxy keeps a session's credentials before asking the control plane"
                " again; a credential replaced or deleted takes effect within it (env %(env)s;"
                " default: %(default)s)"
            ),
        ),
    )
    # Extra roots the egress proxy trusts when it speaks TLS to a host itself (routes/egress/interception.py).
    egress_ca_file: str = field(
        default="",
        metadata=option(
            "--egress-ca-file",
            env="ASTRABOX_AGENT_EGRESS_CA_FILE",
            help=(
                "a PEM bundle of CA certificates the egress proxy trusts, besides the system's, for the hosts"
                " it adds credentials to over HTTPS, e.g. an internal CA (env %(env)s; default: none)"
            ),
        ),
    )
    # CIDRs of non-public networks agents' HTTP MCP servers may be in (engines/mcp_destinations.py).
    mcp_allowed_networks: str = field(
        default="",
        metadata=option(
            "--mcp-allowed-networks",
            env="ASTRABOX_AGENT_MCP_ALLOWED_NETWORKS",
            help=(
                "comma-separated CIDRs of non-public networks (loopback, private, link-local) that agent"
                " definitions' HTTP MCP servers may be in, e.g. 10.20.0.0/16; public addresses need none"
                " (env %(env)s; default: none)"
            ),
        ),
    )
    driver: str = field(
        default="local",
        metadata=option(
            "--driver",
            env="ASTRABOX_SANDBOX_DRIVER",
            choices=("local", "docker"),
            help="sandbox driver: local (bubblewrap) or docker (env %(env)s; default %(default)s)",
        ),
    )
    # The docker driver's image, and the id its containers are labelled with (so installations
    # sharing a Docker Engine never touch each other's containers).
    image: str = field(
        default=DEFAULT_IMAGE,
        metadata=option(
            "--image",
            env="ASTRABOX_SANDBOX_IMAGE",
            help="the docker driver's sandbox image, made by `astrabox image build` (env %(env)s; default %(default)s)",
        ),
    )
    installation: str = field(
        default="default",
        metadata=option(
            "--installation",
            env="ASTRABOX_INSTALLATION",
            help="installation id the docker driver labels its containers with (env %(env)s; default %(default)s)",
        ),
    )
    # The OCI runtime of the docker driver's containers (sandboxes.isolation): runsc puts gVisor's kernel
    # between the sandbox and the host's, and the agent then offers environments with `isolation: gvisor`.
    sandbox_runtime: str = field(
        default="runc",
        metadata=option(
            "--sandbox-runtime",
            env="ASTRABOX_SANDBOX_RUNTIME",
            choices=("runc", "runsc"),
            help="OCI runtime of the docker driver's sandboxes: runc, or runsc (gVisor, registered with dockerd"
            " under that name; environments with isolation: gvisor need it) (env %(env)s; default %(default)s)",
        ),
    )
    # Each sandbox's CPUs, memory and tasks (sandbox_pids, below), whichever the driver; 0: unlimited.
    sandbox_cpus: float = field(
        default=1.0,
        metadata=option(
            "--sandbox-cpus",
            "--docker-cpus",
            env=("ASTRABOX_SANDBOX_CPUS", "ASTRABOX_DOCKER_CPUS"),
            type=float,
            help="CPUs of each sandbox, 0: unlimited (env %(env)s; default %(default)s)",
        ),
    )
    sandbox_memory_mb: int = field(
        default=2048,
        metadata=option(
            "--sandbox-memory-mb",
            "--docker-memory-mb",
            env=("ASTRABOX_SANDBOX_MEMORY_MB", "ASTRABOX_DOCKER_MEMORY_MB"),
            type=int,
            help="memory of each sandbox in MiB, swap included, 0: unlimited (env %(env)s; default %(default)s)",
        ),
    )
    # The host uid a root agent's sandboxes run as (what they write is owned by it).
    sandbox_host_uid: int = tuned(
        "--sandbox-host-uid", DEFAULT_HOST_UID,
        "host uid and gid a root agent's sandboxes (local and docker) run as; it must own nothing else", type=_host_uid,
    )  # fmt: skip
    # Each workspace's size in MiB (0: no limit), enforced by an image of its own ("image", where the
    # host can) or by measurement ("measurement"; see runtimes.disk_limit).
    sandbox_disk_mb: int = tuned(
        "--sandbox-disk-mb", DEFAULT_DISK_MB, "most disk each sandbox's workspace may use, in MiB; 0: no limit",
        type=not_negative_int,
    )  # fmt: skip
    sandbox_disk_by: str = field(
        default="image",
        metadata=option(
            "--sandbox-disk-by",
            env="ASTRABOX_SANDBOX_DISK_BY",
            choices=("image", "measurement"),
            help="how the disk limit is enforced: image, an ext4 image of its own per workspace (needs root and "
            "loop devices; measurement where the host has not), or measurement, the agent measures running "
            "workspaces and stops a runtime over its limit (env %(env)s; default %(default)s)",
        ),
    )
    sandbox_disk_check_seconds: float = tuned(
        "--sandbox-disk-check-seconds", 10.0, "how often a measured disk limit is checked", type=positive_seconds
    )
    # Environment layers (dataplane_agent.environments) no held session uses, removed once this old.
    layer_retention_days: float = tuned(
        "--layer-retention-days", 7.0, "days an environment layer no session uses is kept before it is removed"
    )
    layer_build_timeout: float = tuned(
        "--layer-build-timeout", STEP_TIMEOUT, "seconds each step of a layer's build (a download, the install, the setup "
        "script) may take", type=positive_seconds,
    )  # fmt: skip
    layer_sweep_interval: float = tuned(
        "--layer-sweep-interval", 3600.0, "seconds between looks for unused environment layers", type=positive_seconds
    )
    # What one workspace upload may unpack to.
    upload_max_bytes: int = tuned(
        "--upload-max-bytes", DEFAULT_MAX_BYTES, "most bytes one workspace upload may unpack to", type=positive_int
    )
    upload_max_entries: int = tuned(
        "--upload-max-entries", DEFAULT_MAX_ENTRIES, "most files, directories and links in one workspace upload",
        type=positive_int,
    )  # fmt: skip
    sandbox_pids: int = field(
        default=512,
        metadata=option(
            "--sandbox-pids",
            "--docker-pids",
            env=("ASTRABOX_SANDBOX_PIDS", "ASTRABOX_DOCKER_PIDS"),
            type=int,
            help="processes and threads of each sandbox, 0: unlimited (env %(env)s; default %(default)s)",
        ),
    )
    capacity: int = field(
        default=DEFAULT_CAPACITY,
        metadata=option(
            "--capacity",
            env="ASTRABOX_AGENT_CAPACITY",
            type=int,
            help="live runtimes this agent runs at once; sessions stopped while idle, archived or failed hold"
            " none (env %(env)s; default %(default)s)",
        ),
    )
    # Empty with no api_key: the built-in offline model.
    model_base_url: str = field(
        default="",
        metadata=option(
            "--model-base-url",
            env="ASTRABOX_MODEL_BASE_URL",
            help="Anthropic-compatible base URL for the engine (env %(env)s; default: the built-in "
            f"offline model when ANTHROPIC_API_KEY is unset, else {ANTHROPIC_API_URL})",
        ),
    )
    # Empty: the Claude Code CLI bundled with claude-agent-sdk.
    claude_cli: str = field(
        default="",
        metadata=option(
            "--claude-cli",
            env="ASTRABOX_CLAUDE_CLI",
            help="path of the Claude Code CLI (env %(env)s; default: the CLI bundled with the SDK)",
        ),
    )
    log_format: str = field(
        default="auto",
        metadata=option(
            "--log-format",
            env="ASTRABOX_LOG_FORMAT",
            choices=("auto", "json", "console"),
            help="log format (env %(env)s; default %(default)s: console on a terminal, else JSON)",
        ),
    )
    log_level: str = field(
        default="info",
        metadata=option(
            "--log-level",
            env="ASTRABOX_LOG_LEVEL",
            choices=("debug", "info", "warning", "error"),
            help="log level (env %(env)s; default %(default)s)",
        ),
    )
    metrics_listen: str = serverkit_settings.metrics_listen()
    otlp_endpoint: str = serverkit_settings.otlp_endpoint()
    warm_pool: int = tuned("--warm-pool", 0, "sandboxes kept ready for new sessions; 0: none", type=int)
    warm_pool_per_environment: int = tuned(
        "--warm-pool-per-environment",
        0,
        "sandboxes kept ready for each environment a session used in the last hour, made from its layer; 0: none",
        type=int,
    )
    warm_pool_max_age: float = tuned(
        "--warm-pool-max-age", 3600.0, "seconds a ready sandbox may wait before it is replaced"
    )
    warm_pool_agent_versions: int = tuned(
        "--warm-pool-agent-versions",
        2,
        "of the --warm-pool sandboxes, how many keep an engine started with the configuration of an agent "
        "version a session started lately (one each, least recently used first out; never the last one); 0: none",
        type=int,
    )
    # Whether the warm pool also starts the engine in each ready sandbox (a new session adopts it):
    # ready in tens of milliseconds rather than a CLI start, for an idle CLI (~160 MB RSS) per sandbox.
    warm_engines: bool = field(
        default=True,
        metadata=option(
            "--warm-engines",
            env="ASTRABOX_WARM_ENGINES",
            switch=True,
            help="start the engine in every warm-pool sandbox, so a new session only adopts it; each ready "
            "sandbox then holds an idle CLI, ~160 MB (env %(env)s; default on)",
        ),
    )
    # A session's start (runtimes/launch.py): its sandbox made, its engine started, within these.
    sandbox_create_timeout: float = tuned(
        "--sandbox-create-timeout", 120.0, "seconds a session's sandbox may take to be made", type=positive_seconds
    )
    engine_start_timeout: float = tuned(
        "--engine-start-timeout", 120.0, "seconds a session's engine may take to start", type=positive_seconds
    )
    # Seconds a session's git repository may take to clone at its start (runtimes/repository.py).
    git_clone_timeout: float = tuned(
        "--git-clone-timeout", 300.0, "seconds a session's git repository may take to clone before its start fails"
    )
    reconcile_interval: float = tuned(
        "--reconcile-interval",
        60.0,
        "seconds between comparisons of the sandboxes held with the sessions the control plane expects (also after every reconnect)",
    )
    reconcile_retry: float = tuned(
        "--reconcile-retry", 10.0, "seconds before an unconfirmed sandbox destruction is tried again",
        type=positive_seconds,
    )  # fmt: skip
    # The warm pool (pool/warm_pool.py): after a failed create, it waits `retry_first`, doubling up to
    # `retry_longest`; a sandbox's create may take `create_timeout`; sandboxes are kept for an
    # environment a session used within `environment_recency`.
    warm_pool_retry_first: float = tuned(
        "--warm-pool-retry-first", 5.0, "seconds before a failed warm-pool create is tried again",
        type=positive_seconds,
    )  # fmt: skip
    warm_pool_retry_longest: float = tuned(
        "--warm-pool-retry-longest", 300.0, "the longest wait between failed warm-pool creates",
        type=positive_seconds,
    )  # fmt: skip
    warm_pool_create_timeout: float = tuned(
        "--warm-pool-create-timeout", 120.0, "seconds a warm-pool sandbox may take to be made", type=positive_seconds
    )
    warm_pool_environment_recency: float = tuned(
        "--warm-pool-environment-recency", 3600.0,
        "seconds after an environment's last session its warm-pool sandboxes are kept", type=positive_seconds,
    )  # fmt: skip
    # The relay (relay/client.py): outputs per batch and bytes per batch (one larger output travels
    # alone), outputs sent but not yet acknowledged, dial and write timeouts, and the pause between
    # redials (doubling from `redial_first` to `redial_longest`, reset once a stream is welcomed).
    relay_batch_size: int = tuned(
        "--relay-batch-size", 64, "outputs per batch sent to the control plane", type=positive_int
    )
    relay_batch_bytes: int = tuned(
        "--relay-batch-bytes",
        3 * 1024 * 1024,
        "bytes of outputs per batch sent to the control plane",
        type=positive_int,
    )
    relay_window: int = tuned(
        "--relay-window", 512, "outputs sent to the control plane and not yet acknowledged, at most", type=positive_int
    )
    relay_connect_timeout: float = tuned(
        "--relay-connect-timeout", 10.0, "seconds a dial of the control plane may take", type=positive_seconds
    )
    relay_write_timeout: float = tuned(
        "--relay-write-timeout", 30.0, "seconds one write to the control plane may take", type=positive_seconds
    )
    relay_redial_first: float = tuned(
        "--relay-redial-first", 0.2, "seconds before the first redial of a lost stream", type=positive_seconds
    )
    relay_redial_longest: float = tuned(
        "--relay-redial-longest", 15.0, "the longest pause between redials", type=positive_seconds
    )
    # The health file (health.py); the driver's own check, re-run (it may start a test sandbox) and at start.
    health_interval: float = tuned(
        "--health-interval", 5.0, "seconds between writes of <state dir>/health.json", type=positive_seconds
    )
    driver_probe_interval: float = tuned(
        "--driver-probe-interval", 60.0, "seconds between checks that the sandbox driver is usable",
        type=positive_seconds,
    )  # fmt: skip
    driver_probe_timeout: float = tuned(
        "--driver-probe-timeout", 60.0, "seconds one check of the sandbox driver may take", type=positive_seconds
    )
    # Whether a released (archived or deleted) session's sandbox is kept for inspection rather than
    # destroyed: stopped, its engine ended, recorded as retained in the state database, left alone
    # by the reconciler and the warm pool, listed in the log at every start; the control plane is
    # told RETAINED and counts it released. Removing a retained sandbox is the operator's job.
    retain_sandboxes: bool = field(
        default=False,
        metadata=option(
            "--retain-sandboxes",
            env="ASTRABOX_RETAIN_SANDBOXES",
            switch=True,
            help="keep an archived or deleted session's sandbox, stopped, for inspection instead of destroying "
            "it; an operator removes it (env %(env)s; default off)",
        ),
    )
    # The secrets given as flags rather than by environment or file (warned about at start).
    secrets_on_command_line: tuple[SecretOption, ...] = ()

    @property
    def uses_offline_model(self) -> bool:
        return not self.model_base_url and not self.api_key

    @classmethod
    def parser(cls, environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
        """`astrabox agent`'s command line, its defaults from `environ` (default os.environ)."""
        return serverkit_settings.parser(cls, environ, prog=PROG, description=DESCRIPTION, config_env=CONFIG_ENV)

    @classmethod
    def from_args(
        cls, argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> AgentSettings:
        """The settings from the command line `argv` (default sys.argv), `environ` (default os.environ)
        and `overrides`. SecretSettingError when a secret is given twice or its file cannot be read;
        RetiredSetting when a setting the agent no longer has is given (`RETIRED`); exits as argparse
        does on a bad flag or value."""
        _refuse_retired(sys.argv[1:] if argv is None else argv, os.environ if environ is None else environ)
        return serverkit_settings.from_args(
            cls, argv, environ, prog=PROG, description=DESCRIPTION, config_env=CONFIG_ENV, **overrides
        )


class RetiredSetting(Exception):
    """A setting the agent no longer has was given; the message says what replaces it."""


# Settings the agent no longer has, with what replaces them: given, they stop the start with that
# message rather than being ignored (an operator would otherwise believe them in force).
RETIRED = {
    ("--credentials-dir", "ASTRABOX_AGENT_CREDENTIALS_DIR"): (
        "HTTP MCP servers' credentials are no longer files on the agent's host: an agent definition's"
        " `credential` names a credential of its project's encrypted store, which the control plane gives"
        " the agent a session is placed on. Put each secret there with `astrabox credentials put NAME`"
        " (from a file or standard input), delete the files, and start the agent without"
    ),
}


def _refuse_retired(argv: Sequence[str], environ: Mapping[str, str]) -> None:
    for (flag, variable), replacement in RETIRED.items():
        given = any(arg == flag or arg.startswith(flag + "=") for arg in argv)
        if given or environ.get(variable):
            raise RetiredSetting(f"{flag if given else variable} is no longer a setting. {replacement} it.")
