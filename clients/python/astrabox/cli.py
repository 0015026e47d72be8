"""The `astrabox` command.

    astrabox up            control plane + one local agent (+ embedded PostgreSQL, + offline model)
    astrabox demo          `up` in a scratch directory, one real session, then shut down
    astrabox controlplane  the control-plane process
    astrabox agent         the data-plane agent process
    astrabox run PROMPT    create a session on a running stack and print its turn live
    astrabox session …     list, show, print events of, or delete sessions
    astrabox image build   build the docker driver's sandbox image offline (debootstrap)

Server subcommands import the server packages lazily, so the client works
wherever only the client distribution is installed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence

# gRPC core's informational chatter (fork handlers) is noise on a terminal; it reads this at import.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import grpc

from astrabox.client import AstraBoxClient, AstraBoxError
from astrabox.render import render
from astrabox.secret_settings import SecretSettingError
from astrabox.sessionkernel.v1 import session_pb2

DEFAULT_TARGET = os.environ.get("ASTRABOX_TARGET", "127.0.0.1:7233")
DEFAULT_TLS_CA = os.environ.get("ASTRABOX_TLS_CA", "")
DEFAULT_PROMPT = "Create a file hello.txt in the workspace with a greeting, then show it."
_TURN_END = ("turn_completed", "turn_failed")
_TLS_CA_HELP = "reach the control plane over TLS, verified with this PEM CA bundle (env ASTRABOX_TLS_CA)"


async def run_prompt(
    target: str, prompt: str, *, timeout: float, out=sys.stdout, credentials: grpc.ChannelCredentials | None = None
) -> tuple[int, session_pb2.Session]:
    """Create a session, send `prompt`, print its events until the turn ends.

    Returns the exit status (0 when the turn completed) and the session."""
    async with AstraBoxClient.connect(target, credentials=credentials) as client:
        session = await client.create_session()
        print(f"session {session.session_id}", file=out, flush=True)
        async with asyncio.timeout(timeout):
            session = await client.wait_for_state(session.session_id, ["READY"], timeout=timeout)
            accepted = await client.send_message(session.session_id, prompt)
            async for event in client.watch(session.session_id):
                for line in render(event):
                    print(line, file=out, flush=True)
                if event.turn_id == accepted.turn_id and event.WhichOneof("payload") in _TURN_END:
                    ok = event.WhichOneof("payload") == "turn_completed" and not event.turn_completed.is_error
                    return (0 if ok else 1), await client.get_session(session.session_id)
    raise AssertionError("unreachable")


def _credentials(tls_ca: str) -> grpc.ChannelCredentials | None:
    """TLS verified with the PEM CA bundle at `tls_ca`; None (plaintext) when it is empty."""
    if not tls_ca:
        return None
    try:
        with open(os.path.expanduser(tls_ca), "rb") as bundle:
            return grpc.ssl_channel_credentials(root_certificates=bundle.read())
    except OSError as error:
        raise SystemExit(f"astrabox: cannot read the CA bundle {tls_ca}: {error.strerror}") from error


async def _session_command(args: argparse.Namespace) -> int:
    async with AstraBoxClient.connect(args.target, credentials=_credentials(args.tls_ca)) as client:
        if args.action == "list":
            async for session in client.iter_sessions():
                print(f"{session.session_id}  {_state_name(session):<18} seq {session.last_seq:<6} agent {session.agent_id}")
        elif args.action == "show":
            print(await client.get_session(args.session_id))
        elif args.action == "events":
            async for event in (client.watch(args.session_id) if args.follow else client.iter_events(args.session_id)):
                for line in render(event):
                    print(line, flush=True)
        elif args.action == "delete":
            session = await client.delete_session(args.session_id)
            print(f"deleted {session.session_id}")
        elif args.action == "archive":
            session = await client.archive_session(args.session_id)
            print(f"archived {session.session_id}")
        elif args.action == "send":
            accepted = await client.send_message(args.session_id, args.text)
            print(f"accepted as turn {accepted.turn_id} (seq {accepted.seq})")
        elif args.action == "interrupt":
            session = await client.interrupt_turn(args.session_id)
            print(f"session {session.session_id} is {_state_name(session)}")
        elif args.action == "mode":
            session = await client.set_permission_mode(args.session_id, args.permission_mode)
            print(f"permission mode is {session.permission_mode}")
        elif args.action == "respond":
            session = await client.get_session(args.session_id)
            if not session.HasField("pending_interaction"):
                print(f"session {args.session_id} has no pending interaction", file=sys.stderr)
                return 1
            interaction_id = session.pending_interaction.interaction_id
            if args.deny is not None:
                session = await client.respond_to_interaction(args.session_id, interaction_id, deny=args.deny)
            elif args.answer:
                answers = dict(pair.split("=", 1) for pair in args.answer)
                session = await client.respond_to_interaction(args.session_id, interaction_id, answers=answers)
            else:
                session = await client.respond_to_interaction(args.session_id, interaction_id, allow=True)
            print(f"answered {interaction_id}; session is {_state_name(session)}")
    return 0


def _state_name(session: session_pb2.Session) -> str:
    return session_pb2.SessionState.Name(session.state).removeprefix("SESSION_STATE_")


def _cmd_run(args: argparse.Namespace) -> int:
    credentials = _credentials(args.tls_ca)
    status, _ = asyncio.run(run_prompt(args.target, args.prompt, timeout=args.timeout, credentials=credentials))
    return status


def _cmd_session(args: argparse.Namespace) -> int:
    return asyncio.run(_session_command(args))


def _cmd_demo(args: argparse.Namespace) -> int:
    from astrabox_server.stack import run_demo

    return asyncio.run(run_demo(args, DEFAULT_PROMPT if not args.prompt else args.prompt))


def _cmd_image(args: argparse.Namespace) -> int:
    from dataplane_agent.images import ImageBuildError, build_image

    try:
        asyncio.run(build_image(args.tag, rebuild=args.rebuild, mirror=args.mirror, progress=_progress))
    except ImageBuildError as error:
        print(f"astrabox image build: {error}", file=sys.stderr)
        return 1
    return 0


def _progress(line: str) -> None:
    print(line, flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="astrabox", description="Run coding agents as durable sessions.")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("up", help="run the whole stack on this machine (see `astrabox up --help`)", add_help=False)

    demo = sub.add_parser("demo", help="bring the stack up in a scratch directory, run one session, shut down")
    demo.add_argument("prompt", nargs="?", default="", help="the prompt (default: create hello.txt)")
    demo.add_argument("--timeout", type=float, default=300.0)
    demo.set_defaults(func=_cmd_demo)

    sub.add_parser("controlplane", help="run the control plane (see `astrabox controlplane --help`)", add_help=False)
    sub.add_parser("agent", help="run a data-plane agent (see `astrabox agent --help`)", add_help=False)

    run = sub.add_parser("run", help="run one prompt in a new session and print it live")
    run.add_argument("prompt")
    run.add_argument("--target", default=DEFAULT_TARGET, help="control plane address (env ASTRABOX_TARGET)")
    run.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the turn")
    run.add_argument("--tls-ca", default=DEFAULT_TLS_CA, help=_TLS_CA_HELP)
    run.set_defaults(func=_cmd_run)

    session = sub.add_parser("session", help="inspect sessions")
    session.add_argument("--target", default=DEFAULT_TARGET)
    session.add_argument("--tls-ca", default=DEFAULT_TLS_CA, help=_TLS_CA_HELP)
    actions = session.add_subparsers(dest="action", required=True)
    actions.add_parser("list")
    for name in ("show", "delete", "archive", "interrupt"):
        actions.add_parser(name).add_argument("session_id")
    send = actions.add_parser("send", help="send a message (queued while a turn runs)")
    send.add_argument("session_id")
    send.add_argument("text")
    mode = actions.add_parser("mode", help="set the engine's permission mode")
    mode.add_argument("session_id")
    mode.add_argument("permission_mode")
    respond = actions.add_parser("respond", help="answer the pending interaction: allow (default), --deny MSG, or --answer Q=A")
    respond.add_argument("session_id")
    respond.add_argument("--deny", metavar="MESSAGE")
    respond.add_argument("--answer", action="append", metavar="QUESTION=ANSWER")
    events = actions.add_parser("events")
    events.add_argument("session_id")
    events.add_argument("--follow", "-f", action="store_true", help="keep following live events")
    session.set_defaults(func=_cmd_session)

    image = sub.add_parser("image", help="the docker driver's sandbox image")
    image_actions = image.add_subparsers(dest="action", required=True)
    build = image_actions.add_parser("build", help="build the sandbox image offline (debootstrap + docker import; needs root)")
    build.add_argument("--tag", default=os.environ.get("ASTRABOX_SANDBOX_IMAGE", "astrabox/sandbox:latest"),
                       help="image tag (env ASTRABOX_SANDBOX_IMAGE; default %(default)s)")
    build.add_argument("--rebuild", action="store_true", help="build even when the tag exists")
    build.add_argument("--mirror", default="", help="Debian mirror URL (default: the host's apt source for bookworm)")
    build.set_defaults(func=_cmd_image)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "up":
        from astrabox_server.stack import main as up_main

        return up_main(argv[1:])
    if argv and argv[0] == "controlplane":
        from controlplane.main import main as controlplane_main

        return controlplane_main(argv[1:])
    if argv and argv[0] == "agent":
        from dataplane_agent.main import main as agent_main

        return agent_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        sys.exit(args.func(args))
    except (AstraBoxError, SecretSettingError) as error:
        sys.exit(f"astrabox: {error}")
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:  # `astrabox … | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)

