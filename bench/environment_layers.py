"""Environment layers: a layer's first build, then session ready time with the cached layer against the
default environment, in one run.

In-process, on the data-plane agent's own runtimes (the layer store, the local bubblewrap driver, the
real Claude Code CLI against the offline model): the control plane's CreateSession(environment=…) is
not involved, so the figures are the agent's StartRuntime -> ready, the part environments change.
The environment holds one apt package (tree) and one pip package (six), fetched from the host's
configured registries. First: one session whose start builds the layer (its "environment" startup
phase is the build). Then, alternating one session at a time, each destroyed before the next:

  cached   StartRuntime with the environment (its layer already built on this host)
  default  StartRuntime with no environment

Prints p50/p90/max and the medians' ratio; timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import hashlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import percentile, revision, summary_row

from astrabox.environments.v1 import environment_pb2 as env_pb
from astrabox.runner.v1 import runner_service_pb2 as pb
from dataplane_agent.engines.claude_code import ClaudeCodeAdapter
from dataplane_agent.environments.layers import LayerStore
from dataplane_agent.environments.local_layers import LocalLayers
from dataplane_agent.offline_model import OfflineModel
from dataplane_agent.routes.model import ModelRoute, Upstream
from dataplane_agent.sandboxes.local import LocalSandboxDriver
from dataplane_agent.state import AgentState
from dataplane_agent.state_database import Database
from tests.dataplane_agent.fakes import Agent, running_agent

SPEC = env_pb.EnvironmentSpec(packages=env_pb.Packages(apt=["tree"], pip=["six"]))


def environment() -> pb.RuntimeEnvironment:
    digest = hashlib.sha256(SPEC.packages.SerializeToString(deterministic=True)).hexdigest()
    return pb.RuntimeEnvironment(environment_id="bench", name="bench", version=1, spec=SPEC, build_digest=digest)


async def start(agent: Agent, session_id: str, env: pb.RuntimeEnvironment | None) -> tuple[float, int]:
    """StartRuntime -> ready, in ms, and the "environment" phase's own ms (the build, if any)."""
    command = pb.StartRuntime(engine="claude_code", permission_mode="bypassPermissions")
    if env is not None:
        command.environment.CopyFrom(env)
    began = time.perf_counter()
    ack = await agent.command(session_id, start_runtime=command)
    elapsed = (time.perf_counter() - began) * 1000
    outputs = await agent.outputs(session_id)
    if ack.HasField("error") or not any(o.HasField("runtime_started") for o in outputs):
        failed = [o.runtime_start_failed.reason for o in outputs if o.HasField("runtime_start_failed")]
        raise SystemExit(f"session {session_id} did not start: {ack.error.message or failed}")
    phase = [o.startup_phase.duration_ms for o in outputs if o.startup_phase.phase == "environment"]
    await agent.command(session_id, destroy_runtime=pb.DestroyRuntime(reason="bench"))
    return elapsed, phase[0] if phase else 0


async def bench(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="astrabox-bench-layers-"))
    model = OfflineModel()
    await model.start()
    db = await Database.open(work / "layer-uses.db")
    try:
        driver = LocalSandboxDriver(work / "sandboxes", bwrap=shutil.which("bwrap") or "bwrap")
        layers = LayerStore(LocalLayers(work / "layers", driver, "agent-1"), AgentState(db))
        async with (
            ModelRoute(work / "model-route", Upstream(model.base_url)) as route,
            running_agent(work / "agent", ClaudeCodeAdapter(), driver, model=route, layers=layers) as agent,
        ):
            env = environment()
            first_ready, first_build = await start(agent, "first", env)
            figures: dict[str, list[float]] = {"cached": [], "default": []}
            for index in range(args.sessions):
                figures["cached"].append((await start(agent, f"cached-{index}", env))[0])
                figures["default"].append((await start(agent, f"default-{index}", None))[0])
            assert layers.builds == 1, "the cached sessions built the layer again"
        print(f"environment layers — {revision()} — {datetime.datetime.now():%Y-%m-%d %H:%M}")
        print("  environment: apt tree, pip six; local driver; real CLI, offline model")
        print(f"  first build (the start's environment phase)        {first_build:9.1f} ms")
        print(f"  first session ready (build included)               {first_ready:9.1f} ms")
        print(summary_row("session ready, cached layer", figures["cached"]))
        print(summary_row("session ready, default environment", figures["default"]))
        ratio = percentile(figures["cached"], 50) / percentile(figures["default"], 50)
        print(f"  cached / default (medians)                          {ratio:9.2f}x")
    finally:
        await db.close()
        await model.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=10, help="sessions of each kind (default %(default)s)")
    args = parser.parse_args()
    if shutil.which("bwrap") is None:
        sys.exit("bubblewrap is not installed")
    asyncio.run(bench(args))


if __name__ == "__main__":
    main()
