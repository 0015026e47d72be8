-- The engine's tool calls still waiting for their result: a row is added when an
-- AssistantMessage carries a tool_use block (or an interaction asks about one) and
-- removed when a UserMessage brings its tool_result, or when the call is settled
-- as an error because its turn or runtime ended first (TOOL_CALL_SETTLED).
CREATE TABLE open_tool_calls (
    session_id   uuid NOT NULL REFERENCES sessions (session_id),
    tool_use_id  text NOT NULL,
    turn_id      text NOT NULL,
    tool_name    text NOT NULL,
    opened_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (session_id, tool_use_id)
);
