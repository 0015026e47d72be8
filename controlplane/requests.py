"""Idempotency of session commands: a request id has one effect, and one payload."""

from __future__ import annotations

import hashlib
import json

from controlplane import store, validation
from controlplane.errors import RequestIdReused
from controlplane.journal import JournalTransaction


def fingerprint(**fields: object) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


async def first_time(tx: JournalTransaction, session_id: str, request_id: str, kind: str, **payload: object) -> bool:
    """Record `request_id` for this session; False when it was seen before with
    the same payload (the caller then answers without a second effect).

    An empty request id is not recorded: every such call takes effect."""
    if not request_id:
        return True
    validation.client_id("request_id", request_id)
    print_ = fingerprint(kind=kind, **payload)
    if await store.session_requests.insert(tx.conn, session_id, request_id, kind, print_):
        return True
    previous = await store.session_requests.fingerprint_of(tx.conn, session_id, request_id)
    if previous != print_:
        raise RequestIdReused(
            f"request_id {validation.echo(request_id)} was already used for a different request on this session",
            {"request_id": request_id, "session_id": session_id},
        )
    return False
