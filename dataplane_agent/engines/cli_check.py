"""At the agent's start: the sandbox's user can run the engine's CLI inside a sandbox.

The driver's probe only says that sandboxes can be made. A CLI the sandbox's user
cannot run (a file only its owner may read or execute; a binary for another
machine) would make every session's engine fail with "Permission denied" while
the agent reports itself healthy and its warm pool makes and discards sandboxes.
So before the agent connects, it runs `CLI --version` in a throwaway sandbox
exactly as a session's engine is run (the driver's launcher, the sandbox's
user), and refuses to start, saying how to fix it, when that does not answer.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import structlog

from dataplane_agent.engines.base import EngineError
from dataplane_agent.sandboxes.base import SandboxDriver, SandboxSpec

log = structlog.get_logger(__name__)

CHECK_TIMEOUT = 60.0
_OUTPUT_LIMIT = 600


async def check_cli(driver: SandboxDriver, cli: Path, agent_id: str) -> str:
    """The CLI's version as the sandbox's user sees it; EngineError saying how to fix it when that
    user cannot run it in one of `driver`'s sandboxes (SandboxError when no sandbox can be made,
    TimeoutError when it all takes longer than CHECK_TIMEOUT)."""
    spec = SandboxSpec(session_id=f"cli-check-{uuid.uuid4().hex[:12]}", agent_id=agent_id)
    async with asyncio.timeout(CHECK_TIMEOUT):
        sandbox = await driver.create(spec)
        try:
            launcher = await driver.launcher(sandbox, [str(cli)], {})
            process = await asyncio.create_subprocess_exec(
                str(launcher),
                "--version",
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            try:
                output, _ = await process.communicate()
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
        finally:
            verdict = await driver.destroy(sandbox)  # one left (not confirmed) is the reconciler's to destroy
    text = output.decode(errors="replace").strip()
    if process.returncode == 0 and text:
        log.info("engine_cli_checked", cli=str(cli), version=text.splitlines()[0], sandbox_destroyed=verdict.value)
        return text.splitlines()[0]
    raise EngineError(
        f"the sandbox's user cannot run the Claude Code CLI {cli} inside a {driver.name} sandbox "
        f"(exit status {process.returncode}: {_tail(text) or 'no output'}). Make the file readable and "
        f"executable by every user (chmod a+rx {cli}), or give --claude-cli (env ASTRABOX_CLAUDE_CLI) a "
        f"copy that is (install -m 0755 {cli} /usr/local/bin/claude)"
    )


def _tail(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _OUTPUT_LIMIT else "…" + text[-_OUTPUT_LIMIT:]
