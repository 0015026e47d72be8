"""`astrabox run PROMPT`: one prompt in a new session, printed live until its turn ends.

The session is created with what CreateSession takes (an agent and an environment, each at a
version; a permission mode, a model and labels, which override the agent's), its starting files
are put in place, then the prompt is sent and the turn's events printed as they come. When the
turn waits for a person (a question, a tool approval, a custom tool's call) `run` asks on the
terminal when both stdin and stdout are one, and otherwise prints how to answer from a shell and
goes on waiting (`astrabox.interaction_prompts`).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

import grpc

from astrabox import agent_commands, environment_commands, starting_files
from astrabox.client import AstraBoxClient
from astrabox.events import Delta
from astrabox.interaction_prompts import TerminalPrompter, waiting_note
from astrabox.memory_stores import MODES, attach
from astrabox.render import LiveText
from astrabox.session_view import pins
from astrabox.sessionkernel.v1 import session_pb2

__all__ = ["add_session_options", "label", "run_prompt", "session_options"]


async def run_prompt(
    target: str,
    prompt: str,
    *,
    timeout: float,
    out: TextIO = sys.stdout,
    credentials: grpc.ChannelCredentials | None = None,
    api_key: str | None = None,
    agent: str = "",
    agent_version: int = 0,
    environment: str = "",
    environment_version: int = 0,
    files: starting_files.StartingFiles = starting_files.NONE,
    permission_mode: str = "",
    model: str = "",
    labels: Mapping[str, str] | None = None,
    memory: Sequence[Any] = (),
    prompter: TerminalPrompter | None = None,
    connection: Sequence[str] = (),
) -> tuple[int, session_pb2.Session]:
    """Create a session (from `agent`, at `agent_version`, in `environment` at `environment_version`,
    when given; in `permission_mode`, with `model`, `labels` and `memory` (memory store attachments);
    with `files` in its workspace), send
    `prompt`, print its events until the turn ends.

    When the turn waits for an answer, `prompter` asks for it; without one (or once its input has
    ended) the commands that answer it are printed, with the `connection` flags, and the turn waited
    for. Returns the exit status (0 when the turn completed) and the session."""
    async with AstraBoxClient.connect(target, credentials=credentials, api_key=api_key) as client:
        created = await client.create_session(
            agent=agent,
            agent_version=agent_version,
            environment=environment,
            environment_version=environment_version,
            git_source=files.git_source,
            permission_mode=permission_mode,
            model=model,
            labels=dict(labels or {}),
            memory=list(memory),
        )
        print(f"session {created.session_id}{pins(created)}", file=out, flush=True)
        session = client.session(created.session_id)
        async with asyncio.timeout(timeout):
            await session.wait_for_state(["READY"], timeout=timeout)
            if files.upload:
                await session.upload_directory(files.upload)
            turn = await session.send(prompt)
            live = LiveText(out)  # the answer's text as it is written
            async for event in session.watch(deltas=True):
                if isinstance(event, Delta):
                    live.delta(event)
                    continue
                live.event(event)
                if event.turn_id == turn.turn_id and event.interaction is not None:
                    answered = prompter is not None and await prompter.answer(client, session.id, event.interaction)
                    if not answered:
                        for line in waiting_note(session.id, event.interaction, connection):
                            print(line, file=out, flush=True)
                if event.turn_id == turn.turn_id and event.ends_turn:
                    ok = event.kind == "turn_completed" and not event.proto.turn_completed.is_error
                    return (0 if ok else 1), await session.get()
    raise AssertionError("unreachable")


def label(text: str) -> tuple[str, str]:
    """--label: KEY=VALUE."""
    key, equals, value = text.partition("=")
    if not key or not equals:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def add_session_options(parser: argparse.ArgumentParser) -> None:
    """What the commands that create a session take: --agent, --environment, --permission-mode,
    --model and --label."""
    parser.add_argument(
        "--agent",
        type=agent_commands.agent_reference,
        default=("", 0),
        metavar="NAME[@VERSION]",
        help="start the session from this agent (default version: its newest)",
    )
    parser.add_argument(
        "--environment",
        type=environment_commands.environment_reference,
        default=("", 0),
        metavar="NAME[@VERSION]",
        help="run the session in this environment (default version: its newest; default: the built-in one)",
    )
    parser.add_argument(
        "--permission-mode",
        default="",
        metavar="MODE",
        help="the engine's permission mode for the session, one the engine declares (Claude Code: default, which"
        " asks before each tool; acceptEdits; plan; bypassPermissions); default: the agent's, else the engine's"
        " (Claude Code's: bypassPermissions)",
    )
    parser.add_argument(
        "--model",
        default="",
        metavar="MODEL",
        help="the model the engine asks for, e.g. claude-sonnet-4-5; default: the agent's, else the engine's",
    )
    parser.add_argument(
        "--label",
        action="append",
        type=label,
        default=[],
        metavar="KEY=VALUE",
        help="a label stored with the session, for `session list --label` (repeat for more)",
    )
    parser.add_argument(
        "--memory",
        action="append",
        type=memory_attachment,
        default=[],
        metavar="STORE[:MODE]",
        help="attach a memory store (MODE read-only, the default, or read-write): its documents are in the"
        " sandbox under /home/agent/memory/STORE/ (repeat for more)",
    )


def session_options(args: argparse.Namespace) -> dict[str, Any]:
    """CreateSession's fields from the options `add_session_options` added."""
    (agent, agent_version), (environment, environment_version) = args.agent, args.environment
    return {
        "agent": agent,
        "agent_version": agent_version,
        "environment": environment,
        "environment_version": environment_version,
        "permission_mode": args.permission_mode,
        "model": args.model,
        "labels": dict(args.label),
        "memory": list(args.memory),
    }


def memory_attachment(value: str) -> Any:
    """--memory STORE[:MODE] as a CreateSessionRequest.memory entry."""
    store, _, mode = value.partition(":")
    if mode and mode not in MODES:
        raise argparse.ArgumentTypeError(f"{mode!r} is not a memory mode: read-only or read-write")
    return attach(store, mode or "read-only")
