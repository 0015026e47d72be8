"""A project's webhooks (what WebhookService changes and shows), their signing secrets and their
delivery log.

Every call takes the caller's project and touches only its webhooks: another project's answers as
one that does not exist. Secrets are sealed under the operator's credentials key
(`controlplane.credential_store.cipher`), so the database never holds one in the clear; without a
key, every call answers CREDENTIALS_UNAVAILABLE. A secret is shown once, by the call that makes it
(a retried create shows it again), and never logged.
"""

from __future__ import annotations

import base64
import secrets
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import asyncpg
import structlog

from controlplane import store, validation
from controlplane.credential_store.cipher import Keyring, SealBroken, Sealed, SealedUnderOtherKey
from controlplane.errors import (
    CredentialsUnavailable,
    CredentialUnreadable,
    DatabaseConflict,
    InvalidArgument,
    RequestIdReused,
    WebhookDeliveryNotFound,
    WebhookNotFound,
)
from controlplane.page_tokens import PageTokens
from controlplane.validation import echo
from controlplane.webhooks.destinations import DestinationRefused, Destinations
from controlplane.webhooks.events import event_types

log = structlog.get_logger(__name__)

WEBHOOK_URL_REFUSED = "WEBHOOK_URL_REFUSED"
DEFAULT_OVERLAP = timedelta(days=1)
SECRET_BYTES = 24
STATES = ("pending", "delivered", "failed")


@dataclass(frozen=True, slots=True)
class WebhookRecord:
    """A webhook as it may be shown: never its secret."""

    webhook_id: uuid.UUID
    project_id: uuid.UUID
    url: str
    description: str
    event_types: tuple[str, ...]
    enabled: bool
    secret_version: int
    previous_expires_at: datetime | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> WebhookRecord:
        return cls(
            row["webhook_id"],
            row["project_id"],
            row["url"],
            row["description"],
            tuple(row["event_types"]),
            row["enabled"],
            row["secret_version"],
            row["previous_expires_at"],
            row["created_at"],
            row["updated_at"],
        )


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    attempt: int
    started_at: datetime
    finished_at: datetime | None
    status_code: int | None
    error: str
    excerpt: str


@dataclass(frozen=True, slots=True)
class DeliveryRecord:
    delivery_id: uuid.UUID
    webhook_id: uuid.UUID
    event_type: str
    session_id: uuid.UUID | None
    seq: int
    state: str
    attempts: int
    created_at: datetime
    next_attempt_at: datetime
    payload_json: str
    log: tuple[AttemptRecord, ...] = ()

    @classmethod
    def from_row(cls, row: asyncpg.Record, log: Sequence[AttemptRecord] = ()) -> DeliveryRecord:
        return cls(
            row["delivery_id"],
            row["webhook_id"],
            row["event_type"],
            row["session_id"],
            row["seq"] or 0,
            row["state"],
            row["attempts"],
            row["created_at"],
            row["next_attempt_at"],
            row["payload_json"],
            tuple(log),
        )


def new_secret() -> str:
    """A Standard Webhooks secret: `whsec_` and base64 of random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def _uuid(field: str, value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidArgument(field, f"{field} must be a UUID, got {echo(value)}") from None


def _sealed_name(webhook_id: uuid.UUID) -> str:
    return f"webhook/{webhook_id}"


class Webhooks:
    def __init__(
        self, pool: asyncpg.Pool, keys: Keyring | None, destinations: Destinations, page_tokens: PageTokens
    ) -> None:
        self._pool = pool
        self._keys_or_none = keys
        self._destinations = destinations
        self._page_tokens = page_tokens

    def _keys(self) -> Keyring:
        if self._keys_or_none is None:
            raise CredentialsUnavailable()
        return self._keys_or_none

    async def _checked_url(self, url: str) -> str:
        if not url:
            raise InvalidArgument("url", "url is required: the https URL deliveries are POSTed to")
        try:
            await self._destinations.check(url)
        except DestinationRefused as refused:
            raise InvalidArgument("url", f"url {echo(url)} is refused: {refused}", WEBHOOK_URL_REFUSED) from None
        return url

    def _seal(
        self, project_id: uuid.UUID, webhook_id: uuid.UUID, version: int, secret: str
    ) -> tuple[bytes, bytes, str]:
        sealed = self._keys().seal(project_id, _sealed_name(webhook_id), version, secret)
        return sealed.ciphertext, sealed.nonce, sealed.key_id

    def _open(self, row: asyncpg.Record, version: int, prefix: str) -> str:
        sealed = Sealed(row[f"{prefix}_ciphertext"], row[f"{prefix}_nonce"], row[f"{prefix}_key_id"])
        name = _sealed_name(row["webhook_id"])
        try:
            return self._keys().open(row["project_id"], name, version, sealed)
        except SealedUnderOtherKey as other:
            raise CredentialUnreadable(
                "CREDENTIAL_KEY_MISMATCH",
                f"webhook {row['webhook_id']}'s secret was sealed under key {other.key_id}, which this control plane"
                " was not given: rotate the webhook's secret",
                name,
            ) from None
        except SealBroken:
            raise CredentialUnreadable(
                "CREDENTIAL_CORRUPT", f"webhook {row['webhook_id']}'s secret does not open: rotate it", name
            ) from None

    def signing_secrets(self, row: asyncpg.Record, now: datetime) -> list[str]:
        """The secrets a delivery is signed with now: the current one, and the previous one while the
        last rotation's overlap lasts."""
        found = [self._open(row, row["secret_version"], "secret")]
        expires = row["previous_expires_at"]
        if row["previous_ciphertext"] is not None and expires is not None and expires > now:
            found.append(self._open(row, row["secret_version"] - 1, "previous"))
        return found

    async def create(
        self, project_id: uuid.UUID, url: str, types: Sequence[str], description: str, request_id: str
    ) -> tuple[WebhookRecord, str]:
        """A new webhook and its secret (a retried `request_id`: the same ones)."""
        self._keys()
        chosen = event_types(types)
        if request_id:
            validation.client_id("request_id", request_id)
            if (found := await store.webhooks.by_request_id(self._pool, project_id, request_id)) is not None:
                return self._same_request(found, url, chosen, description)
        await self._checked_url(url)
        webhook_id = uuid.uuid4()
        secret = new_secret()
        row = await store.webhooks.insert(
            self._pool,
            webhook_id,
            project_id,
            url,
            description,
            chosen,
            request_id or None,
            self._seal(project_id, webhook_id, 1, secret),
        )
        if row is None:  # a concurrent create with the same request_id won
            found = await store.webhooks.by_request_id(self._pool, project_id, request_id)
            assert found is not None
            return self._same_request(found, url, chosen, description)
        log.info("webhook_created", webhook_id=str(webhook_id), project_id=str(project_id), event_types=chosen)
        return WebhookRecord.from_row(row), secret

    def _same_request(
        self, row: asyncpg.Record, url: str, types: tuple[str, ...], description: str
    ) -> tuple[WebhookRecord, str]:
        record = WebhookRecord.from_row(row)
        if (record.url, record.event_types, record.description) != (url, types, description):
            raise RequestIdReused(f"request_id {row['request_id']} was used for another webhook ({record.webhook_id})")
        if record.secret_version != 1:
            raise RequestIdReused(
                f"request_id {row['request_id']} made webhook {record.webhook_id}, whose secret was rotated since"
            )
        return record, self._open(row, 1, "secret")

    async def get(self, project_id: uuid.UUID, webhook_id: str) -> WebhookRecord:
        return WebhookRecord.from_row(await self._row(project_id, webhook_id))

    async def _row(self, project_id: uuid.UUID, webhook_id: str) -> asyncpg.Record:
        row = await store.webhooks.get(self._pool, project_id, _uuid("webhook_id", webhook_id))
        if row is None:
            raise WebhookNotFound(webhook_id)
        return row

    async def list_webhooks(
        self, project_id: uuid.UUID, page_size: int, page_token: str
    ) -> tuple[list[WebhookRecord], str]:
        size = validation.page_size(page_size, default=50, maximum=500)
        scope = f"webhooks/{project_id}"
        after = None
        if page_token:
            cursor = self._page_tokens.read(scope, page_token)
            try:
                after = (datetime.fromisoformat(str(cursor["at"])), uuid.UUID(str(cursor["id"])))
            except (KeyError, ValueError):
                raise validation.page_token_invalid() from None
        rows = await store.webhooks.page(self._pool, project_id, after, size + 1)
        found = [WebhookRecord.from_row(r) for r in rows[:size]]
        token = ""
        if len(rows) > size:
            token = self._page_tokens.issue(
                scope, {"at": found[-1].created_at.isoformat(), "id": str(found[-1].webhook_id)}
            )
        return found, token

    async def update(
        self,
        project_id: uuid.UUID,
        webhook_id: str,
        url: str | None,
        types: Sequence[str] | None,
        description: str | None,
        enabled: bool | None,
    ) -> WebhookRecord:
        self._keys()
        if url is not None:
            await self._checked_url(url)
        chosen = event_types(types, "event_types.event_types") if types is not None else None
        row = await store.webhooks.update(
            self._pool, project_id, _uuid("webhook_id", webhook_id), url, description, chosen, enabled
        )
        if row is None:
            raise WebhookNotFound(webhook_id)
        log.info("webhook_updated", webhook_id=webhook_id, project_id=str(project_id))
        return WebhookRecord.from_row(row)

    async def delete(self, project_id: uuid.UUID, webhook_id: str) -> None:
        if not await store.webhooks.delete(self._pool, project_id, _uuid("webhook_id", webhook_id)):
            raise WebhookNotFound(webhook_id)
        log.info("webhook_deleted", webhook_id=webhook_id, project_id=str(project_id))

    async def rotate(self, project_id: uuid.UUID, webhook_id: str, overlap_seconds: int) -> tuple[WebhookRecord, str]:
        """A new current secret; the one it replaces signs too for the overlap (0: a day)."""
        self._keys()
        row = await self._row(project_id, webhook_id)
        overlap = timedelta(seconds=overlap_seconds) if overlap_seconds else DEFAULT_OVERLAP
        version = row["secret_version"] + 1
        secret = new_secret()
        sealed = self._seal(project_id, row["webhook_id"], version, secret)
        rotated = await store.webhooks.rotate(
            self._pool, project_id, row["webhook_id"], version, sealed, datetime.now(UTC) + overlap
        )
        if rotated is None:  # rotated (or deleted) concurrently
            if await store.webhooks.get(self._pool, project_id, row["webhook_id"]) is None:
                raise WebhookNotFound(webhook_id)
            raise DatabaseConflict()
        log.info("webhook_secret_rotated", webhook_id=webhook_id, version=version, overlap_s=overlap.total_seconds())
        return WebhookRecord.from_row(rotated), secret

    async def deliveries(
        self,
        project_id: uuid.UUID,
        webhook_id: str,
        state: str | None,
        event_type: str | None,
        page_size: int,
        page_token: str,
    ) -> tuple[list[DeliveryRecord], str]:
        """A page of the webhook's deliveries, newest first, with their latest attempts."""
        row = await self._row(project_id, webhook_id)
        size = validation.page_size(page_size, default=50, maximum=500)
        scope = f"webhook-deliveries/{row['webhook_id']}/{state}/{event_type}"
        before = None
        if page_token:
            cursor = self._page_tokens.read(scope, page_token)
            try:
                before = (datetime.fromisoformat(str(cursor["at"])), uuid.UUID(str(cursor["id"])))
            except (KeyError, ValueError):
                raise validation.page_token_invalid() from None
        rows = await store.webhook_deliveries.page(self._pool, row["webhook_id"], state, event_type, before, size + 1)
        found = await self._with_log(rows[:size])
        token = ""
        if len(rows) > size:
            token = self._page_tokens.issue(
                scope, {"at": found[-1].created_at.isoformat(), "id": str(found[-1].delivery_id)}
            )
        return found, token

    async def _with_log(self, rows: Sequence[asyncpg.Record]) -> list[DeliveryRecord]:
        attempts: dict[uuid.UUID, list[AttemptRecord]] = {}
        for a in await store.webhook_attempts.of(self._pool, [r["delivery_id"] for r in rows]):
            attempts.setdefault(a["delivery_id"], []).append(
                AttemptRecord(
                    a["attempt"], a["started_at"], a["finished_at"], a["status_code"], a["error"], a["response_excerpt"]
                )
            )
        return [DeliveryRecord.from_row(r, attempts.get(r["delivery_id"], ())) for r in rows]

    async def redeliver(self, project_id: uuid.UUID, webhook_id: str, delivery_id: str) -> DeliveryRecord:
        """Send the delivery again: a new round of attempts, due now, under the same webhook-id."""
        row = await self._row(project_id, webhook_id)
        redelivered = await store.webhook_deliveries.redeliver(
            self._pool, row["webhook_id"], _uuid("delivery_id", delivery_id)
        )
        if redelivered is None:
            raise WebhookDeliveryNotFound(webhook_id, delivery_id)
        log.info("webhook_redelivery", webhook_id=webhook_id, delivery_id=delivery_id)
        [found] = await self._with_log([redelivered])
        return found
