-- The sessions occupying a slot on their agent (controlplane/store/agents.py, OCCUPYING; the same
-- predicate, so that the planner can use this index): placement counts them per agent without
-- reading the agent's archived, failed, deleted or stopped sessions, which pile up.
CREATE INDEX sessions_occupying ON sessions (agent_id)
    WHERE (state IN ('creating', 'running', 'waiting_for_input', 'interrupting')
        OR (state = 'ready' AND runtime_available AND NOT runtime_stopped));
