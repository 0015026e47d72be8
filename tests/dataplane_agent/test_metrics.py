"""The agent's /metrics over real HTTP on a real agent database: the outbox's depth, bytes and
sessions as outputs are stored and acknowledged, a relay that is not connected, startup phases by
driver and warm-pool hit or miss; each agent object its own registry, and no session id in a label."""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.metrics import AgentMetrics, ScrapeSources
from dataplane_agent.relay.client import RelayClient, RelayConfig
from dataplane_agent.relay.outbox import Outbox
from dataplane_agent.sandboxes.usage import UsageSampler, UsageSnapshot
from dataplane_agent.state import AgentState
from dataplane_agent.state_database import Database
from serverkit import metrics_http

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(address: str) -> tuple[str, Samples]:
    def get() -> str:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
            body: bytes = response.read()
        return body.decode()

    text = await asyncio.to_thread(get)  # the collector reads the database on this loop
    return text, {
        (s.name, frozenset(s.labels.items())): s.value for f in text_string_to_metric_families(text) for s in f.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


class MeasuredDriver:
    name = "measured"

    async def usage(self, sandboxes: object) -> dict[str, object]:
        return {}


class NoCommands:
    def submit(self, command: pb.Command, reply: object) -> None:
        raise AssertionError("no command is sent here")


async def test_the_outbox_and_the_relay_are_read_at_each_scrape(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "agent.db")
    state, outbox = AgentState(db), Outbox(db)
    relay = RelayClient(
        RelayConfig(target="127.0.0.1:1", agent_id="agent-1", enrollment_token="", instance_id="i-1"),
        state=state,
        outbox=outbox,
        commands=NoCommands(),
    )
    metrics = AgentMetrics()
    usage = UsageSampler(MeasuredDriver(), list)
    metrics.attach(
        ScrapeSources(
            outbox=outbox,
            relay=relay,
            state=state,
            running=lambda: 0,
            warm_ready=lambda: 2,
            leaked=lambda: 3,
            reaped=lambda: 7,
            usage=usage,
        ),
        asyncio.get_running_loop(),
    )
    endpoint = metrics_http.serve("127.0.0.1:0", metrics.registry)
    try:
        _, empty = await scrape(endpoint.address)
        assert value(empty, "astrabox_agent_outbox_outputs") == 0
        assert value(empty, "astrabox_agent_relay_connected") == 0
        assert value(empty, "astrabox_agent_relay_streams_opened_total") == 0
        assert value(empty, "astrabox_agent_warm_pool_ready") == 2
        assert value(empty, "astrabox_agent_outbox_oldest_age_seconds") == 0
        assert value(empty, "astrabox_agent_sandboxes_leaked") == 3
        assert value(empty, "astrabox_agent_sandboxes_reaped_total") == 7
        assert value(empty, "astrabox_agent_sandboxes_measured", driver="measured") == 0
        usage.snapshot = UsageSnapshot(
            measured=2, cpu_cores=1.5, cpu_cores_max=1.0, memory_bytes=300, memory_bytes_max=200, cpu_seconds_total=9
        )

        body = pb.EngineMessage(type_name="AssistantMessage", payload_json='{"text": "' + "x" * 1000 + '"}')
        for session_id in ("session-aaaa", "session-aaaa", "session-bbbb"):
            await outbox.append(session_id, "t-1", body)
        text, stored = await scrape(endpoint.address)
        assert value(stored, "astrabox_agent_outbox_outputs") == 3
        assert value(stored, "astrabox_agent_outbox_sessions") == 2
        assert (value(stored, "astrabox_agent_outbox_bytes") or 0) >= 3 * 1000
        assert "session-aaaa" not in text and "session-bbbb" not in text
        assert (value(stored, "astrabox_agent_outbox_oldest_age_seconds") or 0) > 0
        measured = {"driver": "measured"}
        assert value(stored, "astrabox_agent_sandboxes_measured", **measured) == 2
        assert value(stored, "astrabox_agent_sandboxes_cpu_cores", **measured) == 1.5
        assert value(stored, "astrabox_agent_sandbox_cpu_cores_max", **measured) == 1.0
        assert value(stored, "astrabox_agent_sandboxes_memory_bytes", **measured) == 300
        assert value(stored, "astrabox_agent_sandbox_memory_bytes_max", **measured) == 200
        assert value(stored, "astrabox_agent_sandbox_cpu_seconds_total", **measured) == 9

        await outbox.ack("session-aaaa", 2)
        await outbox.ack("session-bbbb", 1)
        _, drained = await scrape(endpoint.address)
        assert (value(drained, "astrabox_agent_outbox_outputs"), value(drained, "astrabox_agent_outbox_bytes")) == (
            0,
            0,
        )
        assert value(drained, "astrabox_agent_outbox_oldest_age_seconds") == 0
    finally:
        endpoint.close()
        await db.close()


def test_startup_phases_by_driver_and_warm_pool_hit_each_agent_its_own_registry() -> None:
    first, second = AgentMetrics(), AgentMetrics()
    first.startup_phase_done("local", "sandbox_claimed", 40, warm=True)
    first.startup_phase_done("docker", "sandbox_created", 2500, warm=False)
    hit = {"driver": "local", "phase": "sandbox_claimed", "warm_pool": "hit"}
    miss = {"driver": "docker", "phase": "sandbox_created", "warm_pool": "miss"}
    assert first.registry.get_sample_value("astrabox_agent_startup_phase_seconds_count", hit) == 1
    assert first.registry.get_sample_value("astrabox_agent_startup_phase_seconds_sum", miss) == 2.5
    assert second.registry.get_sample_value("astrabox_agent_startup_phase_seconds_count", hit) is None
