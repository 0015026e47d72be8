-- A session's configuration: the agent definition version it pins (none for a
-- session created without an agent) and the effective AgentSpec it runs with
-- (the version's spec with CreateSession's own engine, mode and model over it),
-- as the deterministic serialization of astrabox.agents.v1.AgentSpec. Every
-- StartRuntime carries it, so a session placed again or restarted runs the same
-- configuration whatever the agent has become since.
ALTER TABLE sessions
    ADD COLUMN agent_definition_id uuid,
    ADD COLUMN agent_name text,
    ADD COLUMN agent_version integer,
    ADD COLUMN config bytea NOT NULL DEFAULT ''::bytea,
    -- The configuration's limits.turn_timeout (NULL: none), for the deadline sweep.
    ADD COLUMN turn_timeout interval;

-- ListSessions' agent filter: a project's sessions of one agent, newest first.
CREATE INDEX sessions_by_agent_definition ON sessions (project_id, agent_definition_id, created_at DESC, session_id DESC)
    WHERE agent_definition_id IS NOT NULL;

-- The deadline sweep's turns_over_time: the few sessions running a turn under a time limit.
CREATE INDEX sessions_timed_turns ON sessions (session_id) WHERE turn_timeout IS NOT NULL AND current_turn_id IS NOT NULL;
