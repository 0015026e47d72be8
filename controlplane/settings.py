"""Control-plane settings: one frozen dataclass, from flags and environment."""

from __future__ import annotations

import argparse
import os
import socket
import ssl
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import structlog

from astrabox.secret_settings import SecretOption, SecretSettingError, redact_text
from controlplane.identity.tokens import OidcSettings
from controlplane.web.origins import OriginSettingError, parse_origin
from serverkit import private_files
from serverkit import settings as serverkit_settings
from serverkit.settings import CONFIG_ENV, not_negative_seconds, option, positive_int, positive_seconds, secret, tuned

log = structlog.get_logger(__name__)

DEFAULT_IDLE_STOP_AFTER_S = 900.0
DEFAULT_LISTEN = "127.0.0.1:7233"
# Where `astrabox up` serves the web API and the console (the control plane alone serves none by default).
DEFAULT_WEB_LISTEN = "127.0.0.1:7280"
# The largest gRPC message the control plane sends or takes (client calls, agent streams, replicas).
MAX_GRPC_MESSAGE_BYTES = 32 * 1024 * 1024

DATABASE_URL = SecretOption("database-url", "ASTRABOX_DATABASE_URL", "the PostgreSQL DSN")
ENROLLMENT_TOKEN = SecretOption("enrollment-token", "ASTRABOX_ENROLLMENT_TOKEN", "the token agents must present")
CREDENTIAL_KEY = SecretOption(
    "credential-key", "ASTRABOX_CREDENTIAL_KEY", "the key of the credential store (32 random bytes, base64)"
)
CREDENTIAL_PREVIOUS_KEY = SecretOption(
    "credential-previous-key",
    "ASTRABOX_CREDENTIAL_PREVIOUS_KEY",
    "an earlier key of the credential store, to read credentials not yet put again under the new one",
)
PROG = "astrabox controlplane"
DESCRIPTION = "`astrabox controlplane` / `python -m controlplane`: run the control plane until signalled."


class SettingsError(ValueError):
    """The settings cannot work as given; the message says what to change."""


def _seconds(flag: str, default: float, what: str) -> timedelta:
    """A duration setting given in seconds (`default`): `--flag` and ASTRABOX_<FLAG>."""
    return tuned(flag, default, what, convert=_as_timedelta)  # type: ignore[no-any-return]


def _as_timedelta(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


@dataclass(frozen=True, slots=True)
class ControlPlaneSettings:
    """Everything the control plane is configured with; `astrabox controlplane --help` lists the flags."""

    # asyncpg DSN of the PostgreSQL database (a secret).
    database_url: str = field(repr=False, metadata=secret(DATABASE_URL))
    # host:port to listen on; port 0 picks a free one.
    listen: str = field(
        default=DEFAULT_LISTEN,
        metadata=option(
            "--listen",
            env="ASTRABOX_LISTEN",
            help="host:port to serve gRPC on (env %(env)s, default %(default)s)",
        ),
    )
    # host:port other replicas reach this one at, to forward workspace requests to the agents
    # attached here; empty: the bound address, or <hostname>:<port> when listening on a wildcard.
    advertise_address: str = field(
        default="",
        metadata=option(
            "--advertise-address",
            env="ASTRABOX_ADVERTISE_ADDRESS",
            help="host:port other control-plane replicas reach this one at (env %(env)s, default the "
            "listen address, or <hostname>:<port> when it is a wildcard)",
        ),
    )
    # Secret agents present in Hello to enrol; empty: any agent on loopback.
    enrollment_token: str = field(
        default="", repr=False, metadata=secret(ENROLLMENT_TOKEN, note="; default none: any agent on loopback")
    )
    # What the enrollment token alone gives a new agent (controlplane.identity.agent_admission):
    # "manual", pending until an operator admits it; "automatic", admitted at once.
    agent_admission: str = field(
        default="manual",
        metadata=option(
            "--agent-admission",
            env="ASTRABOX_AGENT_ADMISSION",
            choices=("manual", "automatic"),
            help="manual: an agent enrolling with the enrollment token waits until an operator admits it "
            "(`astrabox hosts admit`) or presents a join token; automatic: admitted at once, only where every "
            "holder of the token may run every project's work; needs an enrollment token (env %(env)s, "
            "default %(default)s)",
        ),
    )
    # TLS: the server's certificate chain and private key, PEM files; both empty: plaintext. `tls_ca`
    # verifies the other replicas' certificates when forwarding (empty: tls_cert itself, for replicas
    # sharing one certificate).
    tls_cert: str = field(
        default="",
        metadata=option(
            "--tls-cert",
            env="ASTRABOX_TLS_CERT",
            help="serve TLS with this PEM certificate chain (env %(env)s; with --tls-key)",
        ),
    )
    tls_key: str = field(
        default="",
        metadata=option("--tls-key", env="ASTRABOX_TLS_KEY", help="the PEM private key of --tls-cert (env %(env)s)"),
    )
    tls_ca: str = field(
        default="",
        metadata=option(
            "--tls-ca",
            env="ASTRABOX_TLS_CA",
            help="PEM CA bundle that verifies the other replicas when forwarding to them (env %(env)s; "
            "default: --tls-cert itself)",
        ),
    )
    metrics_listen: str = serverkit_settings.metrics_listen()
    # host:port of the web API (Connect protocol, for browsers and curl) and the console; empty: off.
    web_listen: str = field(
        default="",
        metadata=option(
            "--web-listen",
            env="ASTRABOX_WEB_LISTEN",
            help="host:port to serve the web API and the console on, port 0 picks one (env %(env)s, default none: off)",
        ),
    )
    # Web origins besides the console's own on loopback whose pages may call the web API, comma-separated.
    web_origins: str = field(
        default="",
        metadata=option(
            "--web-origins",
            env="ASTRABOX_WEB_ORIGINS",
            help="comma-separated origins (scheme://host[:port]) whose pages may call the web API, besides "
            "the console's own on loopback, e.g. https://astrabox.example.com behind a proxy (env %(env)s)",
        ),
    )
    otlp_endpoint: str = serverkit_settings.otlp_endpoint()
    # Webhook deliveries (controlplane.webhooks): where they may go besides public addresses, and how
    # they are retried (`first * 2^(n-1)` seconds, half of it jitter, at most `longest`, until
    # `max_attempts` or `max_age`).
    webhook_allowed_networks: str = field(
        default="",
        metadata=option(
            "--webhook-allowed-networks",
            env="ASTRABOX_WEBHOOK_ALLOWED_NETWORKS",
            help="comma-separated CIDRs of non-public networks webhooks may be delivered to (plain http only"
            " there), e.g. 10.20.0.0/16 for an internal receiver; default none (env %(env)s)",
        ),
    )
    webhook_timeout: float = tuned(
        "--webhook-timeout", 10.0, "seconds one webhook attempt may take, connecting included",
        type=positive_seconds,
    )  # fmt: skip
    webhook_max_attempts: int = tuned(
        "--webhook-max-attempts", 10, "attempts of a webhook delivery before it is failed", type=positive_int
    )
    webhook_max_age: timedelta = _seconds(
        "--webhook-max-age", 86400, "seconds after which a webhook delivery is no longer retried"
    )
    webhook_retry_first: timedelta = _seconds(
        "--webhook-retry-first", 5, "seconds before a failed webhook attempt is retried (doubling each time)"
    )
    webhook_retry_longest: timedelta = _seconds(
        "--webhook-retry-longest", 3600, "the longest wait between attempts of a webhook delivery"
    )
    webhook_poll_interval: timedelta = _seconds(
        "--webhook-poll-interval", 1, "seconds between looks for due webhook deliveries"
    )
    # The delivery log is kept this long after a delivery finished (delivered or failed), then deleted.
    webhook_delivery_retention: timedelta = _seconds(
        "--webhook-delivery-retention",
        30 * 86400,
        "seconds a finished webhook delivery and its attempts stay in the delivery log; 0: forever",
    )
    # How long an agent's lease lasts without a heartbeat; its sessions' runtimes are lost after it.
    lease_ttl: timedelta = _seconds("--lease-ttl", 15, "seconds an agent's lease lasts without a heartbeat")
    # How often agents are asked to heartbeat.
    heartbeat_interval: timedelta = _seconds("--heartbeat-interval", 5, "seconds between an agent's heartbeats")
    # How long the agent may take to stop an interrupted turn before it replaces the engine.
    interrupt_deadline: timedelta = _seconds("--interrupt-deadline", 10, "seconds an interrupted turn may take to stop")
    # A session still CREATING after this long fails.
    startup_deadline: timedelta = _seconds(
        "--startup-deadline", 180, "seconds a new session's runtime may take to start"
    )
    # A running turn whose input its agent has not accepted after this long fails, and the agent
    # is told to let go of it. Longer than a start's deadline: an input waits for its runtime.
    delivery_deadline: timedelta = _seconds("--delivery-deadline", 240, "seconds an agent may take to accept a message")
    # How often deadlines and leases are checked.
    sweep_interval: timedelta = _seconds("--sweep-interval", 2, "seconds between checks of leases and deadlines")
    # How often the gRPC health is checked against PostgreSQL (`controlplane.health`), and how long
    # one check may take before the database counts as unreachable (every service NOT_SERVING).
    health_probe_interval: timedelta = _seconds(
        "--health-probe-interval", 3, "seconds between probes of the database for the gRPC health"
    )
    health_probe_timeout: timedelta = _seconds(
        "--health-probe-timeout", 2, "seconds a probe of the database may take before health is NOT_SERVING"
    )
    # A released session's sandbox its agent refused or could not confirm destroying is tried
    # again after `destroy_retry_first`, doubling up to `destroy_retry_longest`, until
    # `destroy_attempts` have failed; then it is abandoned to an operator (logged at error, shown
    # on the session as destroy_failure.abandoned).
    destroy_retry_first: timedelta = _seconds(
        "--destroy-retry-first", 30, "seconds before a failed sandbox destruction is tried again"
    )
    destroy_retry_longest: timedelta = _seconds(
        "--destroy-retry-longest", 1800, "the longest wait between tries of a sandbox destruction"
    )
    destroy_attempts: int = field(
        default=8,
        metadata=option(
            "--destroy-attempts",
            env="ASTRABOX_DESTROY_ATTEMPTS",
            type=int,
            help="failed destructions of a sandbox after which it is left to an operator (env %(env)s, "
            "default %(default)s)",
        ),
    )
    # A RunCommand's quota lease (controlplane.quotas) outlives a replica that stopped renewing it by this.
    command_lease_ttl: timedelta = _seconds(
        "--command-lease-ttl", 30, "seconds a running command's quota lease outlives its replica's last renewal"
    )
    # Schedules (controlplane.schedules): how often a replica looks for due ticks and runs to move on,
    # how long it holds a run before another replica may take it over (its holder died), how late a
    # tick may be and still not count as missed, how many schedules a project may have, and the
    # shortest interval between two ticks of one.
    schedule_interval: timedelta = _seconds("--schedule-interval", 1, "seconds between the scheduler's passes")
    schedule_lease: timedelta = _seconds(
        "--schedule-lease", 30, "seconds a replica holds a schedule's run before another may take it over"
    )
    schedule_grace: timedelta = _seconds(
        "--schedule-grace", 30, "seconds a tick may be late and still run under MISSED_TICKS_SKIP"
    )
    schedules_per_project: int = tuned(
        "--schedules-per-project", 100, "schedules a project may have", type=positive_int
    )
    schedule_min_interval: timedelta = _seconds(
        "--schedule-min-interval", 60, "the shortest time a schedule's cron expression may leave between ticks"
    )
    # Sub-agent calls (controlplane.subagents): how deep they may nest, and how long one may take.
    subagent_max_depth: int = tuned(
        "--subagent-max-depth",
        3,
        "how deep sub-agent sessions may nest (a session that deep calls none)",
        type=positive_int,
    )
    subagent_deadline: timedelta = _seconds(
        "--subagent-deadline", 1800, "seconds a sub-agent call may take before the parent gets an error result"
    )
    # Rows one pass of the sweep takes of each kind (commands pruned, destructions retried).
    sweep_batch: int = tuned("--sweep-batch", 500, "rows one pass of the sweep prunes or retries", type=positive_int)
    # Acknowledged agent commands are kept this long (to answer what an agent was told), then pruned.
    command_retention: timedelta = _seconds(
        "--command-retention", 86400, "seconds an acknowledged agent command is kept"
    )
    # An archived or deleted session, its sandbox gone, is forgotten with its journal and everything
    # else of it this long after it was released (controlplane.retention). Zero: kept forever.
    session_retention: timedelta = _seconds(
        "--session-retention",
        30 * 86400,
        "seconds an archived or deleted session (journal, turns, transcript...) is kept before it is "
        "deleted; 0: forever",
    )
    # A session idle this long (no turn, no queued message, no open background task) has its
    # runtime stopped: engine closed, sandbox stopped, files kept; the next message starts it
    # again. Zero: never.
    idle_stop_after: timedelta = field(
        default=timedelta(seconds=DEFAULT_IDLE_STOP_AFTER_S),
        metadata=option(
            "--idle-stop-after",
            env="ASTRABOX_IDLE_STOP_AFTER",
            type=float,
            default=DEFAULT_IDLE_STOP_AFTER_S,
            convert=lambda seconds: timedelta(seconds=seconds),
            help="seconds a session may stay idle before its runtime is stopped (files kept; the "
            "next message starts it again); 0: never (env %(env)s, default %(default)s)",
        ),
    )
    # Where the first admin key is read from, or written to (0600) if absent, when the database
    # has no API key yet (controlplane.identity.bootstrap); empty: no bootstrap.
    bootstrap_key_file: str = field(
        default="",
        metadata=option(
            "--bootstrap-key-file",
            env="ASTRABOX_BOOTSTRAP_KEY_FILE",
            help="when the database has no API key yet, register the admin key in this file, or write a new "
            "one there (mode 0600) if it does not exist (env %(env)s)",
        ),
    )
    # How long a verified credential is trusted before it is checked again: a revoked key stops
    # working within this time on every replica.
    credentials_ttl: timedelta = _seconds(
        "--credentials-ttl", 2, "seconds a verified API key or token is trusted before it is checked again"
    )
    # Workspace requests (controlplane.workspace, controlplane.forwarding): how long the agent may
    # stay silent on one, how long a reply waits for a slow client, how long another replica may
    # take to accept a forwarded request's connection.
    workspace_reply_timeout: float = tuned(
        "--workspace-reply-timeout", 660.0,
        "seconds the agent may stay silent on a workspace request (a command printing nothing for longer fails)",
        type=positive_seconds,
    )  # fmt: skip
    workspace_delivery_timeout: float = tuned(
        "--workspace-delivery-timeout", 30.0,
        "seconds a workspace reply waits for a slow client before the request is dropped", type=positive_seconds,
    )  # fmt: skip
    replica_connect_timeout: float = tuned(
        "--replica-connect-timeout", 5.0,
        "seconds another control-plane replica may take to accept a forwarded workspace request",
        type=positive_seconds,
    )  # fmt: skip
    # Single sign-on (controlplane.identity.tokens): OIDC JWTs from this issuer, for this audience,
    # signed by a key of this JWKS (a file or URL), are bearer credentials too. All three or none.
    oidc_issuer: str = field(
        default="",
        metadata=option(
            "--oidc-issuer",
            env="ASTRABOX_OIDC_ISSUER",
            help="accept OIDC JSON Web Tokens from this issuer (its `iss`) as credentials, with "
            "--oidc-audience and --oidc-jwks (env %(env)s; default: API keys only)",
        ),
    )
    oidc_audience: str = field(
        default="",
        metadata=option(
            "--oidc-audience", env="ASTRABOX_OIDC_AUDIENCE", help="the `aud` tokens must name (env %(env)s)"
        ),
    )
    oidc_jwks: str = field(
        default="",
        metadata=option(
            "--oidc-jwks",
            env="ASTRABOX_OIDC_JWKS",
            help="the issuer's public keys: a JWKS file (re-read when it changes) or https:// URL (env %(env)s)",
        ),
    )
    # Keys fetched over plain http could be replaced on the way, and a forged key signs any token:
    # refused at start, except for a test's issuer on loopback.
    oidc_allow_insecure_jwks: bool = field(
        default=False,
        metadata=option(
            "--oidc-allow-insecure-jwks",
            env="ASTRABOX_OIDC_ALLOW_INSECURE_JWKS",
            switch=True,
            help="take --oidc-jwks as a plain http:// URL; only for tests, since anyone on the way could "
            "replace the keys and sign tokens (env %(env)s; default off: an http URL is refused at start)",
        ),
    )
    # The console's sign-in (controlplane.web.sign_in): the OIDC client it is registered as at the
    # issuer, a public client using the authorization-code flow with PKCE; empty: keys only.
    console_oidc_client_id: str = field(
        default="",
        metadata=option(
            "--console-oidc-client-id",
            env="ASTRABOX_CONSOLE_OIDC_CLIENT_ID",
            help="the console signs people in at --oidc-issuer as this public OIDC client (authorization code "
            "with PKCE; register the console's URL, e.g. http://127.0.0.1:7280/, as its redirect URI) "
            "(env %(env)s; default: sign in with an API key only)",
        ),
    )
    oidc_project_claim: str = field(
        default="astrabox_project",
        metadata=option(
            "--oidc-project-claim",
            env="ASTRABOX_OIDC_PROJECT_CLAIM",
            help="the claim naming the caller's project (env %(env)s, default %(default)s)",
        ),
    )
    # Clock skew allowed on a token's expiry; how often an https JWKS is fetched again (an unknown
    # key id fetches it sooner, at most every 30 s).
    oidc_leeway: float = tuned(
        "--oidc-leeway", 30.0, "seconds of clock skew allowed on a token's expiry", type=not_negative_seconds
    )
    oidc_jwks_refresh: float = tuned(
        "--oidc-jwks-refresh", 300.0, "seconds between fetches of the issuer's keys from an https JWKS URL",
        type=positive_seconds,
    )  # fmt: skip
    oidc_role_claim: str = field(
        default="astrabox_role",
        metadata=option(
            "--oidc-role-claim",
            env="ASTRABOX_OIDC_ROLE_CLAIM",
            help="the claim holding the caller's role: viewer, developer or admin (env %(env)s, default %(default)s)",
        ),
    )
    # The credential store's key (controlplane.credential_store.cipher), and the key before it while
    # credentials are put again under the new one; empty: the credential store is unavailable. A key
    # file must be this user's and readable by it alone.
    credential_key: str = field(
        default="", repr=False, metadata=secret(CREDENTIAL_KEY, note="; default none: no credential store")
    )
    credential_previous_key: str = field(default="", repr=False, metadata=secret(CREDENTIAL_PREVIOUS_KEY))
    # The secrets given as flags rather than by environment or file (warned about at start).
    secrets_on_command_line: tuple[SecretOption, ...] = ()

    @classmethod
    def parser(cls, environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
        """`astrabox controlplane`'s command line, its defaults from `environ` (default os.environ)."""
        return serverkit_settings.parser(cls, environ, prog=PROG, description=DESCRIPTION, config_env=CONFIG_ENV)

    @classmethod
    def from_args(
        cls, argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> ControlPlaneSettings:
        """The settings from the command line `argv` (default sys.argv), `environ` (default os.environ)
        and `overrides`. SettingsError when a secret is given twice, its file is unreadable, or there
        is no database URL; exits as argparse does on a bad flag or value."""
        try:
            loaded = serverkit_settings.load(
                cls, argv, environ, prog=PROG, description=DESCRIPTION, config_env=CONFIG_ENV
            )
        except SecretSettingError as error:
            raise SettingsError(str(error)) from None
        values = loaded.values
        _key_files_private(loaded, os.environ if environ is None else environ)
        if not values["database_url"] and "database_url" not in overrides:
            raise SettingsError(_NO_DATABASE_URL)
        return cls(**{**values, **overrides})


_NO_DATABASE_URL = (
    f"needs {DATABASE_URL.what}: set {DATABASE_URL.env} or give {DATABASE_URL.file_flag} "
    "(`astrabox up` embeds a PostgreSQL)"
)


def add_database_url(parser: argparse.ArgumentParser) -> None:
    """The control plane's database flags, for the commands that need its database and nothing else
    (`astrabox db`): the same flags, variables and files as `astrabox controlplane`."""
    DATABASE_URL.add_to(parser)


def database_url(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> str:
    """The database URL from what `add_database_url` parsed, else the environment, read as the
    control plane reads it. SettingsError when it is given nowhere, twice, or its file is unreadable."""
    try:
        url = DATABASE_URL.read(args, environ)
    except SecretSettingError as error:
        raise SettingsError(str(error)) from None
    if not url:
        raise SettingsError(_NO_DATABASE_URL)
    return url


def _key_files_private(loaded: serverkit_settings.Loaded, environ: Mapping[str, str]) -> None:
    """SettingsError unless each credentials key file given is this user's and readable by it alone."""
    for key in (CREDENTIAL_KEY, CREDENTIAL_PREVIOUS_KEY):
        dest = key.name.replace("-", "_") + "_file"
        from_config = loaded.config.values.get(dest) if loaded.config is not None else None
        path = getattr(loaded.args, dest, None) or environ.get(key.file_env) or from_config
        if not path:
            continue
        try:
            info = os.lstat(Path(path).expanduser())
        except OSError as error:
            raise SettingsError(f"cannot read {key.what} from {path}: {error.strerror}") from None
        found = private_files.problem(info, f"{key.file_flag} {path}", regular=True)
        if found is not None:
            raise SettingsError(f"{found}: the credential store's key must be kept from other users (chmod 600)")


def oidc_settings(settings: ControlPlaneSettings) -> OidcSettings | None:
    """Single sign-on's settings; None when it is off. SettingsError when it is half configured, or
    its keys would come over plain http without --oidc-allow-insecure-jwks."""
    given = (settings.oidc_issuer, settings.oidc_audience, settings.oidc_jwks)
    if not any(given):
        return None
    if not all(given):
        raise SettingsError("single sign-on needs all of --oidc-issuer, --oidc-audience and --oidc-jwks")
    if settings.oidc_jwks.lower().startswith("http://") and not settings.oidc_allow_insecure_jwks:
        raise SettingsError(
            f"--oidc-jwks {redact_text(settings.oidc_jwks)} is a plain http URL: anyone between this host and "
            "the issuer could replace its keys and sign tokens for any project; give an https:// URL or a file "
            "(--oidc-allow-insecure-jwks takes http, for tests only)"
        )
    return OidcSettings(
        *given,
        settings.oidc_project_claim,
        settings.oidc_role_claim,
        leeway=settings.oidc_leeway,
        jwks_refresh=settings.oidc_jwks_refresh,
    )


_WILDCARDS = {"", "0.0.0.0", "::", "[::]", "*"}


def console_sign_in(settings: ControlPlaneSettings) -> tuple[OidcSettings, str] | None:
    """Single sign-on's settings and the console's OIDC client id, when the console signs people in
    at the issuer; SettingsError when the client id is given without single sign-on."""
    oidc = oidc_settings(settings)
    if not settings.console_oidc_client_id:
        return None
    if oidc is None:
        raise SettingsError(
            "--console-oidc-client-id needs single sign-on: set --oidc-issuer, --oidc-audience and --oidc-jwks"
        )
    return oidc, settings.console_oidc_client_id


def web_origins(settings: ControlPlaneSettings) -> tuple[str, ...]:
    """--web-origins as normalized origins; SettingsError naming an entry that is not one."""
    try:
        return tuple(parse_origin(origin) for origin in settings.web_origins.split(",") if origin.strip())
    except OriginSettingError as error:
        raise SettingsError(f"--web-origins: {error}") from None


def web_tls(settings: ControlPlaneSettings) -> ssl.SSLContext | None:
    """The web API's HTTPS context: the gRPC port's certificate and key, when it has them."""
    if not settings.tls_cert:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(settings.tls_cert, settings.tls_key)
    except (OSError, ssl.SSLError) as error:
        raise SettingsError(f"the web API cannot use the TLS certificate and key: {error}") from None
    return context


def advertise_address(settings: ControlPlaneSettings, host: str, port: int) -> str:
    """The address to give other replicas, once the server is bound to `host`:`port`."""
    if settings.advertise_address:
        return settings.advertise_address
    return f"{socket.gethostname() if host in _WILDCARDS else host}:{port}"


def tls_credentials(settings: ControlPlaneSettings) -> tuple[grpc.ServerCredentials, grpc.ChannelCredentials] | None:
    """The server's TLS credentials and those it forwards to other replicas with; None: plaintext.
    SettingsError naming the problem when the files are half given or unreadable; a private key that
    other users can read is used, and warned about."""
    if not settings.tls_cert and not settings.tls_key:
        if settings.tls_ca:
            raise SettingsError("--tls-ca needs --tls-cert and --tls-key: the replica itself serves plaintext")
        return None
    if not settings.tls_cert or not settings.tls_key:
        raise SettingsError("TLS needs both --tls-cert and --tls-key (or neither, for plaintext)")
    try:
        cert = Path(settings.tls_cert).read_bytes()
        with open(settings.tls_key, "rb") as key_file:
            mode = stat.S_IMODE(os.fstat(key_file.fileno()).st_mode)
            key = key_file.read()
        ca = Path(settings.tls_ca).read_bytes() if settings.tls_ca else cert
    except OSError as error:
        raise SettingsError(f"cannot read a TLS file: {error.filename}: {error.strerror}") from error
    if mode & 0o077:
        log.warning(
            "tls_key_readable_by_others", path=settings.tls_key, mode=oct(mode), fix=f"chmod 600 {settings.tls_key}"
        )
    return grpc.ssl_server_credentials([(key, cert)]), grpc.ssl_channel_credentials(root_certificates=ca)
