"""`astrabox memory …`: a project's memory stores from the command line (MemoryService).

astrabox memory create NAME [--description TEXT]
astrabox memory list | show NAME | delete NAME
astrabox memory write NAME PATH [--file F | --text T] [--expected-version N]   (stdin without either)
astrabox memory read NAME PATH [--version N | --at TIME]
astrabox memory rm NAME PATH                            a version marking it deleted
astrabox memory docs NAME [--at TIME]                   its documents, now or at a time
astrabox memory history NAME [PATH] [--limit N]         who wrote what, when, newest first
astrabox memory restore NAME --at TIME                  new versions equal to the store at TIME

Sessions attach stores with `--memory STORE[:read-write]` (astrabox run, astrabox session create).
TIME is ISO 8601 (2026-12-06T05:00:00Z; without a zone: UTC).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from astrabox.client import AstraBoxClient
from astrabox.memory_stores import MemoryDocument, MemoryStore

__all__ = ["COMMANDS", "add_parsers", "run"]

COMMANDS = ("memory",)
"""The subcommands this module adds to `astrabox`."""


def _time(value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an ISO 8601 time") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def add_parsers(sub: Any, connection: argparse.ArgumentParser, func: Callable[[argparse.Namespace], int]) -> None:
    """Adds `astrabox memory` to `sub`, taking the `connection` options."""
    memory = sub.add_parser(
        "memory",
        help="memory stores of versioned documents that sessions attach: create, list, show, delete, write,"
        " read, rm, docs, history, restore",
        parents=[connection],
    )
    actions = memory.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="create a memory store")
    create.add_argument("name", metavar="NAME", help="the store's name (1-64 of [a-z0-9-], a letter first)")
    create.add_argument("--description", default="", help="what it is for")
    actions.add_parser("list", help="the project's memory stores by name")
    for name, text in (("show", "a store and its document count"), ("delete", "delete a store and its history")):
        actions.add_parser(name, help=text).add_argument("name", metavar="NAME", help="the store's name or id")
    write = actions.add_parser("write", help="write a document as a new version")
    write.add_argument("name", metavar="NAME", help="the store's name or id")
    write.add_argument("path", metavar="PATH", help="the document's path in the store, e.g. notes/build.md")
    given = write.add_mutually_exclusive_group()
    given.add_argument("--file", type=Path, help="the content, from this file")
    given.add_argument("--text", help="the content")
    write.add_argument("--expected-version", type=int, help="write only if this is its latest version (0: new)")
    read = actions.add_parser("read", help="print a document")
    read.add_argument("name", metavar="NAME", help="the store's name or id")
    read.add_argument("path", metavar="PATH", help="the document's path in the store")
    which = read.add_mutually_exclusive_group()
    which.add_argument("--version", type=int, default=0, help="this version (default: the latest)")
    which.add_argument("--at", type=_time, help="the version that was latest at this time")
    rm = actions.add_parser("rm", help="delete a document (a new version marking it deleted)")
    rm.add_argument("name", metavar="NAME", help="the store's name or id")
    rm.add_argument("path", metavar="PATH", help="the document's path in the store")
    docs = actions.add_parser("docs", help="a store's documents by path")
    docs.add_argument("name", metavar="NAME", help="the store's name or id")
    docs.add_argument("--at", type=_time, help="as they were at this time")
    history = actions.add_parser("history", help="a store's versions, newest first: who wrote what, when")
    history.add_argument("name", metavar="NAME", help="the store's name or id")
    history.add_argument("path", metavar="PATH", nargs="?", default="", help="only this document's")
    history.add_argument("--limit", type=int, default=20, help="show at most this many versions (default 20)")
    restore = actions.add_parser("restore", help="make a store what it was at a time (new versions)")
    restore.add_argument("name", metavar="NAME", help="the store's name or id")
    restore.add_argument("--at", type=_time, required=True, help="the time whose state to restore")
    memory.set_defaults(func=func)


def _describe(store: MemoryStore) -> str:
    lines = [
        f"{store.name}  ({store.store_id})",
        f"  documents  {store.document_count}",
        f"  updated    {store.update_time.isoformat(timespec='seconds')}",
    ]
    if store.description:
        lines.append(f"  about      {store.description}")
    return "\n".join(lines)


def _version_line(version: MemoryDocument) -> str:
    by = f"session {version.session_id} turn {version.turn_id}" if version.session_id else version.writer
    what = "deleted" if version.deleted else f"{version.size_bytes} bytes"
    notes = []
    if version.conflicting_version:
        notes.append(f"over v{version.conflicting_version} it had not seen")
    if version.restored_from_time is not None:
        notes.append(f"restored from {version.restored_from_time.isoformat(timespec='seconds')}")
    extra = f"  ({'; '.join(notes)})" if notes else ""
    return (
        f"{version.create_time.isoformat(timespec='seconds')}  {version.path}  v{version.version}  {what}  {by}{extra}"
    )


async def run(args: argparse.Namespace, client: AstraBoxClient) -> int:
    """Carry out the parsed `astrabox memory` command `args` with `client`; the exit status."""
    memory = client.memory
    if args.action == "create":
        print(_describe(await memory.create(args.name, description=args.description)), flush=True)
    elif args.action == "list":
        async for store in memory.list():
            print(f"{store.name:<32} {store.document_count:>5} documents  {store.description}")
    elif args.action == "show":
        print(_describe(await memory.get(args.name)))
    elif args.action == "delete":
        print(f"deleted {(await memory.delete(args.name)).name}")
    elif args.action == "write":
        content = args.file.read_text() if args.file else args.text if args.text is not None else sys.stdin.read()
        written = await memory.write(args.name, args.path, content, expected_version=args.expected_version)
        print(f"{written.path} v{written.version}")
    elif args.action == "read":
        document = await memory.read(args.name, args.path, version=args.version, at=args.at)
        sys.stdout.write(document.content)
    elif args.action == "rm":
        print(f"{args.path} deleted (v{(await memory.delete_document(args.name, args.path)).version})")
    elif args.action == "docs":
        async for document in memory.documents(args.name, at=args.at):
            print(f"{document.path}  v{document.version}  {document.size_bytes} bytes")
    elif args.action == "history":
        if args.limit <= 0:
            print("astrabox: --limit must be a positive number", file=sys.stderr)
            return 2
        shown = 0
        async for version in memory.versions(args.name, args.path, page_size=min(args.limit, 500)):
            print(_version_line(version))
            shown += 1
            if shown >= args.limit:
                break
    else:
        restored, versions = await memory.restore(args.name, args.at)
        print(f"{restored.name} restored to {args.at.isoformat(timespec='seconds')}: {len(versions)} versions written")
        for version in versions:
            print(f"  {_version_line(version)}")
    return 0
