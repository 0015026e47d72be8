"""A project's credentials: put (created, or replaced as a new version), listed, deleted; and the
secrets a session needs (those its pinned environment binds, those its agent's HTTP MCP servers
name), opened for the agent running it.

Every call takes the caller's project and touches only its credentials: another project's answers
exactly as one that does not exist. Without a key (`Keyring`) every call answers
CREDENTIALS_UNAVAILABLE and the rest of the control plane works. A secret is only ever in a
request, a sealed row and a ResolveCredentials answer: nothing here logs it, and no refusal quotes
it (`controlplane.validation._secret`).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg
import structlog

from astrabox.agents.v1 import agent_pb2
from astrabox.environments.v1 import environment_pb2
from controlplane import store, validation
from controlplane.credential_store.cipher import Keyring, SealBroken, Sealed, SealedUnderOtherKey
from controlplane.errors import CredentialNotFound, CredentialsUnavailable, CredentialUnreadable, InvalidArgument
from controlplane.page_tokens import PageTokens
from controlplane.validation import echo
from serverkit import credential_reach, host_patterns

log = structlog.get_logger(__name__)

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MAX_VERSION = 2**31 - 1


def credential_name(value: str, field: str = "name") -> str:
    """A credential's name: 1-64 characters of [A-Za-z0-9_.-], not '.' or '..'."""
    if not _NAME.fullmatch(value) or value in (".", ".."):
        raise InvalidArgument(
            field, f"{field} must be 1-64 characters of [A-Za-z0-9_.-], not '.' or '..'; got {echo(value)}"
        )
    return value


@dataclass(frozen=True, slots=True)
class CredentialRecord:
    """A stored credential as it may be shown: never its secret."""

    name: str
    project_id: uuid.UUID
    version: int
    description: str
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> CredentialRecord:
        return cls(
            row["name"], row["project_id"], row["version"], row["description"], row["created_at"], row["updated_at"]
        )


@dataclass(frozen=True, slots=True)
class Resolved:
    """One binding of a session's environment with its credential's secret."""

    name: str
    # Host patterns, each with `port` (`serverkit.credential_reach.pinned`).
    hosts: tuple[str, ...]
    scheme: environment_pb2.CredentialScheme
    header: str
    secret: str
    port: int
    allow_plain_http: bool


@dataclass(frozen=True, slots=True)
class ResolvedMcp:
    """The credential an HTTP MCP server of a session's agent names, with its secret."""

    server: str
    name: str
    secret: str


@dataclass(frozen=True, slots=True)
class SessionSecrets:
    """What ResolveCredentials answers for one session."""

    bindings: tuple[Resolved, ...] = ()
    mcp: tuple[ResolvedMcp, ...] = ()


class CredentialStore:
    def __init__(self, pool: asyncpg.Pool, keyring: Keyring | None, page_tokens: PageTokens) -> None:
        self._pool = pool
        self._keyring = keyring
        self._page_tokens = page_tokens

    def _keys(self) -> Keyring:
        if self._keyring is None:
            raise CredentialsUnavailable()
        return self._keyring

    async def put(
        self, project_id: uuid.UUID, name: str, secret: str, description: str
    ) -> tuple[CredentialRecord, bool]:
        """Store `secret` under `name`: the credential, and whether it was created (else replaced)."""
        keys = self._keys()
        credential_name(name)
        if not secret:
            raise InvalidArgument("secret", "secret must not be empty")
        validation.FIELDS["secret"]("secret", secret)
        validation.FIELDS["description"]("description", description)
        async with self._pool.acquire() as conn, conn.transaction():
            row = await store.credential_store.lock(conn, project_id, name)
            if row is None:
                sealed = keys.seal(project_id, name, 1, secret)
                made = await store.credential_store.insert(
                    conn, project_id, name, description, sealed.ciphertext, sealed.nonce, sealed.key_id
                )
                if made is not None:
                    log.info("credential_created", name=name, project_id=str(project_id), key_id=sealed.key_id)
                    return CredentialRecord.from_row(made), True
                row = await store.credential_store.lock(conn, project_id, name)  # a concurrent put made it
                assert row is not None
            version = row["version"] + 1
            if version > MAX_VERSION:
                raise InvalidArgument("name", f"credential {name} has had its last version: delete it and put it again")
            sealed = keys.seal(project_id, name, version, secret)
            changed = await store.credential_store.replace(
                conn, project_id, name, version, description, sealed.ciphertext, sealed.nonce, sealed.key_id
            )
        log.info("credential_replaced", name=name, version=version, project_id=str(project_id), key_id=sealed.key_id)
        return CredentialRecord.from_row(changed), False

    async def list_credentials(
        self, project_id: uuid.UUID, page_size: int, page_token: str
    ) -> tuple[list[CredentialRecord], str]:
        """A page of the project's credentials by name, and the next page's token."""
        self._keys()
        size = validation.page_size(page_size, default=50, maximum=500)
        scope = f"credentials/{project_id}"
        after = ""
        if page_token:
            after_name = self._page_tokens.read(scope, page_token).get("after")
            if not isinstance(after_name, str):
                raise validation.page_token_invalid()
            after = after_name
        rows = await store.credential_store.page(self._pool, project_id, after, size + 1)
        found = [CredentialRecord.from_row(r) for r in rows[:size]]
        next_token = self._page_tokens.issue(scope, {"after": found[-1].name}) if len(rows) > size else ""
        return found, next_token

    async def delete(self, project_id: uuid.UUID, name: str) -> None:
        self._keys()
        credential_name(name)
        if not await store.credential_store.delete(self._pool, project_id, name):
            raise CredentialNotFound(name)
        log.info("credential_deleted", name=name, project_id=str(project_id))

    async def resolve(
        self,
        project_id: uuid.UUID,
        environment: environment_pb2.EnvironmentSpec | None,
        agent: agent_pb2.AgentSpec | None,
    ) -> SessionSecrets:
        """The secrets a session needs: each binding of its `environment`, and each HTTP MCP server of
        its `agent` naming a credential, whose credential the project holds (one it lacks is left out:
        the agent reports it). CredentialUnreadable when a named credential does not decrypt."""
        bindings: Sequence[environment_pb2.CredentialBinding] = environment.credentials if environment else ()
        servers = [
            (server.name, server.http.credential)
            for server in (agent.mcp_servers if agent else ())
            if server.WhichOneof("transport") == "http" and server.http.credential
        ]
        if not bindings and not servers:
            return SessionSecrets()
        secrets = await self._opened(project_id, {b.credential for b in bindings} | {name for _, name in servers})
        found = []
        for binding in bindings:
            if (secret := secrets.get(binding.credential)) is None:
                continue
            port = credential_reach.port(binding.port)
            hosts = tuple(str(p) for p in credential_reach.pinned(_parsed(binding.hosts), port))
            if hosts:
                found.append(
                    Resolved(
                        binding.credential,
                        hosts,
                        binding.scheme,
                        binding.header,
                        secret,
                        port,
                        binding.allow_plain_http,
                    )
                )
        mcp = [ResolvedMcp(server, name, secrets[name]) for server, name in servers if name in secrets]
        return SessionSecrets(tuple(found), tuple(mcp))

    async def _opened(self, project_id: uuid.UUID, names: set[str]) -> dict[str, str]:
        """The secrets of the credentials named that the project holds, by name."""
        keys = self._keys()
        opened = {}
        for row in await store.credential_store.named(self._pool, project_id, sorted(names)):
            sealed = Sealed(bytes(row["ciphertext"]), bytes(row["nonce"]), row["key_id"])
            try:
                opened[row["name"]] = keys.open(project_id, row["name"], row["version"], sealed)
            except SealedUnderOtherKey as other:
                log.error("credential_key_mismatch", name=row["name"], project_id=str(project_id), key_id=other.key_id)
                raise CredentialUnreadable(
                    "CREDENTIAL_KEY_MISMATCH",
                    f"credential {row['name']} was stored under key {other.key_id}, which this control plane does not"
                    f" hold (its keys: {', '.join(keys.key_ids)}): start it with that key as"
                    " --credential-previous-key-file, or put the credential again",
                    row["name"],
                ) from None
            except SealBroken:
                log.error("credential_corrupt", name=row["name"], project_id=str(project_id))
                raise CredentialUnreadable(
                    "CREDENTIAL_CORRUPT",
                    f"credential {row['name']} does not decrypt: its row was changed or copied from another"
                    " credential; put it again",
                    row["name"],
                ) from None
        return opened


def _parsed(hosts: Sequence[str]) -> list[host_patterns.HostPattern]:
    """The patterns that parse (the definition was validated; one stored before a rule was not)."""
    parsed = []
    for text in hosts:
        try:
            parsed.append(host_patterns.parse(text))
        except host_patterns.HostPatternError:
            continue
    return parsed
