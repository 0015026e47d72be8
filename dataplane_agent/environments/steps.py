"""One step of a layer's build, run as a program: it succeeds, or fails with its own words.

A package manager's error is what a user needs to fix an environment ("Unable to locate package
…", "No matching distribution found for …"), so a failed step's error is the end of what it wrote
(stdout and stderr together, in order), bounded: never our paraphrase of it."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

# The end of a failed step's output that its error carries.
ERROR_BYTES = 4096
# A step that has not ended after this long fails (a hung mirror must not hold a session forever);
# the agent's --layer-build-timeout.
STEP_TIMEOUT = 900.0


class LayerBuildError(Exception):
    """A layer's build failed; `phase` says which step, the message is the step's own output's end."""

    def __init__(self, phase: str, message: str) -> None:
        super().__init__(message)
        self.phase = phase

    def __str__(self) -> str:
        return f"{self.phase}: {self.args[0]}"


def tail(output: bytes, limit: int = ERROR_BYTES) -> str:
    """The end of `output`, at most `limit` bytes, as text."""
    text = output[-limit:].decode(errors="replace").strip()
    return text


async def run_step(
    phase: str,
    argv: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = STEP_TIMEOUT,
) -> str:
    """Run `argv`; its output's end on success, LayerBuildError with it on failure."""
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=dict(env) if env is not None else _host_env(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as error:
        raise LayerBuildError(phase, f"{argv[0]} cannot be run: {error.strerror}") from error
    try:
        async with asyncio.timeout(timeout):
            output, _ = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise LayerBuildError(phase, f"{Path(argv[0]).name} did not finish within {timeout:.0f}s") from None
    except BaseException:
        if process.returncode is None:
            process.kill()
            await process.wait()
        raise
    if process.returncode != 0:
        raise LayerBuildError(phase, tail(output) or f"{Path(argv[0]).name} exited with status {process.returncode}")
    return tail(output, 512)


def _host_env() -> dict[str, str]:
    """What the host's package managers need of the agent's environment: where they are, the
    locale, the proxy and configuration the operator set; nothing of the agent's own secrets."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
            "no_proxy", "PIP_CONFIG_FILE", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "NPM_CONFIG_USERCONFIG",
            "NPM_CONFIG_REGISTRY", "APT_CONFIG")  # fmt: skip
    env = {name: os.environ[name] for name in keep if name in os.environ}
    env.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    env["DEBIAN_FRONTEND"] = "noninteractive"
    return env
