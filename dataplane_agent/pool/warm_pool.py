"""The warm pool: sandboxes prepared ahead of sessions, so a new session's sandbox is ready at once.

The pool keeps up to `size` sandboxes made from the current template (the
spec every new session's sandbox is made from, minus what belongs to one
session). Each is created with a pool id of its own and labelled with the
template's key, and holds nothing of any session. `claim` takes one
atomically (no await between the check and the take) and has the driver
rebind it to the session, so that it is exactly what `create` would have made
for that session; a miss returns None and the caller creates one. `run()`
refills in the background, and retires (destroys) sandboxes whose template
changed or that are older than `max_age`. At start, pool sandboxes left by an
earlier agent process are taken back when still current, retired otherwise.
A pool that cannot make a sandbox ready (the driver or the engine fails each
time) waits twice as long after each failure in a row, up to `max_backoff`, and
says so in a `pool_failing` warning each time, rather than making and
discarding a sandbox every few seconds.

With an `EngineWarmer`, every ready sandbox also has the agent's default
engine running in it (`dataplane_agent.pool.warm_engines`): a sandbox counts as
ready only once its engine is connected, a claim hands the engine over with
the sandbox, and retiring a sandbox closes its engine first. Sandboxes taken
back from an earlier process get their engine started in the background.

Environments: with `per_environment` N > 0 the pool also keeps up to N sandboxes for each
environment (its layer, variables and limits: the template key tells environments apart) that a
session started in within `environment_recency` seconds, made from that session's spec
(`remember`). A session of that environment claims one as any other; a session of another
environment cannot, its key differs. Only the sandbox is made ahead: no engine is started in it,
since a session's engine has that session's network policy and proxy token, which exist only once
the session does. Which environments are recent is kept in memory: after a restart the pool
retires what an earlier process left for environments and waits for their next session.

Agent versions: a session started from an agent definition needs an engine launched with that
version's configuration (its system prompt, tools, MCP servers, skills), which the default engine
was not. So, with an `EngineWarmer`, the pool also keeps one sandbox with an engine started for each
of the `agent_versions` agent versions whose sessions started most recently (`remember_agent`,
least recently used forgotten first, none unused for `agent_recency` seconds), counted against
`size` (the default engine keeps at least one). Such an engine is keyed by its `WarmAgent.key`,
which names the project, the agent, its version, the engine and the configuration's digest: a claim
takes it only for that very key, so another project's session (or a session without an agent)
never gets it, whatever its definition says. Configurations that need the session itself at launch
(an HTTP MCP server's credential, custom tools answered by the session's client) are never warmed
(`warm_engines.warm_agent`). Their sandboxes are labelled apart (`_AGENT_POOL`): an agent process
that restarts retires them rather than take them back as the default engine's.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import hashlib
import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import Protocol

import structlog

# asyncio.timeout rather than wait_for throughout: on Python 3.11 wait_for loses a cancellation that
# arrives as its awaitable finishes, and a loop that misses its cancellation never stops.
from dataplane_agent.engines.agent_config import AgentConfig
from dataplane_agent.engines.base import EngineSession
from dataplane_agent.runtimes.reconcile import Inventory, pool_key
from dataplane_agent.sandboxes.base import (
    POOL_LABEL,
    SESSION_LABEL,
    DestroyVerdict,
    ListedSandbox,
    Sandbox,
    SandboxDriver,
    SandboxSpec,
)

log = structlog.get_logger(__name__)

# Appended to the pool label (the template key) of a sandbox whose engine runs an agent version.
_AGENT_POOL = "-agent"


class EngineWarmer(Protocol):
    """Starts an engine in a pool sandbox (implemented by `warm_engines.EngineWarmer`)."""

    @property
    def kind(self) -> str: ...

    async def start(self, sandbox: Sandbox, agent: AgentConfig | None = None) -> EngineSession:
        """The engine, launched with `agent`'s configuration (None: the engine's defaults)."""


@dataclass(frozen=True, slots=True)
class WarmAgent:
    """An agent version whose sessions may get an engine started ahead with its `config`; `key`
    names the project, agent, version, engine and configuration (warm_engines.warm_agent)."""

    key: str
    config: AgentConfig


@dataclass(frozen=True, slots=True)
class Claimed:
    """A pool sandbox handed to a session."""

    sandbox: Sandbox
    # The sandbox's id while it was the pool's: what its engine's model credential was issued to.
    pool_id: str
    # The engine started in it before any session (of kind `engine_kind`); None without a warmer.
    engine: EngineSession | None = None
    engine_kind: str = ""
    # The WarmAgent key the engine was launched for; empty: the engine's defaults.
    agent: str = ""


class RebindingDriver(SandboxDriver, Protocol):
    """A driver whose unused sandboxes can be handed to a session."""

    async def rebind(self, sandbox: Sandbox, spec: SandboxSpec) -> Sandbox:
        """Make `sandbox` (made by `create` for a pool id, never used) the sandbox of
        `spec.session_id`, exactly as `create(spec)` would have made it: named, labelled and
        configured for that session. SandboxError if it cannot (the session has one already)."""


@dataclass(frozen=True, slots=True)
class PoolSettings:
    """How many sandboxes to keep ready and for how long; seconds."""

    size: int = 0
    max_age: float = 3600.0
    create_timeout: float = 120.0
    rebind_timeout: float = 30.0
    list_timeout: float = 30.0
    destroy_timeout: float = 60.0
    close_engine_timeout: float = 30.0
    # After a failed create (or engine start), wait this long before trying again; twice as long
    # after each further failure in a row, up to max_backoff.
    backoff: float = 5.0
    max_backoff: float = 300.0
    # After a claim, wait this long before refilling.
    refill_delay: float = 0.25
    # Sandboxes kept for each environment a session used lately (0: none), and how lately.
    per_environment: int = 0
    environment_recency: float = 3600.0
    # Agent versions kept with a pre-started engine each (part of `size`), and for how long unused.
    agent_versions: int = 2
    agent_recency: float = 3600.0


def template_key(driver: str, spec: SandboxSpec) -> str:
    """What makes two specs' sandboxes interchangeable: everything but the session's own id,
    labels and environment (the environment is applied when a sandbox is bound)."""
    shape: dict[str, object] = {"driver": driver}
    for item in dataclasses.fields(spec):
        if item.name in ("session_id", "env"):
            continue
        value = getattr(spec, item.name)
        if item.name == "labels":
            value = {k: v for k, v in value.items() if k not in (SESSION_LABEL, POOL_LABEL)}
        shape[item.name] = _plain(value)
    text = json.dumps(shape, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _plain(value: object) -> object:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, PurePath):
        return str(value)
    return value


@dataclass(eq=False, slots=True)
class _Warm:
    sandbox: Sandbox
    key: str
    # Wall-clock seconds.
    created_at: float
    engine: EngineSession | None = None
    # The WarmAgent key its engine runs (empty: the default engine, or none).
    agent: str = ""

    @property
    def pool_id(self) -> str:
        return self.sandbox.session_id


class WarmPool:
    """Prepared sandboxes of the current template; claimed by new sessions, refilled in the background."""

    def __init__(
        self,
        driver: RebindingDriver,
        template: Callable[[], SandboxSpec],
        settings: PoolSettings,
        *,
        inventory: Inventory | None = None,
        engines: EngineWarmer | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._driver = driver
        self._engines = engines
        self._template = template
        self._settings = settings
        self._inventory = inventory
        self._clock = clock
        self._ready: collections.deque[_Warm] = collections.deque()
        # The environments sessions started in lately: template key -> (its spec, last use).
        self._environments: dict[str, tuple[SandboxSpec, float]] = {}
        # The agent versions sessions started lately, least recently first: key -> (it, last use).
        self._agents: collections.OrderedDict[str, tuple[WarmAgent, float]] = collections.OrderedDict()
        # Pool ids being created, rebound or retired: still the pool's.
        self._busy: set[str] = set()
        self._wake = asyncio.Event()
        self.hits = 0
        self.misses = 0
        self.retired = 0
        # Failures to make a sandbox ready since the last success.
        self.failures = 0

    # -- what the rest of the agent sees ----------------------------------------

    @property
    def ready(self) -> int:
        return len(self._ready)

    def owns(self, found: ListedSandbox) -> bool:
        """Whether an existing pool sandbox is this pool's (the reconciler destroys the others)."""
        pool_id = found.sandbox.session_id
        return pool_id in self._busy or any(w.pool_id == pool_id for w in self._ready)

    async def claim(self, spec: SandboxSpec, agent: str = "") -> Claimed | None:
        """A ready sandbox rebound to `spec`'s session (with its engine), or None when none fits.
        `agent`: the session's WarmAgent key, whose engine it takes first (empty: none, and then
        only a sandbox of the default engine)."""
        key = template_key(self._driver.name, spec)
        warm = self._take(key, agent)
        if warm is None:
            self.misses += 1
            return None
        self._busy.add(warm.pool_id)
        # Refill behind it, once the claiming session is under way: a sandbox (and engine) being
        # made competes for the CPU with the session's own start.
        asyncio.get_running_loop().call_later(self._settings.refill_delay, self._wake.set)
        try:
            async with asyncio.timeout(self._settings.rebind_timeout):
                sandbox = await self._driver.rebind(warm.sandbox, spec)
        except Exception as exc:
            log.warning(
                "pool_rebind_failed",
                sandbox_id=warm.sandbox.sandbox_id,
                session_id=spec.session_id,
                error=f"{type(exc).__name__}: {exc}",
            )
            await self._retire(warm, "rebinding it failed")
            self.misses += 1
            return None
        finally:
            self._busy.discard(warm.pool_id)
        self.hits += 1
        log.info(
            "pool_claimed",
            session_id=spec.session_id,
            sandbox_id=sandbox.sandbox_id,
            ready=len(self._ready),
            engine=warm.engine is not None,
            agent_engine=bool(warm.agent),
        )
        kind = self._engines.kind if self._engines is not None and warm.engine is not None else ""
        return Claimed(sandbox, warm.pool_id, warm.engine, kind, warm.agent)

    def remember(self, spec: SandboxSpec) -> None:
        """A session started in the environment of `spec` (not the built-in one): keep sandboxes
        for it (when the pool keeps any per environment) for `environment_recency` seconds."""
        if self._settings.per_environment <= 0:
            return
        key = template_key(self._driver.name, spec)
        known = key in self._environments
        self._environments[key] = (spec, self._clock())
        if not known:
            self._wake.set()

    def remember_agent(self, agent: WarmAgent) -> None:
        """A session of `agent`'s version started: keep an engine started ahead for it (when the
        pool starts engines and has room for agent versions), the least recently used forgotten."""
        slots = self._agent_slots()
        if slots <= 0:
            return
        known = agent.key in self._agents
        self._agents[agent.key] = (agent, self._clock())
        self._agents.move_to_end(agent.key)
        while len(self._agents) > slots:
            self._agents.popitem(last=False)
            log.info("pool_agent_version_forgotten", reason="other agent versions started more lately")
        if not known:
            self._wake.set()

    def _agent_slots(self) -> int:
        """How many agent versions get an engine each: never the default engine's last sandbox."""
        if self._engines is None:
            return 0
        return max(0, min(self._settings.agent_versions, self._settings.size - 1))

    def _take(self, key: str, agent: str) -> _Warm | None:
        """Pop the oldest fresh sandbox of `key` whose engine is `agent`'s, else (for an agent) one
        of the default engine; synchronous, so two claims never get the same one."""
        oldest_allowed = self._clock() - self._settings.max_age
        for wanted in (agent, "") if agent else ("",):
            for warm in self._ready:
                if warm.engine is not None and warm.engine.ended:
                    self._wake.set()  # the run loop retires it
                    continue
                if warm.key == key and warm.agent == wanted and warm.created_at >= oldest_allowed:
                    self._ready.remove(warm)
                    return warm
        return None

    # -- background ----------------------------------------------------------------

    async def start(self) -> None:
        """Take back the pool sandboxes an earlier agent process left, if still current; retire the rest.
        Call before the reconciler's first pass."""
        if self._inventory is None:
            return
        key = self._key()
        oldest_allowed = self._clock() - self._settings.max_age
        async with asyncio.timeout(self._settings.list_timeout):
            leftovers = await self._inventory.sandboxes()
        for found in leftovers:
            if not pool_key(found):
                continue
            warm = _Warm(found.sandbox, pool_key(found), found.created_at)
            if warm.key == key and warm.created_at >= oldest_allowed and len(self._ready) < self._settings.size:
                self._ready.append(warm)
                log.info("pool_sandbox_taken_back", sandbox_id=found.sandbox.sandbox_id)
            else:
                await self._retire(warm, "left by an earlier agent process, stale or beyond the pool's size")

    async def run(self) -> None:
        """Keep the pool full and fresh until cancelled; then close the ready sandboxes' engines
        (the sandboxes stay, for the next process to take back)."""
        try:
            while True:
                # Cleared before looking, not after: a wake-up while the pool makes or retires
                # sandboxes (a new environment, a claim) is acted on at once, not at the next timed look.
                self._wake.clear()
                await self._retire_stale()
                failed = await self._warm_taken_back() or await self._fill()
                wait = self._failed() if failed else self._next_expiry()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._wake.wait()
        finally:
            engines = [warm.engine for warm in self._ready if warm.engine is not None]
            for warm in self._ready:
                warm.engine = None
            await asyncio.shield(asyncio.gather(*(self._close(engine) for engine in engines)))

    def _failed(self) -> float:
        """Count a failure in a row and say so; how long to wait before the next try."""
        self.failures += 1
        wait: float = min(self._settings.max_backoff, self._settings.backoff * 2.0 ** (self.failures - 1))
        log.warning(
            "pool_failing",
            consecutive_failures=self.failures,
            retry_in=wait,
            consequence="sessions start without a ready sandbox until the pool recovers",
        )
        return wait

    def refill(self) -> None:
        """Look again now (for example after the template changed)."""
        self._wake.set()

    async def _fill(self) -> bool:
        """Create until each wanted template has its count ready; True if a create failed."""
        for template, count, engine, agent in self._wanted():
            key = template_key(self._driver.name, template)
            agent_key = agent.key if agent is not None else ""
            label = key + _AGENT_POOL if agent is not None else key
            while sum(1 for warm in self._ready if warm.key == key and warm.agent == agent_key) < count:
                pool_id = f"pool-{uuid.uuid4().hex[:16]}"
                self._busy.add(pool_id)
                try:
                    async with asyncio.timeout(self._settings.create_timeout):
                        sandbox = await self._driver.create(_pool_spec(template, pool_id, label))
                except Exception as exc:
                    log.warning("pool_create_failed", error=f"{type(exc).__name__}: {exc}")
                    # Whatever part of it exists carries the pool label: the reconciler destroys it.
                    return True
                finally:
                    self._busy.discard(pool_id)
                warm = _Warm(sandbox, key, self._clock(), agent=agent_key)
                if not await self._make_ready(warm, engine=engine, agent=agent):
                    return True
        return False

    def _wanted(self) -> list[tuple[SandboxSpec, int, bool, WarmAgent | None]]:
        """(template, how many, with an engine, whose configuration): the built-in environment's
        default engines, then one for each recent agent version, then each recent environment's."""
        template = self._template()
        agents = [agent for agent, _ in self._agents.values()]
        wanted: list[tuple[SandboxSpec, int, bool, WarmAgent | None]] = [
            (template, self._settings.size - len(agents), True, None)
        ]
        wanted += [(template, 1, True, agent) for agent in reversed(agents)]  # the latest first
        wanted += [(spec, self._settings.per_environment, False, None) for spec, _ in self._environments.values()]
        return wanted

    def _kept(self) -> set[tuple[str, str]]:
        """The (template key, agent key) pairs the pool keeps sandboxes of now; forgets environments
        and agent versions no longer recent."""
        recent_since = self._clock() - self._settings.environment_recency
        for key, (_, used) in list(self._environments.items()):
            if used < recent_since:
                del self._environments[key]
                log.info("pool_environment_forgotten", key=key)
        agents_since = self._clock() - self._settings.agent_recency
        for agent, (_, used) in list(self._agents.items()):
            if used < agents_since:
                del self._agents[agent]
                log.info("pool_agent_version_forgotten", reason="no session of it lately")
        key = self._key()
        return {(key, ""), *((key, agent) for agent in self._agents), *((env, "") for env in self._environments)}

    async def _warm_taken_back(self) -> bool:
        """Start the engines of ready sandboxes that have none (taken back at start); True if one failed."""
        if self._engines is None:
            return False
        key = self._key()  # an environment's sandboxes get no engine
        for warm in [warm for warm in self._ready if warm.engine is None and warm.key == key and not warm.agent]:
            with contextlib.suppress(ValueError):
                self._ready.remove(warm)  # not claimable while its engine starts
            if not await self._make_ready(warm):
                return True
        return False

    async def _make_ready(self, warm: _Warm, *, engine: bool = True, agent: WarmAgent | None = None) -> bool:
        """Start `warm`'s engine (if the pool has a warmer and `engine`; with `agent`'s configuration
        if given) and add it to the ready sandboxes; False, having retired it, when the engine did
        not start."""
        if self._engines is not None and engine:
            self._busy.add(warm.pool_id)
            try:
                warm.engine = await self._engines.start(warm.sandbox, agent.config if agent is not None else None)
            except Exception as exc:
                log.warning(
                    "pool_engine_start_failed", sandbox_id=warm.sandbox.sandbox_id, error=f"{type(exc).__name__}: {exc}"
                )
                await self._retire(warm, "its engine did not start")
                return False
            finally:
                self._busy.discard(warm.pool_id)
        self._ready.append(warm)
        self.failures = 0
        log.info(
            "pool_sandbox_ready",
            sandbox_id=warm.sandbox.sandbox_id,
            ready=len(self._ready),
            agent_engine=bool(warm.agent),
        )
        return True

    async def _close(self, engine: EngineSession) -> None:
        try:
            async with asyncio.timeout(self._settings.close_engine_timeout):
                await engine.close()
        except Exception as exc:  # its sandbox is destroyed next, and the process with it
            log.warning("pool_engine_close_failed", error=f"{type(exc).__name__}: {exc}")

    async def _retire_stale(self) -> None:
        kept = self._kept()
        oldest_allowed = self._clock() - self._settings.max_age
        for warm in list(self._ready):
            if (warm.key, warm.agent) not in kept:
                reason = "its template changed, or its environment or agent version had no session lately"
            elif warm.created_at < oldest_allowed:
                reason = "older than the pool's max age"
            elif warm.engine is not None and warm.engine.ended:
                reason = "its engine ended"
            else:
                continue
            with contextlib.suppress(ValueError):
                self._ready.remove(warm)
            await self._retire(warm, reason)

    async def _retire(self, warm: _Warm, reason: str) -> None:
        self._busy.add(warm.pool_id)
        if warm.engine is not None:
            engine, warm.engine = warm.engine, None
            await self._close(engine)
        try:
            async with asyncio.timeout(self._settings.destroy_timeout):
                verdict = await self._driver.destroy(warm.sandbox)
        except Exception as exc:
            log.warning("pool_retire_failed", sandbox_id=warm.sandbox.sandbox_id, error=f"{type(exc).__name__}: {exc}")
            verdict = DestroyVerdict.UNCONFIRMED
        finally:
            self._busy.discard(warm.pool_id)
        if verdict is DestroyVerdict.CONFIRMED:
            self.retired += 1
            log.info("pool_sandbox_retired", sandbox_id=warm.sandbox.sandbox_id, reason=reason)
        else:
            # No longer the pool's: the reconciler destroys it, and retries until confirmed.
            log.warning("pool_retire_unconfirmed", sandbox_id=warm.sandbox.sandbox_id, verdict=verdict.value)

    def _key(self) -> str:
        return template_key(self._driver.name, self._template())

    def _next_expiry(self) -> float:
        """Seconds until the oldest ready sandbox is too old, or the next look at which environments
        are recent (at least 1, at most a minute)."""
        if not self._ready:
            return 60.0
        oldest = min(w.created_at for w in self._ready)
        return min(60.0, max(1.0, oldest + self._settings.max_age - self._clock()))


def _pool_spec(template: SandboxSpec, pool_id: str, key: str) -> SandboxSpec:
    """The template made into a spec for a pool sandbox: no session's id, labels or environment."""
    labels = {k: v for k, v in template.labels.items() if k != SESSION_LABEL}
    labels[POOL_LABEL] = key
    return dataclasses.replace(template, session_id=pool_id, labels=labels, env={})
