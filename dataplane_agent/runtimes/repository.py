"""A session's git repository (StartRuntime.git_source), cloned into its workspace before the first turn.

The clone runs inside the sandbox, as its user, through the driver's launcher like every workspace
command, with the engine's environment: the egress proxy's variables are there, so git reaches the
repository only as the session's network policy allows, and a credential bound to its host is added
by the proxy on the way out (never in the URL, the sandbox or the journal). The control plane has
checked the source (`controlplane.git_sources`: http(s) without user information, a ref that is not
an option, a directory inside the workspace); git is told again here never to use another transport
(`protocol.allow=never`, only http and https), never to ask for a password, and not to fetch
submodules, so that a hostile repository cannot make it run a program (ext::) or read the host's
files (file://).

Once per workspace: a directory that holds a `.git` already (the session's own, after an idle stop or
a retried start) is left as it is. The ref is a branch (origin/REF), a tag, a commit id the clone
holds, or else fetched by name (a commit on no branch). A failure is `CloneFailed` with the end of
git's own message, user information scrubbed from any URL in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import uuid
from collections.abc import Mapping

from astrabox.environments.v1 import environment_pb2
from dataplane_agent.sandboxes.base import RUN_MARKER, Sandbox, SandboxDriver

_MESSAGE_BYTES = 2048
# Exit status of the script when the directory holds a repository already (as in _SCRIPT).
_PRESENT = 3
# $1 marker, $2 workspace, $3 url, $4 ref, $5 directory (relative, maybe empty). The directory is
# checked for .git inside the sandbox, where a link the sandbox's code left cannot lead the agent
# anywhere. Everything git prints goes to stderr (the caller keeps its end).
_SCRIPT = (
    f'export {RUN_MARKER}="$1"\n'
    + r"""
set -u
cd -- "$2" || exit 1
dir=${5:-.}
[ -e "$dir/.git" ] && exit 3
git() {
  command git -c protocol.allow=never -c protocol.https.allow=always -c protocol.http.allow=always \
    -c credential.helper= -c core.askPass= "$@"
}
git clone --quiet --no-recurse-submodules -- "$3" "$dir" >&2 || exit 1
[ -n "$4" ] || exit 0
cd -- "$dir" || exit 1
for candidate in "refs/remotes/origin/$4" "refs/tags/$4" "$4"; do
  if commit=$(git rev-parse --verify --quiet --end-of-options "$candidate^{commit}" 2>/dev/null); then
    exec git checkout --quiet --detach "$commit" >&2
  fi
done
git fetch --quiet --no-recurse-submodules origin -- "$4" >&2 || exit 1
exec git checkout --quiet --detach FETCH_HEAD >&2
"""
)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]*@")


class CloneFailed(Exception):
    """The repository could not be cloned or its ref checked out; the message is git's own."""


def scrub(text: str) -> str:
    """`text` with the user information of every URL in it replaced (a credential git echoed)."""
    return _USERINFO.sub(r"\1***@", text)


async def clone(
    driver: SandboxDriver,
    sandbox: Sandbox,
    source: environment_pb2.GitSource,
    env: Mapping[str, str],
    timeout: float,
) -> bool:
    """Clone `source` into the sandbox's workspace and check out its ref; False when the directory
    holds a repository already (nothing done). CloneFailed when git fails or takes longer than
    `timeout` seconds (whatever it started is ended)."""
    marker = uuid.uuid4().hex
    launch_env = {**env, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "", "GIT_CONFIG_NOSYSTEM": "1", "LANG": "C"}
    launcher = await driver.launcher(sandbox, ["/bin/bash"], launch_env)
    process = await asyncio.create_subprocess_exec(
        str(launcher),
        "-c",
        _SCRIPT,
        "astrabox-git-clone",
        marker,
        sandbox.inner_workspace,
        source.url,
        source.ref,
        source.directory,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        async with asyncio.timeout(timeout):
            stderr = await _tail(process.stderr)
            code = await process.wait()
    except TimeoutError:
        raise CloneFailed(f"git did not finish the clone of {scrub(source.url)} within {timeout:g} s") from None
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                await asyncio.shield(process.wait())
            await asyncio.shield(driver.end_processes(sandbox, marker, RUN_MARKER))
    if code == _PRESENT:
        return False
    if code != 0:
        where = f" at {source.ref}" if source.ref else ""
        raise CloneFailed(f"git could not clone {scrub(source.url)}{where}: {scrub(stderr) or f'exit status {code}'}")
    return True


async def _tail(stream: asyncio.StreamReader | None) -> str:
    """The end of what git wrote: its error comes last."""
    if stream is None:
        return ""
    kept = b""
    while chunk := await stream.read(64 * 1024):
        kept = (kept + chunk)[-_MESSAGE_BYTES:]
    return kept.decode(errors="replace").strip()
