"""Both /metrics endpoints scraped over real HTTP while a real turn runs (the real CLI, the offline
model): RPCs counted, the turn started then completed, the runtime's startup phases observed, the
agent's outbox drained back to 0, acknowledgement lag measured, and no label holds the session's id."""

from __future__ import annotations

import asyncio
import socket
import tempfile
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from astrabox.client import AstraBoxClient
from controlplane.metrics import SESSIONS_CACHE_S
from dataplane_agent.sandboxes.limits import LocalLimits, SandboxCgroups
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

KERNEL = "astrabox.sessionkernel.v1.SessionKernelService"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def scrape(address: str) -> Samples:
    def get() -> str:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
            body: bytes = response.read()
        return body.decode()

    text = await asyncio.to_thread(get)
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every series of `name` whose labels include `labels`."""
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls)


async def until(address: str, check: Callable[[Samples], bool], what: str) -> Samples:
    """Scrape until `check` holds (the sessions gauge is cached for seconds; the outbox drains)."""
    try:
        async with asyncio.timeout(60):
            while not check(samples := await scrape(address)):
                await asyncio.sleep(0.5)
    except TimeoutError:
        raise AssertionError(f"never seen: {what}") from None
    return samples


def no_label_holds(samples: Samples, session_id: str) -> None:
    leaked = [(name, dict(labels)) for (name, labels) in samples if any(session_id in v for _, v in labels)]
    assert not leaked, leaked


async def test_both_endpoints_move_as_a_real_turn_runs(stacks: Callable[..., Stack]) -> None:
    plane_metrics, agent_metrics = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    stack = stacks(args=("--metrics-listen", agent_metrics), controlplane_args=("--metrics-listen", plane_metrics))
    plane_before, agent_before = await scrape(plane_metrics), await scrape(agent_metrics)
    assert value(plane_before, "astrabox_turns_started_total") == 0
    assert value(agent_before, "astrabox_agent_relay_connected") == 1

    async with AstraBoxClient.connect(stack.address) as client:
        session = await client.create_session()
        await client.wait_for_state(session.session_id, ["READY"], timeout=120)
        # Longer than two refreshes of the cached sessions gauge (SESSIONS_CACHE_S): a turn shorter
        # than one can start and end between two refreshes and never be counted as running.
        assert SESSIONS_CACHE_S * 2 < 12
        accepted = await client.send_message(session.session_id, "sleep: 12")

        # While the turn runs: started, not ended, and its session counted as running.
        during = await until(plane_metrics, lambda s: value(s, "astrabox_sessions", state="running") == 1, "running")
        assert value(during, "astrabox_turns_started_total") == 1
        assert total(during, "astrabox_turns_ended_total") == 0
        agent_during = await scrape(agent_metrics)
        assert value(agent_during, "astrabox_agent_sandboxes", state="running") == 1
        # One start: its ready phase observed once, on the local driver, without a warm pool.
        ready = {"driver": "local", "phase": "ready", "warm_pool": "miss"}
        assert value(agent_during, "astrabox_agent_startup_phase_seconds_count", **ready) == 1
        assert value(agent_before, "astrabox_agent_startup_phase_seconds_count", **ready) == 0

        async with asyncio.timeout(180):
            async for event in client.watch(session.session_id):
                if event.turn_id == accepted.turn_id and event.WhichOneof("payload") in (
                    "turn_completed",
                    "turn_failed",
                ):
                    assert event.WhichOneof("payload") == "turn_completed"
                    break

    after = await until(plane_metrics, lambda s: value(s, "astrabox_sessions", state="ready") == 1, "ready again")
    assert value(after, "astrabox_turns_ended_total", outcome="completed") == 1
    assert value(after, "astrabox_turn_duration_seconds_count", outcome="completed") == 1
    assert value(after, "astrabox_rpc_requests_total", service=KERNEL, method="CreateSession", code="OK") == 1
    assert value(after, "astrabox_rpc_requests_total", service=KERNEL, method="SendMessage", code="OK") == 1
    assert value(after, "astrabox_relay_agents_connected") == 1
    # The agent's outputs were journaled in batches, each with its lag from the agent's produce_time.
    assert value(after, "astrabox_journal_batch_outputs_count") > 0
    assert value(after, "astrabox_relay_ack_lag_seconds_count") >= value(after, "astrabox_journal_batch_outputs_count")
    # The agent's outbox drains back to empty once the control plane has committed everything.
    agent_after = await until(
        agent_metrics, lambda s: value(s, "astrabox_agent_outbox_outputs") == 0, "the agent's outbox drained"
    )
    assert value(agent_after, "astrabox_agent_outbox_bytes") == 0
    assert value(agent_after, "astrabox_agent_relay_unacknowledged_outputs") == 0
    # The session's sandbox (its engine still attached) is measured on the agent's next sample, where
    # the local driver has cgroups to read (an agent that cannot make them measures nothing).
    cgroups, why = SandboxCgroups.find(Path(tempfile.gettempdir()), LocalLimits())
    if cgroups is not None and "memory" in cgroups.controllers:
        measured = {"driver": "local"}
        agent_after = await until(
            agent_metrics,
            lambda s: value(s, "astrabox_agent_sandboxes_measured", **measured) == 1,
            "the sandbox measured",
        )
        assert value(agent_after, "astrabox_agent_sandboxes_memory_bytes", **measured) > 0
        assert value(agent_after, "astrabox_agent_sandbox_memory_bytes_max", **measured) > 0
    else:
        assert value(agent_after, "astrabox_agent_sandboxes_measured", driver="local") == 0, why
    for samples in (during, after, agent_during, agent_after):
        no_label_holds(samples, session.session_id)
