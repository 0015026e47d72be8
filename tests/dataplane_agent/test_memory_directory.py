"""A session's memory directory as the agent writes and reads it, against a real directory the
"sandbox" controls (the hostile side): links planted before the install or at the store's place
make it fail instead of writing through them; a re-install replaces what the sandbox changed and
removes what the store no longer holds; reading back follows no link, skips what is not a regular
file or too large, and sends only what differs from the copy."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.sandboxes.base import Sandbox
from dataplane_agent.turns import memory


def _sandbox(tmp_path: Path) -> Sandbox:
    (tmp_path / "home").mkdir()
    (tmp_path / "workspace").mkdir()
    return Sandbox(
        sandbox_id="sb-1",
        driver="test",
        session_id="s-1",
        workspace=tmp_path / "workspace",
        inner_workspace="/workspace",
        home=tmp_path / "home",
    )


def _mount(name: str = "notes", read_write: bool = True, **files: bytes) -> pb.MemoryMount:
    return pb.MemoryMount(
        store_id=f"id-{name}",
        name=name,
        read_write=read_write,
        files=[pb.MemoryFile(path=p.replace("__", "/"), content=c, version=1) for p, c in files.items()],
    )


async def test_install_writes_the_stores_and_a_turns_changes_are_read_back(tmp_path: Path) -> None:
    sandbox = _sandbox(tmp_path)
    mounted = await memory.install(
        sandbox, [_mount(a_md=b"alpha", dir__b_md=b"beta"), _mount("ref", False, rules_md=b"rules")]
    )
    notes = sandbox.home / "memory" / "notes"
    assert (notes / "a_md").read_bytes() == b"alpha" and (notes / "dir" / "b_md").read_bytes() == b"beta"
    assert (sandbox.home / "memory" / "ref" / "rules_md").stat().st_mode & 0o777 == 0o444
    assert await memory.changes(sandbox, mounted) is None  # nothing changed yet
    # The turn: one file changed, one removed, one added, plus what must never be read.
    (notes / "a_md").write_bytes(b"alpha 2")
    (notes / "dir" / "b_md").unlink()
    (notes / "new_md").write_bytes(b"new")
    (notes / "passwd").symlink_to("/etc/passwd")
    (notes / "dir" / "up").symlink_to(tmp_path)
    os.mkfifo(notes / "pipe")
    (notes / "big").write_bytes(b"x" * (memory.MAX_FILE_BYTES + 1))
    os.close(os.open(bytes(notes / "bad") + b"\xff", os.O_CREAT | os.O_WRONLY, 0o644))  # not UTF-8
    (notes / "esc\x1b[2J").write_bytes(b"terminal")
    (sandbox.home / "memory" / "ref" / "rules_md").chmod(0o644)
    (sandbox.home / "memory" / "ref" / "rules_md").write_bytes(b"changed")  # read-only: never read back
    found = await memory.changes(sandbox, mounted)
    assert found is not None
    [store] = found.stores
    assert store.store_id == "id-notes"
    assert [(c.path, c.content, c.deleted, c.base_version) for c in store.changes] == [
        ("a_md", b"alpha 2", False, 1),
        ("dir/b_md", b"", True, 1),
        ("new_md", b"new", False, 0),
    ]
    refused = "\n".join(store.refused)
    for name in ("passwd", "dir/up", "pipe", "big", "bad\\udcff", "esc\\x1b[2J"):
        assert name in refused, refused
    assert "\x1b" not in refused
    # Sent once: the next turn's end sends nothing more.
    assert await memory.changes(sandbox, mounted) is None


async def test_a_reinstall_replaces_what_the_sandbox_changed_and_removes_what_the_store_lost(tmp_path: Path) -> None:
    sandbox = _sandbox(tmp_path)
    await memory.install(sandbox, [_mount(keep=b"k", gone=b"g")])
    notes = sandbox.home / "memory" / "notes"
    (notes / "keep").unlink()
    (notes / "keep").symlink_to(tmp_path / "outside")  # a link where a document goes is replaced, not followed
    await memory.install(sandbox, [_mount(keep=b"k2")])
    assert not (tmp_path / "outside").exists()
    assert (notes / "keep").read_bytes() == b"k2" and not (notes / "keep").is_symlink()
    assert not (notes / "gone").exists()


async def test_links_planted_at_the_memory_directory_make_the_install_fail(tmp_path: Path) -> None:
    sandbox = _sandbox(tmp_path)
    target = tmp_path / "host"
    target.mkdir()
    (sandbox.home / "memory").symlink_to(target)
    with pytest.raises(memory.MemoryRefused):
        await memory.install(sandbox, [_mount(a=b"x")])
    assert list(target.iterdir()) == []


@pytest.mark.parametrize("path", ["../x", "/etc/x", "a/../../x", "a//b", "", "x\x00", "x\n"])
async def test_paths_the_control_plane_would_never_send_are_refused(tmp_path: Path, path: str) -> None:
    sandbox = _sandbox(tmp_path)
    mount = pb.MemoryMount(store_id="i", name="notes", read_write=True, files=[pb.MemoryFile(path=path, content=b"x")])
    with pytest.raises(memory.MemoryRefused):
        await memory.install(sandbox, [mount])
    assert not (tmp_path / "x").exists() and not (tmp_path / "home" / "x").exists()
