-- Sub-agent calls (controlplane.subagents): a parent session's call of one of its agent's
-- sub-agents, inserted with the parent's interaction (INTERACTION_KIND_SUBAGENT) and moved on by
-- any replica's sweep: `creating` creates the child session, `starting` sends it the prompt,
-- `running` waits for the child's turn, `done` once the parent's call has its result. A replica
-- holds a call while `lease_until` is ahead; one that dies leaves it to the next.
CREATE TABLE subagent_calls (
    parent_session_id uuid NOT NULL,
    interaction_id    text NOT NULL,
    project_id        uuid NOT NULL,
    parent_turn_id    text NOT NULL,
    tool_use_id       text NOT NULL DEFAULT '',
    agent             text NOT NULL,
    prompt            text NOT NULL,
    -- The child's depth: 1 under a top-level session.
    depth             integer NOT NULL,
    child_session_id  uuid UNIQUE,
    child_turn_id     text,
    agent_version     integer NOT NULL DEFAULT 0,
    state             text NOT NULL DEFAULT 'creating',
    is_error          boolean NOT NULL DEFAULT false,
    reason            text NOT NULL DEFAULT '',
    lease_until       timestamptz NOT NULL DEFAULT now(),
    created_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz,
    PRIMARY KEY (parent_session_id, interaction_id)
);
CREATE INDEX subagent_calls_open ON subagent_calls (lease_until) WHERE state <> 'done';
