-- Tool grants: an answer to a tool approval may let later calls of the tool in
-- the session run without asking (controlplane.tool_grants). A revoked grant
-- keeps its row (revoked_at), so the journal's references stay resolvable.
CREATE TABLE tool_grants (
    grant_id       uuid PRIMARY KEY,
    session_id     uuid NOT NULL REFERENCES sessions (session_id),
    interaction_id text NOT NULL,
    tool_name      text NOT NULL,
    input_pattern  text NOT NULL DEFAULT '',
    expires_at     timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    revoked_at     timestamptz
);

-- A session's grants in force, oldest first (its view, and the set sent to its agent).
CREATE INDEX tool_grants_in_force ON tool_grants (session_id, created_at) WHERE revoked_at IS NULL;
