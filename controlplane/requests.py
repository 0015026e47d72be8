"""Idempotency of session commands: a request id has one effect, and one payload."""

from __future__ import annotations

import hashlib
import json

from controlplane import validation
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
    inserted = await tx.conn.fetchval(
        "INSERT INTO session_requests (session_id, request_id, kind, fingerprint) VALUES ($1, $2, $3, $4)"
        " ON CONFLICT DO NOTHING RETURNING true",
        session_id,
        request_id,
        kind,
        print_,
    )
    if inserted:
        return True
    previous = await tx.conn.fetchval(
        "SELECT fingerprint FROM session_requests WHERE session_id = $1 AND request_id = $2", session_id, request_id
    )
    if previous != print_:
        raise RequestIdReused(
            f"request_id {validation.echo(request_id)} was already used for a different request on this session",
            {"request_id": request_id, "session_id": session_id},
        )
    return False
