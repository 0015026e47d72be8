"""Memory stores as a user drives them (the real `astrabox` CLI, a real stack: control plane on
PostgreSQL, data-plane agent, the real Claude Code CLI against the offline model, whose `run:`
script has Bash read and write the memory directory): what one session's turn writes is read by
the next session's turn, the store keeps every version attributed to the session that wrote it,
a read-only attachment changes nothing, and a restore brings the store back."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime

import pytest

from astrabox.client import AstraBoxClient
from tests.e2e.test_run_with_agent import ASTRABOX, astrabox
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

NOTES = "/home/agent/memory/notes"


def _session_id(stdout: str) -> str:
    first = stdout.splitlines()[0]
    assert first.startswith("session "), stdout
    return first.split()[1]


async def test_memory_written_by_one_session_is_read_by_the_next(stack: Stack, client: AstraBoxClient) -> None:
    created = astrabox(stack, "memory", "create", "notes", "--description", "what sessions learned")
    assert created.returncode == 0, created.stderr
    seeded = astrabox(stack, "memory", "write", "notes", "seed.md", "--text", "seeded-by-the-api\n")
    assert seeded.stdout == "seed.md v1\n", seeded.stderr

    # Session one (read-write): the seed is there before its first turn; it writes a new document.
    first = astrabox(
        stack,
        "run",
        "--memory",
        "notes:read-write",
        f"run: cat {NOTES}/seed.md && echo learned-in-session-one > {NOTES}/fact.md",
    )
    assert first.returncode == 0, first.stderr
    assert "seeded-by-the-api" in first.stdout
    assert "● memory notes: fact.md v1" in first.stdout  # the turn's write-back, as `astrabox run` shows it
    writer = _session_id(first.stdout)
    fact = await client.memory.read("notes", "fact.md")
    assert (fact.content, fact.version, fact.writer, fact.session_id) == (
        "learned-in-session-one\n",
        1,
        "session",
        writer,
    )
    assert fact.turn_id
    after_first = datetime.now(UTC)

    # Session two (read-only): reads it; what it changes in the directory is never written back.
    second = astrabox(
        stack,
        "run",
        "--memory",
        "notes",
        f"run: cat {NOTES}/fact.md; (echo overwritten > {NOTES}/fact.md) 2>&1; echo extra > {NOTES}/extra.md; true",
    )
    assert second.returncode == 0, second.stderr
    assert "learned-in-session-one" in second.stdout
    # Its files are read-only in the sandbox (mode 0444; their owner could change that, and even
    # then nothing it does reaches the store).
    assert f"{NOTES}/fact.md: Permission denied" in second.stdout
    assert (await client.memory.read("notes", "fact.md")).content == "learned-in-session-one\n"
    assert [d.path async for d in client.memory.documents("notes")] == ["fact.md", "seed.md"]

    # Session three (read-write) changes it: the store keeps both versions, with their sessions.
    third = astrabox(
        stack,
        "run",
        "--memory",
        "notes:read-write",
        f"run: cat {NOTES}/fact.md && echo refined-in-session-three > {NOTES}/fact.md && rm {NOTES}/seed.md",
    )
    assert third.returncode == 0, third.stderr
    assert "learned-in-session-one" in third.stdout and "overwritten" not in third.stdout
    rewriter = _session_id(third.stdout)
    versions = [v async for v in client.memory.versions("notes", "fact.md")]
    assert [(v.version, v.session_id) for v in versions] == [(2, rewriter), (1, writer)]
    assert (await client.memory.read("notes", "fact.md", version=1)).content == "learned-in-session-one\n"
    assert (await client.memory.read("notes", "fact.md")).content == "refined-in-session-three\n"
    assert [d.path async for d in client.memory.documents("notes")] == ["fact.md"]
    history = astrabox(stack, "memory", "history", "notes")
    assert history.returncode == 0, history.stderr
    assert "fact.md  v2" in history.stdout and f"session {rewriter}" in history.stdout

    # A restore to between sessions one and three writes new versions equal to then.
    restored = astrabox(stack, "memory", "restore", "notes", "--at", after_first.isoformat())
    assert restored.returncode == 0, restored.stderr
    assert "2 versions written" in restored.stdout
    assert (await client.memory.read("notes", "fact.md")).content == "learned-in-session-one\n"
    assert (await client.memory.read("notes", "seed.md")).content == "seeded-by-the-api\n"
    assert [v.version async for v in client.memory.versions("notes", "fact.md")] == [3, 2, 1]


async def test_links_and_special_files_in_memory_are_never_followed_or_written_back(
    stack: Stack, client: AstraBoxClient
) -> None:
    await client.memory.create("hostile")
    done = astrabox(
        stack,
        "run",
        "--memory",
        "hostile:read-write",
        "run: cd /home/agent/memory/hostile && ln -s /etc/passwd passwd.md && mkfifo pipe.md"
        " && mkdir -p deep && ln -s /etc deep/etc && printf 'bad\\x00nul' > nul.md && echo fine > ok.md"
        " && ls -l /home/agent/memory/hostile",
    )
    assert done.returncode == 0, done.stderr
    session_id = _session_id(done.stdout)
    # Only the regular file with text is a document; nothing of /etc reached the store.
    assert [d.path async for d in client.memory.documents("hostile")] == ["ok.md"]
    events = [e async for e in client.iter_events(session_id)]
    [synced] = [e.memory_synced for e in events if e.WhichOneof("payload") == "memory_synced"]
    assert [w.path for w in synced.written] == ["ok.md"]
    refused = "\n".join(synced.refused)
    for name in ("passwd.md", "pipe.md", "deep/etc", "nul.md: a memory document is UTF-8 text without NUL"):
        assert name in refused, refused
    assert "root:" not in refused


async def test_the_memory_commands_read_write_and_refuse_in_one_line(stack: Stack) -> None:
    assert astrabox(stack, "memory", "create", "cli").returncode == 0
    written = subprocess.run(
        [*ASTRABOX, "memory", "--target", stack.address, "write", "cli", "from/stdin.md"],
        input="piped text\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert written.stdout == "from/stdin.md v1\n", written.stderr
    assert astrabox(stack, "memory", "read", "cli", "from/stdin.md").stdout == "piped text\n"
    assert astrabox(stack, "memory", "docs", "cli").stdout.startswith("from/stdin.md  v1  11 bytes")
    listed = astrabox(stack, "memory", "list").stdout
    assert listed.startswith("cli") and "1 documents" in listed
    for args, reason in (
        (("write", "cli", "../up.md", "--text", "x"), "INVALID_ARGUMENT INVALID_MEMORY_PATH"),
        (
            ("write", "cli", "from/stdin.md", "--text", "x", "--expected-version", "7"),
            "ABORTED MEMORY_VERSION_CONFLICT",
        ),
        (("read", "cli", "missing.md"), "NOT_FOUND MEMORY_DOCUMENT_NOT_FOUND"),
        (("show", "nope"), "NOT_FOUND MEMORY_STORE_NOT_FOUND"),
    ):
        refused = astrabox(stack, "memory", *args)
        assert (refused.returncode, refused.stdout) == (1, ""), args
        assert refused.stderr.startswith(f"astrabox: {reason}: ") and len(refused.stderr.splitlines()) == 1, (
            refused.stderr
        )
