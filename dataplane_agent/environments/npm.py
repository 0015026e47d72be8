"""An environment's npm packages, from the npm registry only: resolved, checked, then installed as checked.

An entry is a registry name (`packages.Packages`), but a package on the registry may depend on a git
repository, a tarball URL, a file or a directory (`"dep": "git+https://…"`, `"https://host/x.tgz"`):
npm would fetch those from wherever they name, from the host's network and outside the environment's
policy. So npm runs in three steps, on the host, no package's script ever run:

1. resolve: `npm install --package-lock-only`, git, remote, file and directory dependencies disallowed
   (`--allow-git=none` and its kin: npm refuses them before fetching anything of them); the build
   fails naming the package that asked for one, its spec, and the registry;
2. check: every package of the lock file written must come from a configured registry (the same
   scheme, host and port as the default registry or its scope's); the first that does not fails the
   build naming it and its URL;
3. install: `npm ci`, exactly what the lock file says.

Nothing is installed unless every package passed. An npm older than the allow-* settings (11.x)
ignores them, and may fetch such a dependency's tarball in step 1 to read its manifest; step 2 still
refuses it before anything is installed."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from dataplane_agent.environments.steps import STEP_TIMEOUT, LayerBuildError, run_step

_DISALLOWED = ("--allow-git=none", "--allow-remote=none", "--allow-file=none", "--allow-directory=none")
_QUIET = ("--ignore-scripts", "--no-audit", "--no-fund", "--no-update-notifier")
# npm's refusals of a disallowed dependency (EALLOWGIT, EALLOWREMOTE, EALLOWFILE, EALLOWDIRECTORY).
_REFUSED_CODE = re.compile(r"\bEALLOW[A-Z]+\b")
# The debug log's line for each dependency npm places: `placeDep <where> <name>@ OK for: <parent> want: <spec>`.
_PLACED = re.compile(r"placeDep \S+ (?P<name>\S+?)@\S* OK for: (?P<parent>\S*) want: (?P<spec>\S+)")


def _from_registry(spec: str) -> bool:
    """Whether a dependency's spec names a registry version (a range, a tag, an `npm:` alias), not a
    git repository, URL, file or directory."""
    return spec.startswith("npm:") or not re.search(r"[:/\\]|^\.|\.tgz$", spec)


async def install(entries: Sequence[str], prefix: Path, *, logs: Path, step_timeout: float = STEP_TIMEOUT) -> None:
    """`entries` and what they depend on into `prefix` (`node_modules/`, `package.json`, the lock
    file), from the registry only; LayerBuildError saying which package is not, and nothing
    installed. `prefix` exists; `logs`: where npm's debug logs go (not into the layer)."""
    common = (*_QUIET, *_DISALLOWED, "--logs-dir", str(logs), "--prefix", str(prefix))
    try:
        await run_step(
            "npm",
            ["npm", "install", "--package-lock-only", "--omit-lockfile-registry-resolved=false", *common,
             "--", *entries],
            timeout=step_timeout,
        )  # fmt: skip
    except LayerBuildError as error:
        if not _REFUSED_CODE.search(str(error)):
            raise
        raise await _refusal(error, logs, step_timeout) from None
    lock = _read_lock(prefix / "package-lock.json")
    packages = _packages(lock)
    scopes = {name.split("/", 1)[0] for name, _ in packages if name.startswith("@")}
    registries = await _registries(scopes, step_timeout)
    origins = {_origin(url) for url in registries.values()}
    for name, resolved in packages:
        if resolved is None or _origin(resolved) not in origins:
            where = "no registry URL" if resolved is None else resolved
            raise LayerBuildError(
                "npm",
                f"{name} resolves to {where}, not to the npm registry ({_registry_for(name, registries)}): an "
                "environment installs npm packages from the registry only, so nothing was installed",
            )
    await run_step("npm", ["npm", "ci", *common], timeout=step_timeout)


def _read_lock(path: Path) -> dict[str, Any]:
    try:
        lock = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise LayerBuildError("npm", f"npm wrote no readable lock file: {error}") from None
    if not isinstance(lock, dict) or not isinstance(lock.get("packages"), dict):
        raise LayerBuildError("npm", "npm wrote a lock file without `packages` (npm 7 or later is needed)")
    return lock


def _packages(lock: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """Each package the lock file installs, its name and where it comes from (None: it does not say).
    A bundled package comes inside its parent's tarball; the root is the build's own."""
    found: list[tuple[str, str | None]] = []
    for key, entry in lock["packages"].items():
        if not key or not isinstance(entry, dict) or entry.get("inBundle"):
            continue
        name = str(entry.get("name") or key.rpartition("node_modules/")[2])
        resolved = entry.get("resolved")
        if entry.get("link"):  # a file or directory dependency: a path, never a registry's
            found.append((name, str(resolved or key)))
        else:
            found.append((name, resolved if isinstance(resolved, str) else None))
    return found


async def _registries(scopes: Iterable[str], timeout: float) -> dict[str, str]:
    """The registry npm uses (`registry`) and each scope's (`@scope:registry`), where one is set."""
    keys = ["registry", *sorted(f"{scope}:registry" for scope in scopes)]
    output = await run_step("npm", ["npm", "config", "get", *keys], timeout=timeout)
    if len(keys) == 1:
        return {"registry": output.strip()}
    found = {}
    for line in output.splitlines():
        key, _, value = line.strip().partition("=")
        if key in keys and value and value not in ("undefined", "null"):
            found[key] = value
    return found


def _origin(url: str) -> tuple[str, str, int | None]:
    try:
        parts = urlsplit(url)
        port = parts.port or {"https": 443, "http": 80}.get(parts.scheme.lower())
    except ValueError:
        return ("", url, None)
    return (parts.scheme.lower(), (parts.hostname or "").lower(), port)


def _registry_for(name: str, registries: Mapping[str, str]) -> str:
    scope = name.split("/", 1)[0] if name.startswith("@") else ""
    return registries.get(f"{scope}:registry") or registries.get("registry", "?")


async def _refusal(error: LayerBuildError, logs: Path, timeout: float) -> LayerBuildError:
    """npm's refusal of a disallowed dependency, naming it: npm's own message does not always
    (EALLOWREMOTE says only that remote packages are disabled), its debug log does."""
    last = _last_disallowed(logs)
    if last is None:
        return error
    code = refused[0] if (refused := _REFUSED_CODE.search(str(error))) else "refused"
    registry = (await _registries((), timeout)).get("registry", "?")
    return LayerBuildError(
        "npm",
        f"{last['parent'] or 'the environment'} depends on {last['name']} from {last['spec']}, not from the npm "
        f"registry ({registry}): an environment installs npm packages from the registry only (no git, tarball "
        f"URL, file or directory dependency), so nothing was installed (npm: {code})",
    )


def _last_disallowed(logs: Path) -> re.Match[str] | None:
    """The last dependency npm placed whose spec is no registry version, by its latest debug log."""
    placed = []
    for log in sorted(logs.glob("*-debug-*.log"), key=lambda path: path.stat().st_mtime)[-1:]:
        placed = [m for m in _PLACED.finditer(log.read_text(errors="replace")) if not _from_registry(m["spec"])]
    return placed[-1] if placed else None
