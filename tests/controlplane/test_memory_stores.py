"""Memory stores through the real SDK against an in-process control plane on real PostgreSQL:
versions and their history, optimistic concurrency, reads at a version and a time, restore to a
point in time, hostile paths and sizes refused with their reasons, another project's stores
invisible; and sessions: what their start carries, what their turns write back (attributed,
conflicts kept, read-only attachments never written). tests/e2e/test_memory_end_to_end.py runs a
real agent and the real CLI."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import grpc
import pytest

from astrabox.agents.v1 import agent_pb2
from astrabox.client import AstraBoxClient
from astrabox.errors import AstraBoxError
from astrabox.memory.v1 import memory_service_pb2 as memory_pb2
from astrabox.memory_stores import attach
from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from astrabox.sessionkernel.v1 import events_pb2, session_pb2
from controlplane.memory import paths
from controlplane.server import RunningControlPlane
from tests.controlplane.conftest import Plane
from tests.controlplane.test_conversation import commands
from tests.controlplane.test_quotas import running, team  # noqa: F401  (the fixture)


async def refused(call) -> AstraBoxError:  # type: ignore[no-untyped-def]
    with pytest.raises(AstraBoxError) as caught:
        await call
    return caught.value


async def test_documents_keep_every_version_and_restore_writes_new_ones(running: RunningControlPlane) -> None:
    async with AstraBoxClient.connect(running.address) as client:
        store = await client.memory.create("notes", description="what we learned")
        first = await client.memory.write("notes", "a.md", "one")
        assert (first.version, first.writer.startswith("key:")) == (1, True)
        # The same content again writes nothing (a retry is harmless).
        assert (await client.memory.write("notes", "a.md", "one")).version == 1
        await asyncio.sleep(0.05)
        between = datetime.now(UTC)
        await asyncio.sleep(0.05)
        second = await client.memory.write("notes", "a.md", "two", expected_version=1)
        await client.memory.write("notes", "dir/b.md", "bee")
        assert second.version == 2
        stale = await refused(client.memory.write("notes", "a.md", "three", expected_version=1))
        assert (stale.code, stale.reason) == (grpc.StatusCode.ABORTED, "MEMORY_VERSION_CONFLICT")
        assert stale.metadata["latest_version"] == "2"
        assert (await refused(client.memory.write("notes", "new.md", "x", expected_version=3))).reason == (
            "MEMORY_VERSION_CONFLICT"
        )
        # Reads: the latest, a version, the one latest at a time.
        assert (await client.memory.read("notes", "a.md")).content == "two"
        assert (await client.memory.read("notes", "a.md", version=1)).content == "one"
        assert (await client.memory.read("notes", "a.md", at=between)).content == "one"
        missing = await refused(client.memory.read("notes", "dir/b.md", at=between))
        assert (missing.code, missing.reason) == (grpc.StatusCode.NOT_FOUND, "MEMORY_DOCUMENT_NOT_FOUND")
        assert [d.path async for d in client.memory.documents("notes", at=between)] == ["a.md"]
        assert [d.path async for d in client.memory.documents("notes", page_size=1)] == ["a.md", "dir/b.md"]
        # Restore: new versions equal to the state then; history is kept.
        restored, written = await client.memory.restore("notes", between, request_id="r1")
        assert sorted((v.path, v.version, v.deleted) for v in written) == [("a.md", 3, False), ("dir/b.md", 2, True)]
        assert all(v.restored_from_time is not None for v in written)
        assert restored.document_count == 1
        assert (await client.memory.read("notes", "a.md")).content == "one"
        assert (await refused(client.memory.read("notes", "dir/b.md"))).reason == "MEMORY_DOCUMENT_NOT_FOUND"
        assert (await client.memory.read("notes", "dir/b.md", version=1)).content == "bee"
        # Its retry writes nothing more.
        _, again = await client.memory.restore("notes", between, request_id="r1")
        assert [(v.path, v.version) for v in again] == [
            (v.path, v.version) for v in sorted(written, key=lambda v: v.path)
        ]
        history = [(v.path, v.version) async for v in client.memory.versions("notes", page_size=2)]
        assert sorted(history) == [("a.md", 1), ("a.md", 2), ("a.md", 3), ("dir/b.md", 1), ("dir/b.md", 2)]
        assert [v.version async for v in client.memory.versions("notes", "a.md")] == [3, 2, 1]
        # Deleting a document, then the store.
        assert (await client.memory.delete_document("notes", "a.md")).deleted
        assert (await client.memory.get("notes")).document_count == 0
        assert (await client.memory.delete("notes")).store_id == store.store_id
        assert (await refused(client.memory.get("notes"))).reason == "MEMORY_STORE_NOT_FOUND"
        # Every change is in the audit trail, naming the store.
        audit = await client.admin.list_audit_records(page_size=100)
        methods = [(r.method.rsplit("/", 1)[-1], dict(r.details).get("store", "")) for r in audit.records]
        assert ("RestoreMemoryStore", "notes") in methods and ("DeleteMemoryStore", "notes") in methods
        assert methods.count(("WriteMemoryDocument", "notes")) == 6  # refused ones too


HOSTILE_PATHS = [
    "",
    "/etc/passwd",
    "../escape",
    "a/../../b",
    "a/./b",
    "a//b",
    "a/",
    ".",
    "..",
    "a\\b",
    "a\x00b",
    "line\nbreak",
    "tab\there",
    "esc\x1b[31m",
    "del\x7f",
    "c1\x85",
    "rtl\u202eexe.md",
    "zero\u200bwidth",
    "sep\u2028line",
    ".astrabox-tmp",
    "d/.astrabox",
    "x" * 257,
    "y" * 129 + "/z",
    "/".join(["d"] * 17),
    "\udcff",
]


@pytest.mark.parametrize("path", HOSTILE_PATHS)
def test_hostile_paths_are_not_document_paths(path: str) -> None:
    assert paths.problem(path), path


def test_ordinary_paths_are_document_paths() -> None:
    for path in ["a.md", "notes/2026/décembre.md", "x" * 128, "/".join(["d"] * 16), "..hidden", "a..b", "日本.txt"]:
        assert paths.problem(path) == "", path


async def test_hostile_paths_sizes_and_counts_are_refused_with_their_reasons(running: RunningControlPlane) -> None:
    async with AstraBoxClient.connect(running.address) as client:
        await client.memory.create("bounds")
        for path in ["../escape", "/abs", "a\x00b", "x" * 300, "new\nline"]:
            error = await refused(client.memory.write("bounds", path, "x"))
            assert (error.code, error.reason, error.metadata["field"]) == (
                grpc.StatusCode.INVALID_ARGUMENT,
                "INVALID_MEMORY_PATH",
                "path",
            ), path
            assert len(error.message) < 600
        big = await refused(client.memory.write("bounds", "big.md", "x" * (256 * 1024 + 1)))
        assert (big.code, big.reason, big.metadata["limit"]) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "MEMORY_DOCUMENT_TOO_LARGE",
            str(256 * 1024),
        )
        assert (await client.memory.write("bounds", "fits.md", "x" * 256 * 1024)).size_bytes == 256 * 1024
        for name in ["Bad", "a" * 65, "-x", "6a1f7a3e-4f8b-4c3c-9d56-0c4c5f1e2a3b"]:
            assert (await refused(client.memory.create(name))).reason == "INVALID_ARGUMENT", name
        assert (await refused(client.memory.create("bounds"))).reason == "MEMORY_STORE_ALREADY_EXISTS"
        future = datetime(2999, 1, 1, tzinfo=UTC)
        assert (await refused(client.memory.restore("bounds", future))).reason == "INVALID_ARGUMENT"


async def test_the_document_and_store_limits(plane: Plane, running: RunningControlPlane) -> None:
    from controlplane.errors import MemoryDocumentLimitReached, MemoryStoreFull, MemoryStoreLimitReached
    from controlplane.memory.stores import Limits, MemoryStores
    from controlplane.page_tokens import PageTokens

    limits = Limits(per_project=2, documents_per_store=2, store_bytes=10)
    stores = MemoryStores(plane.pool, PageTokens(b"k" * 32), limits)
    await stores.create(plane.project_id, "r1", "one", "")
    await stores.create(plane.project_id, "r2", "two", "")
    with pytest.raises(MemoryStoreLimitReached):
        await stores.create(plane.project_id, "r3", "three", "")
    await stores.write(plane.project_id, "one", "a", "aaaa", None, "t")
    await stores.write(plane.project_id, "one", "b", "bbbb", None, "t")
    with pytest.raises(MemoryDocumentLimitReached):
        await stores.write(plane.project_id, "one", "c", "c", None, "t")
    # Replacing a document counts its new size instead of its old one.
    await stores.write(plane.project_id, "one", "b", "bbbbbb", None, "t")
    with pytest.raises(MemoryStoreFull) as full:
        await stores.write(plane.project_id, "one", "b", "bbbbbbb", None, "t")
    assert full.value.metadata == {"limit": "10", "size": "11"}
    # A deleted document frees its place and its bytes.
    await stores.write(plane.project_id, "one", "a", None, None, "t")
    assert (await stores.write(plane.project_id, "one", "c", "cccc", None, "t")).version == 1


async def test_another_projects_stores_are_invisible(running: RunningControlPlane) -> None:
    _, developer, _ = await team(running.address, "memory-team")
    async with AstraBoxClient.connect(running.address, api_key=developer) as theirs:
        await theirs.memory.create("secret-notes")
        await theirs.memory.write("secret-notes", "k.md", "theirs")
    async with AstraBoxClient.connect(running.address) as ours:
        assert [s.name async for s in ours.memory.list()] == []
        for call in (
            ours.memory.get("secret-notes"),
            ours.memory.read("secret-notes", "k.md"),
            ours.memory.write("secret-notes", "k.md", "mine"),
            ours.create_session(memory=[attach("secret-notes", "read-write")]),
        ):
            error = await refused(call)
            assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "MEMORY_STORE_NOT_FOUND")
    async with AstraBoxClient.connect(running.address, api_key=developer) as theirs:
        assert (await theirs.memory.read("secret-notes", "k.md")).content == "theirs"


def _change(path: str, content: str = "", *, base: int = 0, deleted: bool = False) -> runner_pb2.MemoryFileChange:
    return runner_pb2.MemoryFileChange(path=path, content=content.encode(), base_version=base, deleted=deleted)


async def test_a_sessions_turns_write_back_its_read_write_stores_only(
    plane: Plane, running: RunningControlPlane
) -> None:
    async with AstraBoxClient.connect(running.address) as client:
        rw = await client.memory.create("shared")
        ro = await client.memory.create("reference")
        await client.memory.write("shared", "facts.md", "v1")
        await client.memory.write("reference", "rules.md", "read me")
        session = await client.create_session(memory=[attach("shared", "read-write"), attach("reference")])
        unknown = await refused(client.create_session(memory=[attach("shared", "read-write"), attach("shared")]))
        assert unknown.reason == "INVALID_ARGUMENT"
        unspecified = await refused(client.create_session(memory=[{"store": "shared"}]))  # no mode
        assert unspecified.reason == "INVALID_ARGUMENT"
    session_id = session.session_id
    async with AstraBoxClient.connect(running.address) as client:
        [created] = [e.session_created async for e in client.iter_events(session_id) if e.HasField("session_created")]
    assert sorted((a.store, a.mode) for a in created.memory) == sorted(
        [(rw.store_id, memory_pb2.MEMORY_MODE_READ_WRITE), (ro.store_id, memory_pb2.MEMORY_MODE_READ_ONLY)]
    )
    [start] = [c.start_runtime for c in await commands(plane, session_id) if c.HasField("start_runtime")]
    mounts = {m.name: m for m in start.memory}
    assert mounts["shared"].read_write and not mounts["reference"].read_write
    assert [(f.path, f.content, f.version) for f in mounts["shared"].files] == [("facts.md", b"v1", 1)]
    assert "/home/agent/memory/shared/" in start.config.system_prompt.append
    await plane.runtime_started(session_id)
    # Another writer changes facts.md after the session's copy was taken.
    async with AstraBoxClient.connect(running.address) as client:
        await client.memory.write("shared", "facts.md", "someone else's")
    changes = runner_pb2.MemoryChanges(
        stores=[
            runner_pb2.MemoryStoreChanges(
                store_id=rw.store_id,
                changes=[
                    _change("facts.md", "the session's", base=1),
                    _change("new.md", "learned"),
                    _change("../x", "no"),
                ],
                refused=["link.md: not a regular file (a link?), not read", "evil\x00\x1b[31m\u202e name"],
            ),
            runner_pb2.MemoryStoreChanges(store_id=ro.store_id, changes=[_change("rules.md", "changed")]),
        ]
    )
    await plane.report(session_id, "turn-1", memory_changes=changes)
    async with AstraBoxClient.connect(running.address) as client:
        facts = await client.memory.read("shared", "facts.md")
        # Kept both: the session's is the latest, the other writer's stays in the history.
        assert (facts.content, facts.version, facts.conflicting_version) == ("the session's", 3, 2)
        assert (facts.writer, facts.session_id, facts.turn_id) == ("session", session_id, "turn-1")
        assert (await client.memory.read("shared", "facts.md", version=2)).content == "someone else's"
        assert (await client.memory.read("shared", "new.md")).content == "learned"
        assert [d.path async for d in client.memory.documents("shared")] == ["facts.md", "new.md"]
        # The read-only store is never written.
        assert [v.version async for v in client.memory.versions("reference")] == [1]
        assert (await client.memory.read("reference", "rules.md")).content == "read me"
        events = await client.list_events(session_id)
    synced = [e.memory_synced for e in events.events if e.kind == events_pb2.EVENT_KIND_MEMORY_SYNCED]
    by_store = {s.store_id: s for s in synced}
    shared = by_store[rw.store_id]
    assert [(w.path, w.version, w.conflict, w.conflicting_version) for w in shared.written] == [
        ("facts.md", 3, True, 2),
        ("new.md", 1, False, 0),
    ]
    assert any("link.md" in r for r in shared.refused) and any("not a document path" in r for r in shared.refused)
    # What the agent said is kept escaped: no NUL (which the journal's JSON cannot hold) nor escape.
    assert "evil\\x00\\x1b[31m\\u202e name" in shared.refused
    assert by_store[ro.store_id].written == [] and by_store[ro.store_id].refused
    # The session's own later write over its own version is no conflict; removing a file deletes it.
    more = runner_pb2.MemoryChanges(
        stores=[
            runner_pb2.MemoryStoreChanges(
                store_id=rw.store_id, changes=[_change("facts.md", "again", base=1), _change("new.md", deleted=True)]
            )
        ]
    )
    await plane.report(session_id, "turn-2", memory_changes=more)
    async with AstraBoxClient.connect(running.address) as client:
        again = await client.memory.read("shared", "facts.md")
        assert (again.content, again.conflicting_version) == ("again", 0)
        assert (await refused(client.memory.read("shared", "new.md"))).reason == "MEMORY_DOCUMENT_NOT_FOUND"
    # Placed again on another agent (its sandbox lost with the first): the new start carries the
    # stores as they are now, with what the session wrote.
    await plane.pool.execute("UPDATE agents SET lease_expires_at = now() - interval '1 s'")
    await plane.sweeper.sweep()
    await plane.connect_agent("agent-2")
    async with AstraBoxClient.connect(running.address) as client:
        await client.session(session_id).send("again")
    rows = await plane.pool.fetch(
        "SELECT body FROM agent_commands WHERE agent_id = 'agent-2' AND session_id = $1 ORDER BY command_seq",
        session_id,
    )
    [moved] = [
        c.start_runtime for r in rows if (c := runner_pb2.Command.FromString(r["body"])).HasField("start_runtime")
    ]
    placed = {m.name: m for m in moved.memory}
    assert [(f.path, f.content, f.version) for f in placed["shared"].files] == [("facts.md", b"again", 4)]
    assert placed["shared"].read_write and not placed["reference"].read_write


async def test_a_deleted_store_gets_nothing_back_and_its_session_goes_on(
    plane: Plane, running: RunningControlPlane
) -> None:
    async with AstraBoxClient.connect(running.address) as client:
        doomed = await client.memory.create("doomed")
        session = await client.create_session(memory=[attach("doomed", "read-write")])
        await plane.runtime_started(session.session_id)
        await client.memory.delete("doomed")
        changes = runner_pb2.MemoryChanges(
            stores=[runner_pb2.MemoryStoreChanges(store_id=doomed.store_id, changes=[_change("a.md", "x")])]
        )
        await plane.report(session.session_id, "turn-1", memory_changes=changes)
        events = [e async for e in client.iter_events(session.session_id)]
        [synced] = [e.memory_synced for e in events if e.HasField("memory_synced")]
        assert synced.written == [] and "deleted" in synced.refused[0]
        # A store made again under the name is another store: nothing reached it.
        await client.memory.create("doomed")
        assert [d async for d in client.memory.documents("doomed")] == []
        assert (await client.get_session(session.session_id)).state == session_pb2.SESSION_STATE_READY


async def test_an_agents_memory_is_attached_unless_the_session_names_its_own(
    plane: Plane, running: RunningControlPlane
) -> None:
    read_write, read_only = memory_pb2.MEMORY_MODE_READ_WRITE, memory_pb2.MEMORY_MODE_READ_ONLY
    async with AstraBoxClient.connect(running.address) as client:
        notes = await client.memory.create("team-notes")
        rules = await client.memory.create("house-rules")
        spec = agent_pb2.AgentSpec(
            memory=[
                memory_pb2.MemoryAttachment(store="team-notes", mode=read_write),
                memory_pb2.MemoryAttachment(store=rules.store_id, mode=read_only),
            ]
        )
        await client.agents.create("remembers", spec)
        from_agent = await client.create_session(agent="remembers")
        own = await client.create_session(agent="remembers", memory=[attach("house-rules", "read-write")])

        for bad, field in (
            (memory_pb2.MemoryAttachment(store="team-notes"), "spec.memory[0].mode"),
            (memory_pb2.MemoryAttachment(store="../x", mode=read_only), "spec.memory[0].store"),
        ):
            invalid = await refused(client.agents.create("bad-memory", agent_pb2.AgentSpec(memory=[bad])))
            assert (invalid.code, invalid.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_AGENT_SPEC")
            assert invalid.metadata.get("field") == field, invalid
        twice = agent_pb2.AgentSpec(memory=[memory_pb2.MemoryAttachment(store="team-notes", mode=read_only)] * 2)
        assert (await refused(client.agents.create("twice", twice))).reason == "INVALID_AGENT_SPEC"

        await client.agents.create("forgetful", agent_pb2.AgentSpec(memory=[attach("gone-store", "read-only")]))
        gone = await refused(client.create_session(agent="forgetful"))
        assert gone.reason == "MEMORY_STORE_NOT_FOUND"

        async def attached(session_id: str) -> list[tuple[str, int]]:
            created = [e.session_created async for e in client.iter_events(session_id) if e.HasField("session_created")]
            return sorted((a.store, a.mode) for a in created[0].memory)

        assert await attached(from_agent.session_id) == sorted(
            [(notes.store_id, read_write), (rules.store_id, read_only)]
        )
        assert await attached(own.session_id) == [(rules.store_id, read_write)]
    [start] = [c.start_runtime for c in await commands(plane, from_agent.session_id) if c.HasField("start_runtime")]
    assert {m.name: m.read_write for m in start.memory} == {"team-notes": True, "house-rules": False}
