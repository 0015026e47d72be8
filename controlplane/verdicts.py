"""The agents' verdicts on their commands, and what each one settles.

An acknowledgement is final (the Runner proto's rule): it is recorded once, in
the transaction that settles what the command was for.
- a DestroyRuntime's verdict (CommandAck.destroy_verdict) releases the
  session's sandbox (CONFIRMED, RETAINED), or is journaled and retried with
  backoff until abandoned (REFUSED, UNCONFIRMED): `controlplane.destructions`;
- an accepted DeliverInput marks its turn delivered, which ends the turn's
  delivery deadline; a refused one fails the turn with the agent's reason, if
  it still runs, and the next queued message goes on: a message is never left
  RUNNING on an input nobody holds.
"""

from __future__ import annotations

import structlog

from astrabox.runner.v1 import runner_service_pb2 as runner_pb2
from controlplane import destructions, store
from controlplane.destructions import DestroyRetries
from controlplane.journal import Journal
from controlplane.turns import TurnOutcome, Turns

log = structlog.get_logger(__name__)


class CommandVerdicts:
    def __init__(self, journal: Journal, turns: Turns, destroy_retries: DestroyRetries | None = None) -> None:
        self._journal = journal
        self._turns = turns
        self._destroy_retries = destroy_retries or DestroyRetries()

    async def record(
        self,
        agent_id: str,
        command_seq: int,
        error: str,
        destroy_verdict: runner_pb2.DestroyVerdict = runner_pb2.DESTROY_VERDICT_UNSPECIFIED,
    ) -> None:
        """Record the agent's verdict on command `command_seq` (an empty `error`: done; for a
        DestroyRuntime, `destroy_verdict` says what became of the sandbox) and settle what it was
        for; a verdict given already is ignored."""
        async with self._journal.transaction() as tx:
            row = await store.agent_commands.acknowledge(tx.conn, agent_id, command_seq, error)
            if row is None:
                return
            session_id = str(row["session_id"])
            command = runner_pb2.Command.FromString(row["body"])
            kind = command.WhichOneof("body")
            if kind == "destroy_runtime":
                await destructions.record_verdict(
                    tx, agent_id, session_id, destroy_verdict, error, self._destroy_retries
                )
            elif kind == "deliver_input" and not error:
                await store.turns.mark_delivered(tx.conn, session_id, command.deliver_input.turn_id)
            elif kind == "deliver_input":
                turn_id = command.deliver_input.turn_id
                reason = f"the data-plane agent {agent_id} refused the message: {error}"
                if await self._turns.settle(tx, session_id, turn_id, TurnOutcome.FAILED, reason):
                    log.warning("delivery_refused", session_id=session_id, turn_id=turn_id, error=error)
