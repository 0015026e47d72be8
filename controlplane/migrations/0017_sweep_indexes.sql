-- Indexes that fit the deadline sweep's queries (controlplane.deadlines, every
-- 2 s on every replica), so that none reads a whole table; checked with
-- bench/sweep_plans.py on 100,000 sessions and 500,000 commands.

-- interrupts_overdue
CREATE INDEX sessions_interrupting ON sessions (interrupt_deadline) WHERE state = 'interrupting';
-- startups_overdue (sessions_created_by_project leads with the project)
CREATE INDEX sessions_creating ON sessions (created_at) WHERE state = 'creating';
-- idle_since: the few sessions whose runtime runs with no turn
CREATE INDEX sessions_idle ON sessions (session_id)
    WHERE state = 'ready' AND runtime_available AND NOT runtime_stopped AND current_turn_id IS NULL
      AND deleted_at IS NULL;
-- destroys_due: released sessions still naming a sandbox, by when they are due
CREATE INDEX sessions_destroys_pending ON sessions (destroy_retry_at NULLS FIRST)
    WHERE state IN ('deleted', 'archived') AND sandbox_id IS NOT NULL AND destroy_abandoned_at IS NULL;
-- destroys_due: a session's commands, pending or acknowledged lately
CREATE INDEX agent_commands_by_session ON agent_commands (session_id, acked_at);
-- prune_done: acknowledged commands, oldest first
CREATE INDEX agent_commands_done ON agent_commands (acked_at) WHERE acked_at IS NOT NULL;
