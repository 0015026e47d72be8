"""Fetching an environment's packages on the host, running no code of any package.

Each step uses the host's configured registries (apt sources, pip.conf, .npmrc) and only commands
that download and unpack: apt-get's download-only mode into a private archive directory (without
taking the host's apt locks), pip's download of wheels only (an sdist would run setup.py, so a
package without a wheel fails the build with pip's message) and npm's install with scripts ignored
(so no install script runs; a package that needs one does not work), from the registry only: a
dependency on a git repository, a URL, a file or a directory fails the build (`npm`). Entries come
checked (`packages.Packages`) and go after `--`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from dataplane_agent.environments import npm
from dataplane_agent.environments.packages import Packages
from dataplane_agent.environments.steps import STEP_TIMEOUT, run_step

# The system's Python, which the local sandbox runs (it sees the host's /usr), so wheels fit it.
SYSTEM_PYTHON = "/usr/bin/python3"

Progress = Callable[[str, str, int], Awaitable[None]]


async def download(
    packages: Packages,
    work: Path,
    progress: Progress,
    *,
    dpkg_status: Path | None = None,
    step_timeout: float = STEP_TIMEOUT,
) -> None:
    """Fetch `packages` into `work`: `apt/` (.deb files), `pip/` (wheels), `node/` (an npm prefix
    with node_modules, scripts not run), each within `step_timeout` seconds. `dpkg_status`: resolve
    apt's dependencies against this package database (an image's) rather than the host's."""
    if packages.apt:
        await progress("apt", f"downloading {len(packages.apt)} apt package(s)", 10)
        archives = work / "apt"
        (archives / "partial").mkdir(parents=True, exist_ok=True)
        argv = ["apt-get", "install", "--download-only", "--yes", "--quiet", "--no-install-recommends",
                "-o", f"Dir::Cache::archives={archives}", "-o", "Debug::NoLocking=1"]  # fmt: skip
        if dpkg_status is not None:
            argv += ["-o", f"Dir::State::status={dpkg_status}"]
        # A package the host (or image) has already is not downloaded: the sandbox has it.
        await run_step("apt", [*argv, "--", *packages.apt], timeout=step_timeout)
    if packages.pip:
        await progress("pip", f"downloading {len(packages.pip)} pip package(s)", 30)
        wheels = work / "pip"
        wheels.mkdir(parents=True, exist_ok=True)
        await run_step(
            "pip",
            [SYSTEM_PYTHON, "-m", "pip", "download", "--only-binary=:all:", "--no-input",
             "--disable-pip-version-check", "--dest", str(wheels), "--", *packages.pip],
            timeout=step_timeout,
        )  # fmt: skip
    if packages.npm:
        await progress("npm", f"downloading {len(packages.npm)} npm package(s)", 50)
        prefix = work / "node"
        prefix.mkdir(parents=True, exist_ok=True)
        await npm.install(packages.npm, prefix, logs=work / "npm-logs", step_timeout=step_timeout)
