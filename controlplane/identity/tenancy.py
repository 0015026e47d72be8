"""Tenancy: a call that names a session reaches it only if the session is the caller's project's.

The edge (`controlplane.edge`) asks `Tenancy.scope` about every request of a
client-facing service once it is decoded and bounded, before its handler sees
it (for a streamed request, its first message): every request with a
`session_id`, so every RPC naming a session, today's and tomorrow's, is scoped
in this one place. Another project's session answers exactly as an unknown id
does: `SessionNotFound`, the same message, after the same one query (only a
session the caller's own project has reached is remembered, so neither kind of
refusal is ever answered from memory).
"""

from __future__ import annotations

import uuid
from collections import OrderedDict

import asyncpg

from controlplane import store
from controlplane.errors import SessionNotFound
from controlplane.identity import callers
from controlplane.identity.callers import Caller


class Tenancy:
    def __init__(self, pool: asyncpg.Pool, max_entries: int = 100_000) -> None:
        self._pool = pool
        self._max_entries = max_entries
        # (project, session) pairs seen to belong together: a session never changes project.
        self._owned: OrderedDict[tuple[uuid.UUID, uuid.UUID], None] = OrderedDict()

    async def scope(self, request: object) -> None:
        """SessionNotFound unless the session `request` names, if any, is the current caller's project's."""
        session_id = getattr(request, "session_id", None)
        if session_id:
            await self.check(callers.current(), session_id)

    async def check(self, caller: Caller, session_id: object) -> None:
        """SessionNotFound unless `session_id` (when it is a session id at all) is the caller's
        project's. A malformed id passes: the edge refuses it with INVALID_ARGUMENT."""
        if not isinstance(session_id, str) or not session_id or len(session_id) > 64:
            return
        try:
            session = uuid.UUID(session_id)
        except ValueError:
            return
        pair = (caller.project_id, session)
        if pair in self._owned:
            self._owned.move_to_end(pair)
            return
        if await store.sessions.project_of(self._pool, session) != caller.project_id:
            raise SessionNotFound(str(session))
        self._owned[pair] = None
        while len(self._owned) > self._max_entries:
            self._owned.popitem(last=False)
