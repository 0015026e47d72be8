"""The control plane's composition root: database, kernel, relay, gRPC server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import timedelta

import asyncpg
import grpc
import structlog
from google.protobuf import descriptor, descriptor_pool
from grpc_health.v1 import health, health_pb2_grpc

from astrabox.admin.v1 import admin_service_pb2_grpc
from astrabox.agents.v1 import agent_service_pb2_grpc
from astrabox.credentialstore.v1 import credential_service_pb2_grpc
from astrabox.environments.v1 import environment_service_pb2_grpc
from astrabox.memory.v1 import memory_service_pb2_grpc
from astrabox.runner.v1 import runner_service_pb2, runner_service_pb2_grpc
from astrabox.schedules.v1 import schedule_service_pb2_grpc
from astrabox.sessionkernel.v1 import session_kernel_service_pb2_grpc
from astrabox.webhooks.v1 import webhook_service_pb2_grpc
from controlplane import reflection
from controlplane.agent_definitions.api import AgentServicer
from controlplane.agent_definitions.definitions import AgentDefinitions
from controlplane.agents import Agents
from controlplane.api import SessionKernelServicer
from controlplane.conversation import Conversation
from controlplane.credential_store import cipher
from controlplane.credential_store.api import CredentialServicer
from controlplane.credential_store.credentials import CredentialStore
from controlplane.credential_store.resolve import CredentialResolver
from controlplane.database import create_pool, migrate
from controlplane.deadlines import DeadlineSweeper
from controlplane.deltas import DeltaHub
from controlplane.destructions import DestroyRetries
from controlplane.drains import Drains
from controlplane.edge import Edge
from controlplane.environments.api import EnvironmentServicer
from controlplane.environments.builds import BuildProgressHub, EnvironmentBuilds
from controlplane.environments.definitions import EnvironmentDefinitions
from controlplane.forks import Forks
from controlplane.forwarding import ForwardingServicer, ReplicaLinks, read_cluster_secret
from controlplane.health import HealthMonitor
from controlplane.identity.admin import AdminServicer
from controlplane.identity.agent_admission import Admission, AgentAdmission, loopback_only
from controlplane.identity.authenticator import Authenticator, Credentials
from controlplane.identity.bootstrap import bootstrap
from controlplane.identity.rules import (
    ADMIN,
    AGENTS,
    CREDENTIALS,
    ENVIRONMENTS,
    KERNEL,
    MEMORY,
    SCHEDULES,
    WEBHOOKS,
)
from controlplane.identity.tenancy import Tenancy
from controlplane.identity.tokens import TokenVerifier
from controlplane.journal import NOTIFY_CHANNEL, Journal
from controlplane.kernel import SessionKernel
from controlplane.leases import LeaseKeeper
from controlplane.live import LiveTail
from controlplane.memory.api import MemoryServicer
from controlplane.memory.stores import MemoryStores
from controlplane.metrics import ControlPlaneMetrics, RpcMetrics
from controlplane.outputs import OutputCommitter
from controlplane.page_tokens import PageTokens
from controlplane.quotas import Quotas
from controlplane.relay import RelaySettings, RunnerServicer
from controlplane.schedules.api import ScheduleServicer
from controlplane.schedules.definitions import Limits, ScheduleDefinitions
from controlplane.schedules.scheduler import Scheduler, SchedulerSettings
from controlplane.settings import (
    MAX_GRPC_MESSAGE_BYTES,
    ControlPlaneSettings,
    SettingsError,
    advertise_address,
    console_sign_in,
    oidc_settings,
    tls_credentials,
    web_origins,
    web_tls,
)
from controlplane.subagents import Subagents, SubagentSettings
from controlplane.turns import Turns
from controlplane.verdicts import CommandVerdicts
from controlplane.web.serving import InternalSocket, WebListenError, serve_web
from controlplane.web.sign_in import ConsoleSignIn
from controlplane.webhooks.api import WebhookServicer
from controlplane.webhooks.destinations import Destinations
from controlplane.webhooks.dispatcher import DeliverySettings, Dispatcher
from controlplane.webhooks.sender import Sender
from controlplane.webhooks.subscriptions import Webhooks
from controlplane.workspace import WorkspaceFiles, WorkspaceRouter, WorkspaceTimeouts
from serverkit import metrics_http, tracing
from serverkit.addresses import parse_networks
from serverkit.waits import bounded

log = structlog.get_logger(__name__)


RUNNER = runner_service_pb2.DESCRIPTOR.services_by_name["RunnerService"].full_name
SERVICE_NAMES = (KERNEL, ADMIN, AGENTS, CREDENTIALS, ENVIRONMENTS, WEBHOOKS, SCHEDULES, MEMORY, RUNNER)
# What the web API serves: every client-facing service (agents and replicas speak gRPC only).
WEB_SERVICE_NAMES = (KERNEL, ADMIN, AGENTS, CREDENTIALS, ENVIRONMENTS, WEBHOOKS, SCHEDULES, MEMORY)


def _descriptor(name: str) -> descriptor.ServiceDescriptor:
    return descriptor_pool.Default().FindServiceByName(name)


@dataclass(frozen=True, slots=True)
class RunningControlPlane:
    address: str
    server: grpc.aio.Server
    pool: asyncpg.Pool
    kernel: SessionKernel
    # Where other replicas reach this one.
    advertise_address: str
    # Where /metrics is served ("" when --metrics-listen is off), and what it serves.
    metrics_address: str
    metrics: ControlPlaneMetrics
    # Which agents may connect: `astrabox up` mints its own agent's join token here.
    admission: AgentAdmission
    # Where the web API and the console are served (http(s)://host:port), "" when --web-listen is off.
    web_url: str = ""


class RunnerService:
    """RunnerService's two audiences: agents call Connect (`controlplane.relay`) and
    ResolveCredentials (`controlplane.credential_store.resolve`), other replicas call
    ForwardWorkspace (`controlplane.forwarding`)."""

    def __init__(self, relay: RunnerServicer, forwarding: ForwardingServicer, resolver: CredentialResolver) -> None:
        self.Connect = relay.Connect
        self.ForwardWorkspace = forwarding.ForwardWorkspace
        self.ResolveCredentials = resolver.ResolveCredentials


# grpc_tools generates these without annotations: their types as used here.
_add_session_kernel_service: Callable[[SessionKernelServicer, grpc.aio.Server], None] = (
    session_kernel_service_pb2_grpc.add_SessionKernelServiceServicer_to_server
)
_add_admin_service: Callable[[AdminServicer, grpc.aio.Server], None] = (
    admin_service_pb2_grpc.add_AdminServiceServicer_to_server
)
_add_agent_service: Callable[[AgentServicer, grpc.aio.Server], None] = (
    agent_service_pb2_grpc.add_AgentServiceServicer_to_server
)
_add_credential_service: Callable[[CredentialServicer, grpc.aio.Server], None] = (
    credential_service_pb2_grpc.add_CredentialServiceServicer_to_server
)
_add_environment_service: Callable[[EnvironmentServicer, grpc.aio.Server], None] = (
    environment_service_pb2_grpc.add_EnvironmentServiceServicer_to_server
)
_add_webhook_service: Callable[[WebhookServicer, grpc.aio.Server], None] = (
    webhook_service_pb2_grpc.add_WebhookServiceServicer_to_server
)
_add_schedule_service: Callable[[ScheduleServicer, grpc.aio.Server], None] = (
    schedule_service_pb2_grpc.add_ScheduleServiceServicer_to_server
)
_add_memory_service: Callable[[MemoryServicer, grpc.aio.Server], None] = (
    memory_service_pb2_grpc.add_MemoryServiceServicer_to_server
)
_add_runner_service: Callable[[RunnerService, grpc.aio.Server], None] = (
    runner_service_pb2_grpc.add_RunnerServiceServicer_to_server
)


@contextlib.asynccontextmanager
async def serve(settings: ControlPlaneSettings) -> AsyncIterator[RunningControlPlane]:
    """Run the control plane until the context exits; yields its bound address."""
    tls = tls_credentials(settings)  # a bad TLS or single sign-on configuration stops here, before anything starts
    oidc = oidc_settings(settings)
    origins = web_origins(settings)
    sign_in = console_sign_in(settings)
    try:
        keys = cipher.keyring(settings.credential_key, settings.credential_previous_key)
    except cipher.KeyInvalid as error:
        raise SettingsError(str(error)) from None
    if not settings.enrollment_token and not loopback_only(settings.listen.rpartition(":")[0]):
        raise SettingsError(
            f"an empty enrollment token lets any host that reaches {settings.listen} enrol as an agent: set "
            "ASTRABOX_ENROLLMENT_TOKEN (or --enrollment-token-file), or listen on loopback only"
        )
    if settings.agent_admission == Admission.AUTOMATIC.value and not settings.enrollment_token:
        raise SettingsError(
            "--agent-admission automatic with no enrollment token would give every project's work to any "
            "process that reaches the port: set ASTRABOX_ENROLLMENT_TOKEN (or --enrollment-token-file), or "
            "admit agents by hand (--agent-admission manual)"
        )
    if settings.heartbeat_interval >= settings.lease_ttl:
        raise SettingsError(
            f"--heartbeat-interval ({settings.heartbeat_interval.total_seconds():g} s) must be shorter than "
            f"--lease-ttl ({settings.lease_ttl.total_seconds():g} s), or every lease lapses between heartbeats"
        )
    try:
        webhook_networks = parse_networks(settings.webhook_allowed_networks)
    except ValueError as error:
        raise SettingsError(f"--webhook-allowed-networks: {error}") from None
    metrics = ControlPlaneMetrics()
    try:
        tracing.configure("astrabox-controlplane", settings.otlp_endpoint)
    except tracing.TracingError as error:
        raise SettingsError(str(error)) from None
    pool = await create_pool(settings.database_url)
    try:
        await migrate(pool)
        secret = await read_cluster_secret(pool)
        await bootstrap(pool, settings.bootstrap_key_file)
        internal = InternalSocket() if settings.web_listen else None
        server = grpc.aio.server(
            # Every client-facing call is authenticated first (controlplane.identity), then bounded field
            # by field; RunnerService's callers (agents, other replicas) authenticate on their own and get
            # the decoding and error mapping only.
            interceptors=[
                RpcMetrics(metrics),  # outermost: it counts the status the caller sees
                tracing.RpcTracing(),  # a span per RPC, in the caller's trace
                Authenticator(
                    Credentials(
                        pool,
                        settings.credentials_ttl.total_seconds(),
                        tokens=TokenVerifier(oidc) if oidc else None,
                    ),
                    pool,
                ),
                Edge(
                    KERNEL,
                    ADMIN,
                    CREDENTIALS,
                    WEBHOOKS,
                    internal=(RUNNER,),
                    self_bounded=(AGENTS, ENVIRONMENTS, SCHEDULES, MEMORY),
                    scope=Tenancy(pool).scope,
                ),
            ],
            options=[
                ("grpc.so_reuseport", 0),
                # Agents send transcript snapshots of up to 16 MiB in one output.
                ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_BYTES),
            ],
        )
        host, _, port = settings.listen.rpartition(":")
        if tls is None:
            bound = server.add_insecure_port(f"{host}:{port}")
        else:
            bound = server.add_secure_port(f"{host}:{port}", tls[0])
        if bound == 0:
            raise OSError(f"cannot listen on {settings.listen}")
        advertised = advertise_address(settings, host, bound)
        live = LiveTail()
        admission = AgentAdmission(pool, settings.enrollment_token, Admission(settings.agent_admission))
        journal = Journal(pool, live)
        agents = Agents(pool, settings.lease_ttl)
        turns = Turns(agents, metrics)
        page_tokens = PageTokens.from_cluster_secret(secret)
        definitions = AgentDefinitions(pool, agents, page_tokens)
        environments = EnvironmentDefinitions(pool, page_tokens)
        deltas = DeltaHub()  # live deltas: from this replica's agent streams to its watchers
        kernel = SessionKernel(
            pool, journal, agents, turns, live, page_tokens, definitions, environments, deltas=deltas
        )
        conversation = Conversation(journal, agents, turns, settings.interrupt_deadline)
        workspace_timeouts = WorkspaceTimeouts(settings.workspace_reply_timeout, settings.workspace_delivery_timeout)
        replicas = ReplicaLinks(
            pool,
            advertised,
            secret,
            tls[1] if tls else None,
            connect_timeout=settings.replica_connect_timeout,
            timeouts=workspace_timeouts,
        )
        router = WorkspaceRouter(replicas, workspace_timeouts)
        sweeper = DeadlineSweeper(
            pool,
            journal,
            turns,
            agents,
            settings.startup_deadline,
            destroy_retry=settings.destroy_retry_first,
            idle_stop_after=settings.idle_stop_after,
            delivery_deadline=settings.delivery_deadline,
            command_retention=settings.command_retention,
            session_retention=settings.session_retention,
            sweep_batch=settings.sweep_batch,
        )
        workspace = WorkspaceFiles(kernel, router, Quotas(pool, settings.command_lease_ttl))
        forks = Forks(pool, kernel, journal, workspace)
        _add_session_kernel_service(SessionKernelServicer(kernel, conversation, workspace, forks), server)
        leases = LeaseKeeper(settings.database_url, settings.lease_ttl)
        build_progress = BuildProgressHub()
        relay = RunnerServicer(
            agents,
            leases,
            OutputCommitter(journal, turns),
            CommandVerdicts(
                journal,
                turns,
                DestroyRetries(settings.destroy_retry_first, settings.destroy_retry_longest, settings.destroy_attempts),
            ),
            live,
            RelaySettings(admission, settings.heartbeat_interval),
            router,
            deltas,
            build_progress,  # BuildEnvironment's progress, from the agents' streams (environments.builds)
            metrics,
        )
        credentials = CredentialStore(pool, keys, page_tokens)
        resolver = CredentialResolver(pool, admission, credentials)
        _add_runner_service(RunnerService(relay, ForwardingServicer(router, secret, pool), resolver), server)
        _add_credential_service(CredentialServicer(credentials), server)
        _add_admin_service(
            AdminServicer(pool, admission, Drains(pool, journal, turns, agents), settings.startup_deadline), server
        )
        _add_agent_service(AgentServicer(definitions), server)
        builds = EnvironmentBuilds(pool, journal, agents, build_progress)
        _add_environment_service(EnvironmentServicer(environments, builds), server)
        destinations = Destinations(webhook_networks, resolve_timeout=min(10.0, settings.webhook_timeout))
        webhooks = Webhooks(pool, keys, destinations, page_tokens)
        _add_webhook_service(WebhookServicer(webhooks), server)
        dispatcher = Dispatcher(
            pool,
            webhooks,
            Sender(destinations, settings.webhook_timeout),
            DeliverySettings(
                poll_interval=settings.webhook_poll_interval,
                # An attempt ends within resolving and the exchange (each bounded by the timeout): the
                # lease outlasts both, with room for recording the outcome.
                lease=timedelta(seconds=2 * settings.webhook_timeout + 5),
                retry_first=settings.webhook_retry_first,
                retry_longest=settings.webhook_retry_longest,
                max_attempts=settings.webhook_max_attempts,
                max_age=settings.webhook_max_age,
                retention=settings.webhook_delivery_retention,
                prune_batch=settings.sweep_batch,
            ),
            metrics,
        )
        schedules = ScheduleDefinitions(
            pool,
            page_tokens,
            definitions,
            environments,
            Limits(settings.schedules_per_project, settings.schedule_min_interval),
        )
        _add_schedule_service(ScheduleServicer(schedules), server)
        _add_memory_service(MemoryServicer(MemoryStores(pool, page_tokens)), server)
        scheduler = Scheduler(
            pool,
            journal,
            kernel,
            conversation,
            SchedulerSettings(
                interval=settings.schedule_interval,
                lease=settings.schedule_lease,
                # A run waits for its session's start, which fails past startup_deadline.
                run_deadline=settings.startup_deadline + settings.schedule_lease,
                grace=settings.schedule_grace,
            ),
            metrics=metrics,
        )
        subagents = Subagents(
            pool,
            journal,
            agents,
            kernel,
            conversation,
            SubagentSettings(
                interval=settings.schedule_interval,
                lease=settings.schedule_lease,
                max_depth=settings.subagent_max_depth,
                deadline=settings.subagent_deadline,
            ),
        )
        health_servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        reflection.enable((*SERVICE_NAMES, health.SERVICE_NAME), server)
        if internal is not None:
            server.add_insecure_port(internal.target)  # the web API's way in (controlplane.web.serving)
        await server.start()
        try:
            monitor = HealthMonitor(
                settings.database_url,
                health_servicer,
                SERVICE_NAMES,
                interval=settings.health_probe_interval,
                timeout=settings.health_probe_timeout,
            )
            await monitor.check()  # SERVING now, unless the database went away since the migrations
            address = f"{host}:{bound}"
            metrics.watch_sessions(pool, asyncio.get_running_loop())
            metrics.watch_database(lambda: monitor.serving)
            try:
                endpoint = (
                    metrics_http.serve(settings.metrics_listen, metrics.registry) if settings.metrics_listen else None
                )
            except metrics_http.MetricsListenError as error:
                raise SettingsError(str(error)) from None
            log.info(
                "controlplane_listening",
                address=address,
                advertise_address=advertised,
                tls=tls is not None,
                credential_key_id=keys.key_id if keys else None,
                metrics_address=endpoint.address if endpoint else None,
            )
            web = contextlib.AsyncExitStack()
            web_url = ""
            if settings.web_listen:
                assert internal is not None
                try:
                    running_web = await web.enter_async_context(
                        serve_web(
                            settings.web_listen,
                            internal.target,
                            [_descriptor(name) for name in WEB_SERVICE_NAMES],
                            origins,
                            MAX_GRPC_MESSAGE_BYTES,
                            web_tls(settings),
                            ConsoleSignIn(sign_in),
                        )
                    )
                except WebListenError as error:
                    raise SettingsError(str(error)) from None
                web_url = running_web.url
                log.info("web_api_listening", address=web_url)
            async with asyncio.TaskGroup() as background:
                loops = [
                    background.create_task(live.follow_postgres(settings.database_url, NOTIFY_CHANNEL)),
                    background.create_task(sweeper.run(settings.sweep_interval.total_seconds())),
                    background.create_task(scheduler.run()),
                    background.create_task(subagents.run()),
                    background.create_task(monitor.run()),
                    background.create_task(dispatcher.run()),
                ]
                try:
                    yield RunningControlPlane(
                        address,
                        server,
                        pool,
                        kernel,
                        advertised,
                        endpoint.address if endpoint else "",
                        metrics,
                        admission,
                        web_url,
                    )
                finally:
                    for loop in loops:
                        loop.cancel()
                    if endpoint is not None:
                        endpoint.close()
                    await web.aclose()  # browsers' calls end before the gRPC server's
                    await health_servicer.enter_graceful_shutdown()
                    await server.stop(grace=2)
                    await replicas.close()
                    await leases.close()
        finally:
            await server.stop(grace=None)  # stopped already unless start-up failed after start
            if internal is not None:
                internal.close()
    finally:
        await bounded(pool.close(), 10)
