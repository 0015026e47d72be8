"""What a session has of its memory stores: the attachments checked when it is created, the documents
its sandbox gets at each start (`mounts`), and what its turns write back (`sync`).

A turn writes back only to the stores the session attached READ_WRITE, each change attributed to
the session and the turn; whatever the agent sends for another store is dropped. The agent read the
changes from a directory the sandbox controls, so every path and content is checked again here as
hostile input. A change over a version the session never saw (another writer's, since its copy was
taken) is kept: the session's version becomes the latest and names the one it replaced
(`conflicting_version`); both stay in the history and MEMORY_SYNCED reports it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import asyncpg

from astrabox.agents.v1 import agent_pb2
from astrabox.memory.v1 import memory_service_pb2 as pb
from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane import named_definitions, store, validation
from controlplane.errors import (
    InvalidArgument,
    MemoryDocumentLimitReached,
    MemoryDocumentTooLarge,
    MemoryStoreFull,
    MemoryStoreNotFound,
)
from controlplane.identity.audit import recorded
from controlplane.memory import paths
from controlplane.memory.stores import Attachment, Limits, put
from controlplane.store.memory_versions import NewVersion

# With Limits.store_bytes, what a session's start carries of its stores stays well inside a message.
MAX_ATTACHMENTS = 4
SESSION_WRITER = "session"
DEFAULT_LIMITS = Limits()
# What of a sync's refusals is journaled.
_MAX_REFUSED = 32
_MAX_REFUSED_TEXT = 512
# The most changes of one store one turn writes (a store holds at most 500 documents).
_MAX_CHANGES = 1000
# Where the agent puts a store's documents in the sandbox (dataplane_agent.memory.MEMORY_DIR).
SANDBOX_DIR = "/home/agent/memory"


def with_prompt(config: agent_pb2.AgentSpec, mounts: Sequence[runner_pb2.MemoryMount]) -> agent_pb2.AgentSpec:
    """The session's configuration as its engine gets it: the system prompt tells the model where
    its memory stores are and which it may change (the stored configuration is left as it is)."""
    if not mounts:
        return config
    lines = [
        f"- {SANDBOX_DIR}/{m.name}/ ({'read-write: what you change there is saved when your turn ends' if m.read_write else 'read-only: changes are not saved'})"
        for m in mounts
    ]
    note = (
        "\n\nYou have memory that persists across sessions, as text files in these directories:\n"
        + "\n".join(lines)
        + "\nRead them before you start; write what you learn that a later session should know."
    )
    given = agent_pb2.AgentSpec()
    given.CopyFrom(config)
    if given.system_prompt.WhichOneof("prompt") == "replace":
        given.system_prompt.replace += note
    else:
        given.system_prompt.append = given.system_prompt.append + note
    return given


async def resolve(
    conn: asyncpg.Connection, project_id: uuid.UUID, attachments: Sequence[pb.MemoryAttachment]
) -> list[Attachment]:
    """A new session's attachments, checked and found in its project."""
    if len(attachments) > MAX_ATTACHMENTS:
        raise InvalidArgument("memory", f"a session attaches at most {MAX_ATTACHMENTS} memory stores")
    found: dict[uuid.UUID, Attachment] = {}
    for attachment in attachments:
        if attachment.mode not in (pb.MEMORY_MODE_READ_ONLY, pb.MEMORY_MODE_READ_WRITE):
            raise InvalidArgument(
                "memory.mode",
                f"memory store {validation.echo(attachment.store)}: mode must be READ_ONLY or READ_WRITE",
            )
        found_store = named_definitions.ref("memory store", attachment.store, "memory.store")
        row = await store.memory_stores.find(conn, project_id, found_store)
        if row is None:
            raise MemoryStoreNotFound(attachment.store)
        if row["store_id"] in found:
            raise InvalidArgument("memory.store", f"memory store {row['name']} is attached twice")
        found[row["store_id"]] = Attachment(row["store_id"], row["name"], attachment.mode == pb.MEMORY_MODE_READ_WRITE)
    return list(found.values())


async def mounts(conn: asyncpg.Connection, session_id: str) -> list[runner_pb2.MemoryMount]:
    """What the session's sandbox gets of its stores: their documents now."""
    mounts = []
    for attached in await store.memory_stores.attached(conn, session_id):
        documents = await store.memory_versions.state(conn, attached["store_id"], None, content=True)
        mounts.append(
            runner_pb2.MemoryMount(
                store_id=str(attached["store_id"]),
                name=attached["name"],
                read_write=attached["read_write"],
                files=[
                    runner_pb2.MemoryFile(path=d["path"], content=d["content"].encode(), version=d["version"])
                    for d in documents
                ],
            )
        )
    return mounts


async def sync(
    conn: asyncpg.Connection,
    session_id: str,
    turn_id: str,
    changes: runner_pb2.MemoryChanges,
    limits: Limits = DEFAULT_LIMITS,
) -> list[dict[str, Any]]:
    """Write a turn's changes to the session's READ_WRITE stores; one MEMORY_SYNCED payload per
    store. Changes to a store the session did not attach READ_WRITE are dropped, never written."""
    writable = {str(r["store_id"]): r for r in await store.memory_stores.attached(conn, session_id) if r["read_write"]}
    payloads = []
    seen: set[str] = set()
    # In one order, so two turns writing the same stores take their locks alike.
    for changed in sorted(changes.stores, key=lambda c: c.store_id):
        if changed.store_id in seen or len(seen) >= MAX_ATTACHMENTS:
            continue  # a store named twice, or more than a session attaches: a buggy or hostile agent
        seen.add(changed.store_id)
        attached = writable.get(changed.store_id)
        # The agent's words, read from a directory the sandbox controls: escaped (no NUL, control or
        # format character reaches the journal or a terminal) and bounded.
        refused = [recorded(text, _MAX_REFUSED_TEXT) for text in changed.refused[:_MAX_REFUSED]]
        if attached is None or await store.memory_stores.lock_by_id(conn, attached["store_id"]) is None:
            dropped: dict[str, Any] = {
                "store_id": recorded(changed.store_id, 64),
                "store": "",
                "written": [],
                "refused": ["the store is not attached read-write, or was deleted: nothing written"],
            }
            payloads.append(dropped)
            continue
        written: list[dict[str, Any]] = []
        if len(changed.changes) > _MAX_CHANGES:
            refused.append(f"{len(changed.changes)} changes: only the first {_MAX_CHANGES} were read")
        for change in changed.changes[:_MAX_CHANGES]:
            outcome = await _sync_one(conn, attached["store_id"], session_id, turn_id, change, limits)
            if isinstance(outcome, str):
                if len(refused) < _MAX_REFUSED:
                    refused.append(outcome[:_MAX_REFUSED_TEXT])
            elif outcome is not None:
                written.append(outcome)
        payloads.append(
            {
                "store_id": str(attached["store_id"]),
                "store": attached["name"],
                "written": written,
                "refused": refused,
            }
        )
    return payloads


async def _sync_one(
    conn: asyncpg.Connection,
    store_id: uuid.UUID,
    session_id: str,
    turn_id: str,
    change: runner_pb2.MemoryFileChange,
    limits: Limits,
) -> dict[str, Any] | str | None:
    """The version a change wrote (as MemorySyncedDocument), why it was refused, or None (same)."""
    why = paths.problem(change.path)
    if why:
        return f"{validation.echo(change.path)}: not a document path ({why})"
    try:
        text = None if change.deleted else paths.text(change.content, limits.document_bytes)
    except MemoryDocumentTooLarge as error:
        return f"{change.path}: {error}"
    latest = await store.memory_versions.latest(conn, store_id, change.path)
    conflicting = 0
    if latest is not None and latest["version"] != change.base_version:
        mine = latest["session_id"] is not None and str(latest["session_id"]) == session_id
        if not mine and not (latest["deleted"] and change.base_version == 0):
            conflicting = latest["version"]
    if text is None and (latest is None or latest["deleted"]):
        return None
    new = NewVersion(
        change.path,
        text or "",
        text is None,
        paths.sha256(text) if text is not None else "",
        SESSION_WRITER,
        session_id=session_id,
        turn_id=turn_id,
        conflicting_version=conflicting,
    )
    try:
        written = await put(conn, store_id, latest, new, limits)
    except (MemoryDocumentLimitReached, MemoryStoreFull) as error:
        return f"{change.path}: {error}"
    if written is latest:
        return None
    return {
        "path": change.path,
        "version": written["version"],
        "deleted": written["deleted"],
        "conflict": bool(conflicting),
        "conflicting_version": conflicting,
    }
