"""Control-plane settings: one frozen dataclass, from flags and environment."""

from __future__ import annotations

import argparse
import os
import socket
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import grpc
import structlog

from astrabox.secret_settings import SecretOption, SecretSettingError

log = structlog.get_logger(__name__)

DEFAULT_IDLE_STOP_AFTER_S = 900.0
DEFAULT_LISTEN = "127.0.0.1:7233"
# The largest gRPC message the control plane sends or takes (client calls, agent streams, replicas).
MAX_GRPC_MESSAGE_BYTES = 32 * 1024 * 1024

DATABASE_URL = SecretOption("database-url", "ASTRABOX_DATABASE_URL", "the PostgreSQL DSN")
ENROLLMENT_TOKEN = SecretOption("enrollment-token", "ASTRABOX_ENROLLMENT_TOKEN", "the token agents must present")
SECRETS = (DATABASE_URL, ENROLLMENT_TOKEN)


class SettingsError(ValueError):
    """The settings cannot work as given; the message says what to change."""


@dataclass(frozen=True, slots=True)
class ControlPlaneSettings:
    # asyncpg DSN of the PostgreSQL database (a secret: ASTRABOX_DATABASE_URL or its _FILE).
    database_url: str = field(repr=False)
    # host:port to listen on; port 0 picks a free one (ASTRABOX_LISTEN, default 127.0.0.1:7233).
    listen: str = DEFAULT_LISTEN
    # host:port other replicas reach this one at, to forward workspace requests to the
    # agents attached here (ASTRABOX_ADVERTISE_ADDRESS, default: the bound address,
    # or <hostname>:<port> when listening on a wildcard address).
    advertise_address: str = ""
    # Secret agents present in Hello (ASTRABOX_ENROLLMENT_TOKEN or its _FILE; default empty = any agent
    # on loopback).
    enrollment_token: str = field(default="", repr=False)
    # TLS: the server's certificate chain and private key, PEM files (ASTRABOX_TLS_CERT, ASTRABOX_TLS_KEY);
    # both empty: plaintext. `tls_ca` verifies the other replicas' certificates when forwarding
    # (ASTRABOX_TLS_CA; default: tls_cert itself, for replicas sharing one certificate).
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    # How long an agent's lease lasts without a heartbeat.
    lease_ttl: timedelta = timedelta(seconds=15)
    # How often agents are asked to heartbeat.
    heartbeat_interval: timedelta = timedelta(seconds=5)
    # How long the agent may take to stop an interrupted turn before it replaces the engine.
    interrupt_deadline: timedelta = timedelta(seconds=10)
    # A session still CREATING after this long fails.
    startup_deadline: timedelta = timedelta(seconds=180)
    # How often deadlines and leases are checked.
    sweep_interval: timedelta = timedelta(seconds=2)
    # A session idle this long (no turn, no queued message, no open background task) has its
    # runtime stopped: engine closed, sandbox stopped, files kept; the next message starts it
    # again. Zero: never (ASTRABOX_IDLE_STOP_AFTER, seconds).
    idle_stop_after: timedelta = timedelta(seconds=DEFAULT_IDLE_STOP_AFTER_S)
    # Where the first admin key is read from, or written to (0600) if absent, when the database
    # has no API key yet (controlplane.identity.bootstrap); empty: no bootstrap
    # (ASTRABOX_BOOTSTRAP_KEY_FILE).
    bootstrap_key_file: str = ""
    # How long a verified credential is trusted before it is checked again: a revoked key stops
    # working within this time on every replica.
    credentials_ttl: timedelta = timedelta(seconds=2)
    # The secrets given as flags rather than by environment or file (warned about at start).
    secrets_on_command_line: tuple[SecretOption, ...] = ()

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        DATABASE_URL.add_to(parser)
        parser.add_argument(
            "--listen",
            default=os.environ.get("ASTRABOX_LISTEN", DEFAULT_LISTEN),
            help="host:port to serve gRPC on (env ASTRABOX_LISTEN, default %(default)s)",
        )
        parser.add_argument(
            "--advertise-address",
            default=os.environ.get("ASTRABOX_ADVERTISE_ADDRESS", ""),
            help="host:port other control-plane replicas reach this one at (env "
            "ASTRABOX_ADVERTISE_ADDRESS, default the listen address, or <hostname>:<port> "
            "when it is a wildcard)",
        )
        ENROLLMENT_TOKEN.add_to(parser, note="; default none: any agent on loopback")
        parser.add_argument(
            "--tls-cert",
            default=os.environ.get("ASTRABOX_TLS_CERT", ""),
            help="serve TLS with this PEM certificate chain (env ASTRABOX_TLS_CERT; with --tls-key)",
        )
        parser.add_argument(
            "--tls-key",
            default=os.environ.get("ASTRABOX_TLS_KEY", ""),
            help="the PEM private key of --tls-cert (env ASTRABOX_TLS_KEY)",
        )
        parser.add_argument(
            "--tls-ca",
            default=os.environ.get("ASTRABOX_TLS_CA", ""),
            help="PEM CA bundle that verifies the other replicas when forwarding to them (env "
            "ASTRABOX_TLS_CA; default: --tls-cert itself)",
        )
        parser.add_argument(
            "--bootstrap-key-file",
            default=os.environ.get("ASTRABOX_BOOTSTRAP_KEY_FILE", ""),
            help="when the database has no API key yet, register the admin key in this file, or write a new "
            "one there (mode 0600) if it does not exist (env ASTRABOX_BOOTSTRAP_KEY_FILE)",
        )
        parser.add_argument(
            "--idle-stop-after",
            type=float,
            default=float(os.environ.get("ASTRABOX_IDLE_STOP_AFTER", DEFAULT_IDLE_STOP_AFTER_S)),
            help="seconds a session may stay idle before its runtime is stopped (files kept; the "
            "next message starts it again); 0: never (env ASTRABOX_IDLE_STOP_AFTER, default "
            "%(default)s)",
        )

    @classmethod
    def from_args(
        cls, args: argparse.Namespace, environ: Mapping[str, str] | None = None, **overrides: object
    ) -> ControlPlaneSettings:
        """SettingsError when a secret is given twice, its file is unreadable, or there is no database URL."""
        try:
            database_url, enrollment_token = (option.read(args, environ) for option in SECRETS)
        except SecretSettingError as error:
            raise SettingsError(str(error)) from None
        if not database_url and "database_url" not in overrides:
            raise SettingsError(
                f"needs {DATABASE_URL.what}: set {DATABASE_URL.env} or give {DATABASE_URL.file_flag} "
                "(`astrabox up` embeds a PostgreSQL)"
            )
        values = {
            "database_url": database_url,
            "listen": args.listen,
            "enrollment_token": enrollment_token,
            "advertise_address": args.advertise_address,
            "secrets_on_command_line": tuple(option for option in SECRETS if option.on_command_line(args)),
            "tls_cert": args.tls_cert,
            "tls_key": args.tls_key,
            "tls_ca": args.tls_ca,
            "idle_stop_after": timedelta(seconds=args.idle_stop_after),
            "bootstrap_key_file": args.bootstrap_key_file,
        }
        values.update(overrides)
        return cls(**values)


_WILDCARDS = {"", "0.0.0.0", "::", "[::]", "*"}


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
