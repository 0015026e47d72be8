"""SIGKILL the agent's relay half (its real state database, outbox and relay client, in a process of
its own) while eight sessions store outputs as fast as they can, so most outputs are in flight in
group commits; restart it on the same state directory and check that the control plane's side got
every output each producer was told was stored, exactly once, in order, with no gap."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import textwrap
from pathlib import Path

from tests.dataplane_agent.test_relay_client import ControlPlane, serving

_SESSIONS = 8

_AGENT = textwrap.dedent(
    """
    import asyncio, json, sys
    from pathlib import Path
    from astrabox.backoff import Backoff
    from astrabox.runner.v1 import runner_service_pb2 as pb
    from dataplane_agent.engines.claude_code import MANIFEST
    from dataplane_agent.relay.client import RelayClient, RelayConfig
    from dataplane_agent.relay.outbox import Outbox
    from dataplane_agent.state import AgentState
    from dataplane_agent.state_database import Database

    class NoCommands:
        def submit(self, command, reply):
            raise AssertionError("no command is sent")

    async def produce(db, outbox, k):
        session, n = f"s-{k}", await outbox.last_seq(f"s-{k}")
        while True:
            n += 1
            body = pb.EngineMessage(type_name="AssistantMessage", payload_json=json.dumps({"n": n}))
            seq = await outbox.append(session, "t-1", body)
            print("stored", session, seq, n, db.commits, flush=True)

    async def main():
        db = await Database.open(Path(sys.argv[1]))
        outbox = Outbox(db)
        config = RelayConfig(
            target=sys.argv[2], agent_id="agent-1", enrollment_token="tok", instance_id="i-1",
            drivers=("local",), engines=(MANIFEST,), backoff=Backoff(initial=0.05, maximum=0.2),
        )
        relay = RelayClient(config, state=AgentState(db), outbox=outbox, commands=NoCommands())
        tasks = [asyncio.create_task(relay.run())]
        if sys.argv[3] == "produce":
            tasks += [asyncio.create_task(produce(db, outbox, k)) for k in range(int(sys.argv[4]))]
        await asyncio.gather(*tasks)

    asyncio.run(main())
    """
)


async def _start(path: Path, port: int, mode: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _AGENT,
        str(path),
        f"127.0.0.1:{port}",
        mode,
        str(_SESSIONS),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


async def test_sigkill_during_group_commits_loses_and_duplicates_no_output(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    cp = ControlPlane()
    async with serving(cp) as port:
        agent = await _start(path, port, "produce")
        # What each producer was told is stored (durable): session -> highest output_seq.
        stored: dict[str, int] = {}
        reported = 0
        commits = 0
        assert agent.stdout is not None
        try:
            while reported < 1500 or not cp.received:
                line = await asyncio.wait_for(agent.stdout.readline(), 30)
                assert line, "the agent died on its own"
                if not line.startswith(b"stored "):
                    continue  # the agent's log
                _, session, seq, n, commits_text = line.decode().split()
                assert seq == n  # one producer per session: its n-th output is output n
                stored[session] = int(seq)
                reported, commits = reported + 1, int(commits_text)
        finally:
            agent.send_signal(signal.SIGKILL)
            await agent.wait()
        # Many outputs were in flight together: far fewer transactions than outputs.
        assert commits < reported / 2, f"{commits} transactions for {reported} outputs"

        hellos = len(cp.hellos)
        again = await _start(path, port, "relay")
        try:
            await cp.wait_until(lambda: len(cp.hellos) > hellos, timeout=30)
            last = {c.session_id: c.output_seq for c in cp.hellos[-1].sessions}
            await cp.wait_until(lambda: all(cp.committed(s) == seq for s, seq in last.items()), timeout=60)
        finally:
            again.send_signal(signal.SIGKILL)
            await again.wait()

    assert set(last) == {f"s-{k}" for k in range(_SESSIONS)}
    for session, seq in stored.items():
        # Everything a producer was told is stored survived (maybe more: committed, not yet told).
        assert last[session] >= seq
        journal = cp.journal[session]
        # Every output once, in order, no gap, each the one its producer made.
        assert [o.output_seq for o in journal] == list(range(1, last[session] + 1))
        assert [json.loads(o.engine_message.payload_json)["n"] for o in journal] == list(range(1, last[session] + 1))
