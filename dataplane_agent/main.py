"""The agent's composition root: wires state, outbox, driver, engines, model, commands and relay.

`run_agent(settings)` runs until cancelled or `stop` is set (embeddable, as
`astrabox up` does); `main(argv)` is the process entry point with logging and
SIGTERM/SIGINT handling.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import gc
import re
import signal
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from astrabox.backoff import Backoff
from astrabox.runner.v1.runner_service_pb2 import EgressRefused
from astrabox.secret_settings import SecretSettingError, warn_on_command_line
from dataplane_agent.credentials import ControlPlaneLink, ResolvedCredentials
from dataplane_agent.engines.base import EngineAdapter, EngineError
from dataplane_agent.environments.build_command import LayerBuilds
from dataplane_agent.environments.layers import LayerBuilder, LayerStore
from dataplane_agent.environments.local_layers import LocalLayers
from dataplane_agent.errors import AgentError
from dataplane_agent.health import FILE_NAME as HEALTH_FILE_NAME
from dataplane_agent.health import HealthFile
from dataplane_agent.metrics import AgentMetrics, ScrapeSources
from dataplane_agent.pool.warm_engines import EngineWarmer, WarmEngineSettings
from dataplane_agent.pool.warm_pool import PoolSettings, WarmPool
from dataplane_agent.relay import credential
from dataplane_agent.relay.client import RelayClient, RelayConfig
from dataplane_agent.relay.commands import CommandApplier
from dataplane_agent.relay.deltas import LiveDeltas
from dataplane_agent.relay.outbox import Outbox
from dataplane_agent.routes.egress.bindings import BindingSource
from dataplane_agent.routes.egress.builds import BuildEgress
from dataplane_agent.routes.egress.interception import Interception
from dataplane_agent.routes.egress.proxy import EgressProxy
from dataplane_agent.routes.model import ModelRoute, Upstream
from dataplane_agent.runtimes.disk_limit import MeasuredDiskLimit
from dataplane_agent.runtimes.launch import RuntimeTimeouts
from dataplane_agent.runtimes.reconcile import Inventory, Placements, Reconciler, ReconcileSettings, inventory_for
from dataplane_agent.runtimes.runtimes import Runtimes
from dataplane_agent.sandboxes.base import Sandbox, SandboxDriver, SandboxError, SandboxSpec
from dataplane_agent.sandboxes.disk import WorkspaceDisk
from dataplane_agent.sandboxes.disk_usage import DiskUsage
from dataplane_agent.sandboxes.isolation import check_runtime, offered
from dataplane_agent.sandboxes.usage import UsageSampler
from dataplane_agent.settings import ANTHROPIC_API_URL, AgentSettings, RetiredSetting
from dataplane_agent.state import AgentState
from dataplane_agent.state_database import Database, keep_private
from dataplane_agent.turns.transcripts import TranscriptStore
from dataplane_agent.workspace.archives import UnpackLimits
from dataplane_agent.workspace.service import WorkspaceService
from serverkit import heap, logs, metrics_http, tracing
from serverkit.waits import bounded

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Started:
    """A started agent: its id, and where it serves /metrics ("" when --metrics-listen is off)."""

    agent_id: str
    metrics_address: str


async def run_agent(
    settings: AgentSettings, *, stop: asyncio.Event | None = None, started: Callable[[Started], None] | None = None
) -> None:
    """Run the agent until cancelled or until `stop` is set; `started` is called once it serves."""
    keep_private(settings.state_dir)
    try:
        tracing.configure("astrabox-agent", settings.otlp_endpoint)
    except tracing.TracingError as error:
        raise AgentError(str(error)) from None
    with _exclusive(settings.state_dir / "agent.lock"):
        db = await Database.open(settings.state_dir / "agent.db")
        try:
            await _run(settings, db, stop or asyncio.Event(), started)
        finally:
            await db.close()
            # The SDK lets go of an ended CLI's subprocess transport without closing it; collected
            # now, while the loop runs, it closes quietly, rather than after asyncio.run closed the
            # loop, where its finalizer prints a RuntimeError traceback per engine into the log.
            gc.collect()


async def _run(
    settings: AgentSettings, db: Database, stop: asyncio.Event, started: Callable[[Started], None] | None
) -> None:
    state, outbox = AgentState(db), Outbox(db)
    metrics = AgentMetrics()
    agent_id = settings.agent_id or await _stable_agent_id(state)
    structlog.contextvars.bind_contextvars(agent_id=agent_id)
    disk, measured = _disk_limit(settings)
    driver = _make_driver(settings, agent_id, disk)
    try:
        await bounded(driver.probe(), settings.driver_probe_timeout)
    except (SandboxError, TimeoutError) as exc:
        raise AgentError(f"the {settings.driver} sandbox driver cannot run here: {exc or 'probe timed out'}") from exc
    agent_credential = credential.load_or_create(settings.state_dir)
    # Sessions' credentials from the control plane: the egress proxy's bindings and the HTTP MCP
    # servers' secrets, one source for both.
    credentials = ResolvedCredentials(
        ControlPlaneLink(settings.controlplane, agent_id, agent_credential, _controlplane_ca(settings)),
        ttl=settings.egress_credentials_ttl,
    )
    engines = _make_engines(settings, credentials)
    await _check_cli(driver, _cli(settings), agent_id)
    placements = Placements()
    inventory = inventory_for(driver, agent_id, settings.state_dir / "sandboxes")
    async with _model(settings) as model, _egress(settings, outbox, credentials) as egress:
        layers = _make_layers(settings, driver, state, agent_id, BuildEgress(egress))
        if layers is not None:
            await layers.start()
        pool = _make_pool(settings, driver, lambda: runtimes.sandbox_template(), inventory, engines, model)
        deltas = LiveDeltas()
        runtimes = Runtimes(
            agent_id=agent_id,
            db=db,
            state=state,
            outbox=outbox,
            driver=driver,
            engines=engines,
            model=model,
            transcripts=TranscriptStore(settings.state_dir / "transcripts"),
            placements=placements,
            pool=pool,
            retain_sandboxes=settings.retain_sandboxes,
            egress=egress,
            deltas=deltas,
            layers=layers,
            timeouts=RuntimeTimeouts(
                create_sandbox=settings.sandbox_create_timeout,
                start_engine=settings.engine_start_timeout,
                git_clone=settings.git_clone_timeout,
            ),
            metrics=metrics,
            disk=measured,
        )
        reconciler = Reconciler(
            state=state,
            outbox=outbox,
            driver=driver,
            runtimes=runtimes,
            placements=placements,
            inventory=inventory,
            pool=pool,
            settings=ReconcileSettings(interval=settings.reconcile_interval, retry=settings.reconcile_retry),
        )
        builds = LayerBuilds(layers, agent_id, lambda progress: relay.send_progress(progress))
        applier = CommandApplier(db, state, runtimes, builds)

        async def sandbox_of(session_id: str) -> Sandbox | None:
            record = await state.session(session_id)
            return record.sandbox if record else None

        upload_limits = UnpackLimits(max_bytes=settings.upload_max_bytes, max_entries=settings.upload_max_entries)
        workspace = WorkspaceService(
            sandbox_of,
            driver,
            upload_limits,
            room=measured.room if measured is not None else None,
            network_env=egress.env,
        )
        relay = RelayClient(
            RelayConfig(
                target=settings.controlplane,
                agent_id=agent_id,
                enrollment_token=settings.enrollment_token,
                join_token=settings.join_token,
                credential=agent_credential,
                instance_id=uuid.uuid4().hex,
                drivers=(driver.name,),
                isolation=offered(settings.driver, settings.sandbox_runtime),
                engines=tuple(engines[kind].manifest for kind in sorted(engines)),
                capacity=settings.capacity,
                root_certificates=_controlplane_ca(settings),
                batch_size=settings.relay_batch_size,
                max_batch_bytes=settings.relay_batch_bytes,
                window=settings.relay_window,
                connect_timeout=settings.relay_connect_timeout,
                write_timeout=settings.relay_write_timeout,
                backoff=Backoff(initial=settings.relay_redial_first, maximum=settings.relay_redial_longest),
            ),
            state=state,
            outbox=outbox,
            commands=applier,
            on_welcome=reconciler.on_welcome,
            workspace=workspace,
            deltas=deltas,
        )
        usage = UsageSampler(driver, lambda: [sandbox for _, sandbox in runtimes.running()])
        metrics.attach(
            ScrapeSources(
                outbox=outbox,
                relay=relay,
                state=state,
                running=lambda: len(runtimes.running()),
                warm_ready=lambda: pool.ready if pool is not None else 0,
                leaked=lambda: reconciler.leaked,
                reaped=lambda: reconciler.reaped,
                usage=usage if settings.metrics_listen else None,
            ),
            asyncio.get_running_loop(),
        )
        try:
            endpoint = (
                metrics_http.serve(settings.metrics_listen, metrics.registry) if settings.metrics_listen else None
            )
        except metrics_http.MetricsListenError as error:
            raise AgentError(str(error)) from None
        await runtimes.recover()
        await reconciler.start()
        if pool is not None:
            await pool.start()
        async with asyncio.TaskGroup() as tasks:
            loops = [tasks.create_task(runtimes.run()), tasks.create_task(applier.run())]
            await runtimes.wait_running()
            await applier.wait_running()
            loops.append(tasks.create_task(reconciler.run()))
            if pool is not None:
                loops.append(tasks.create_task(pool.run()))
            if layers is not None:
                sweep = layers.sweep_every(settings.layer_sweep_interval, runtimes.layers_in_use)
                loops.append(tasks.create_task(sweep))
            if measured is not None:
                loops.append(tasks.create_task(measured.watch(runtimes.running, runtimes.stop_over_limit)))
            loops.append(tasks.create_task(relay.run()))
            if endpoint is not None:  # measured for the metrics only
                loops.append(tasks.create_task(usage.run()))
            health = HealthFile(
                settings.state_dir / HEALTH_FILE_NAME,
                stream_connected=lambda: relay.connected,
                outbox=outbox,
                driver=driver,
                write_interval=settings.health_interval,
                driver_probe_interval=settings.driver_probe_interval,
                driver_probe_timeout=settings.driver_probe_timeout,
            )
            loops.append(tasks.create_task(health.run()))
            log.info(
                "agent_started",
                controlplane=settings.controlplane,
                driver=driver.name,
                engines=sorted(engines),
                state_dir=str(settings.state_dir),
                offline_model=settings.uses_offline_model,
                metrics_address=endpoint.address if endpoint else None,
            )
            if started is not None:
                started(Started(agent_id, endpoint.address if endpoint else ""))
            await stop.wait()
            log.info("agent_stopping")
            await workspace.close()
            await credentials.close()
            for task in reversed(loops):  # relay first, engines last
                task.cancel()
            if endpoint is not None:
                endpoint.close()
    log.info("agent_stopped")


async def _stable_agent_id(state: AgentState) -> str:
    agent_id = await state.meta("agent_id")
    if not agent_id:
        host = re.sub(r"[^a-z0-9-]+", "-", socket.gethostname().lower()).strip("-") or "host"
        agent_id = f"{host}-{uuid.uuid4().hex[:8]}"
        await state.set_meta("agent_id", agent_id)
    return agent_id


def _cli(settings: AgentSettings) -> Path:
    """The Claude Code CLI sessions run: --claude-cli, else the one bundled with the SDK."""
    from dataplane_agent.engines.claude_code import BUNDLED_CLI

    return Path(settings.claude_cli).resolve() if settings.claude_cli else BUNDLED_CLI


async def _check_cli(driver: SandboxDriver, cli: Path, agent_id: str) -> None:
    from dataplane_agent.engines.cli_check import CHECK_TIMEOUT, check_cli

    try:
        await check_cli(driver, cli, agent_id)
    except EngineError as exc:
        raise AgentError(str(exc)) from exc
    except SandboxError as exc:
        raise AgentError(f"the {driver.name} sandbox driver cannot make a sandbox to run the CLI in: {exc}") from exc
    except TimeoutError:
        raise AgentError(
            f"the Claude Code CLI {cli} did not answer --version inside a {driver.name} sandbox within "
            f"{CHECK_TIMEOUT:.0f}s"
        ) from None


def _make_layers(
    settings: AgentSettings, driver: SandboxDriver, state: AgentState, agent_id: str, network: BuildEgress
) -> LayerStore | None:
    """The driver's environment layers; None where the driver builds none (a session whose
    environment has packages then fails to start, saying so). Setup scripts go out through `network`
    on both drivers."""
    retention = settings.layer_retention_days * 86400
    if settings.driver == "docker":
        from dataplane_agent.environments.docker_layers import DockerLayers

        builder: LayerBuilder = DockerLayers(
            settings.state_dir / "layers",
            settings.image,
            build_timeout=settings.layer_build_timeout,
            network=network,
            runtime=settings.sandbox_runtime,
        )
    elif settings.driver == "local":
        builder = LocalLayers(settings.state_dir / "layers", driver, agent_id, network, settings.layer_build_timeout)
    else:
        return None
    return LayerStore(builder, state, retention=retention)


def _make_driver(settings: AgentSettings, agent_id: str, disk: WorkspaceDisk | None) -> SandboxDriver:
    if why := check_runtime(settings.driver, settings.sandbox_runtime):
        raise AgentError(why)
    if settings.driver == "local":
        from dataplane_agent.sandboxes.host_user import HostUser
        from dataplane_agent.sandboxes.limits import LocalLimits
        from dataplane_agent.sandboxes.local import LocalSandboxDriver

        limits = LocalLimits(
            pids=settings.sandbox_pids, memory_mb=settings.sandbox_memory_mb, cpus=settings.sandbox_cpus
        )
        return LocalSandboxDriver(
            settings.state_dir / "sandboxes", limits=limits, host_user=HostUser(settings.sandbox_host_uid), disk=disk
        )
    if settings.driver == "docker":
        from dataplane_agent.sandboxes.docker import ContainerLimits, DockerSandboxDriver

        try:
            return DockerSandboxDriver(
                settings.state_dir / "sandboxes",
                image=settings.image,
                installation=settings.installation,
                agent_id=agent_id,
                limits=ContainerLimits(
                    cpus=settings.sandbox_cpus, memory_mb=settings.sandbox_memory_mb, pids=settings.sandbox_pids
                ),
                programs=[_cli(settings)],
                disk=disk,
                host_uid=settings.sandbox_host_uid,
                runtime=settings.sandbox_runtime,
            )
        except SandboxError as exc:
            raise AgentError(str(exc)) from exc
    raise AgentError(f"unknown sandbox driver {settings.driver!r} (this agent has: local, docker)")


def _disk_limit(settings: AgentSettings) -> tuple[WorkspaceDisk | None, MeasuredDiskLimit | None]:
    """How the workspace disk limit is enforced: by an image per workspace where the host can
    mount one, else by measurement (runtimes.disk_limit); neither without a limit."""
    if not settings.sandbox_disk_mb:
        return None, None
    if settings.sandbox_disk_by == "image":
        disk = WorkspaceDisk(settings.sandbox_disk_mb)
        if not (why := disk.unavailable()):
            return disk, None
        log.warning(
            "sandbox_disk_image_unavailable",
            reason=why,
            consequence=f"the disk limit is measured every {settings.sandbox_disk_check_seconds:g}s "
            "and enforced by stopping runtimes over it",
        )
    measured = MeasuredDiskLimit(
        settings.sandbox_disk_mb, settings.sandbox_disk_check_seconds, DiskUsage(settings.sandbox_host_uid)
    )
    return None, measured


def _make_pool(
    settings: AgentSettings,
    driver: SandboxDriver,
    template: Callable[[], SandboxSpec],
    inventory: Inventory,
    engines: dict[str, EngineAdapter],
    model: ModelRoute,
) -> WarmPool | None:
    if settings.warm_pool <= 0 and settings.warm_pool_per_environment <= 0:
        return None
    if not callable(getattr(driver, "rebind", None)):
        raise AgentError(
            f"the {driver.name} sandbox driver cannot hand pool sandboxes to sessions: run with --warm-pool 0"
        )
    pool_settings = PoolSettings(
        size=max(0, settings.warm_pool),
        max_age=settings.warm_pool_max_age,
        per_environment=max(0, settings.warm_pool_per_environment),
        create_timeout=settings.warm_pool_create_timeout,
        backoff=settings.warm_pool_retry_first,
        max_backoff=settings.warm_pool_retry_longest,
        environment_recency=settings.warm_pool_environment_recency,
        agent_versions=max(0, settings.warm_pool_agent_versions),
    )
    warm = WarmEngineSettings()
    warmer = EngineWarmer(engines[warm.engine], driver, model, warm) if settings.warm_engines else None
    return WarmPool(driver, template, pool_settings, inventory=inventory, engines=warmer)  # type: ignore[arg-type]


def _controlplane_ca(settings: AgentSettings) -> bytes | None:
    if not settings.controlplane_ca:
        return None
    try:
        return Path(settings.controlplane_ca).expanduser().read_bytes()
    except OSError as error:
        raise AgentError(
            f"cannot read the control plane's CA bundle {settings.controlplane_ca}: {error.strerror}"
        ) from error


def _make_engines(settings: AgentSettings, credentials: ResolvedCredentials) -> dict[str, EngineAdapter]:
    from dataplane_agent.engines.claude_code import ClaudeCodeAdapter
    from dataplane_agent.engines.http_mcp import HttpMcpConnector
    from dataplane_agent.engines.mcp_destinations import McpDestinations, parse_networks

    _warn_of_credential_files(settings.state_dir / "credentials")
    try:
        destinations = McpDestinations(parse_networks(settings.mcp_allowed_networks))
    except ValueError as error:
        raise AgentError(f"--mcp-allowed-networks: {error}") from None
    connector = HttpMcpConnector(credentials, destinations=destinations)
    adapter = ClaudeCodeAdapter(cli_path=_cli(settings), http_mcp=connector)
    return {adapter.kind: adapter}


def _warn_of_credential_files(directory: Path) -> None:
    """The directory HTTP MCP servers' credentials were once read from: its files are used no more,
    and are secrets lying on the host, so the operator is told to move them to the credential store."""
    try:
        names = sorted(entry.name for entry in directory.iterdir())
    except OSError:
        return
    if names:
        log.warning(
            "credential_files_unused",
            directory=str(directory),
            files=names[:20],
            hint="HTTP MCP servers' credentials come from the project's credential store now: put each with"
            " `astrabox credentials put NAME` and delete these files",
        )


@contextlib.asynccontextmanager
async def _model(settings: AgentSettings) -> AsyncIterator[ModelRoute]:
    """The route sandboxes reach the model by: to the configured model with the real key, or to the
    offline model (served here) when none is configured. Only the route holds the key."""
    route_dir = settings.state_dir / "model-route"
    if not settings.uses_offline_model:
        if not settings.api_key:
            log.warning("model_key_missing", base_url=settings.model_base_url)
        async with ModelRoute(
            route_dir, Upstream(settings.model_base_url or ANTHROPIC_API_URL, settings.api_key)
        ) as route:
            yield route
        return
    from dataplane_agent.offline_model import OfflineModel

    async with OfflineModel() as offline, ModelRoute(route_dir, Upstream(offline.base_url)) as route:
        yield route


@contextlib.asynccontextmanager
async def _egress(settings: AgentSettings, outbox: Outbox, bindings: BindingSource) -> AsyncIterator[EgressProxy]:
    """The egress proxy: sandboxes' only way to the network, as their sessions' policies allow, with
    their credential bindings added on the way out."""
    from dataplane_agent.engines.mcp_destinations import parse_networks
    from dataplane_agent.routes.egress.policy import parse_patterns

    try:
        networks = parse_networks(settings.egress_allowed_networks)
    except ValueError as error:
        raise AgentError(f"--egress-allowed-networks: {error}") from None
    try:
        registries = parse_patterns(settings.package_registries)
    except ValueError as error:
        raise AgentError(f"--package-registries: {error}") from None

    try:
        interception = await asyncio.to_thread(_interception, settings.egress_ca_file)
    except (OSError, ValueError) as error:
        raise AgentError(f"--egress-ca-file: cannot use {settings.egress_ca_file}: {error}") from None

    async def report(session_id: str, refused: EgressRefused) -> None:
        await outbox.append(session_id, "", refused)

    # Beside the model route's socket: a docker sandbox mounts that directory (not the sockets, which
    # a restarted agent makes anew), so both reach it at /run/astrabox; the local driver mounts each
    # socket by itself.
    async with EgressProxy(
        settings.state_dir / "model-route",
        bindings,
        allowed_networks=networks,
        registries=registries,
        report=report,
        interception=interception,
    ) as proxy:
        yield proxy


def _interception(extra_roots_file: str) -> Interception:
    """The egress proxy's CA, and the roots it verifies hosts with (the system's, `extra_roots_file`'s)."""
    extra_roots = Path(extra_roots_file).expanduser().read_bytes() if extra_roots_file else b""
    return Interception(extra_roots)


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """One agent per state directory: two would hand out the same output sequence numbers."""
    with open(lock_path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise AgentError(f"another agent is using the state directory {lock_path.parent}") from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


async def _serve(settings: AgentSettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        # Its startup objects out of every later collection, which would stall its streams (serverkit.heap).
        await run_agent(settings, stop=stop, started=lambda _: heap.freeze_startup())
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)


def main(argv: Sequence[str] | None = None) -> None:
    try:
        settings = AgentSettings.from_args(argv)
    except (SecretSettingError, RetiredSetting) as error:
        sys.exit(f"astrabox agent: {error}")
    logs.configure(settings.log_format, settings.log_level, stream=sys.stdout)
    warn_on_command_line(settings.secrets_on_command_line, "astrabox agent", log)
    try:
        asyncio.run(_serve(settings))
    except AgentError as exc:
        log.error("agent_failed", error=str(exc))
        sys.exit(f"astrabox agent: {exc}")
