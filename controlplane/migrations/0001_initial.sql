-- Sessions: the projection of each session's journal plus its idempotency key.
CREATE TABLE sessions (
    session_id            uuid PRIMARY KEY,
    request_id            text NOT NULL UNIQUE,
    request_fingerprint   text NOT NULL,
    engine                text NOT NULL,
    permission_mode       text NOT NULL,
    model                 text NOT NULL,
    labels                jsonb NOT NULL,
    state                 text NOT NULL,
    runtime_available     boolean NOT NULL DEFAULT false,
    agent_id              text,
    current_turn_id       text,
    engine_session_id     text NOT NULL DEFAULT '',
    failure_reason        text NOT NULL DEFAULT '',
    -- The newest journal seq; the next event gets last_seq + 1 in the same transaction.
    last_seq              bigint NOT NULL DEFAULT 0,
    -- The newest agent output_seq committed to the journal.
    committed_output_seq  bigint NOT NULL DEFAULT 0,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    deleted_at            timestamptz
);
CREATE INDEX sessions_listing ON sessions (created_at DESC, session_id DESC) WHERE deleted_at IS NULL;
CREATE INDEX sessions_by_agent ON sessions (agent_id) WHERE deleted_at IS NULL;

-- The journal: one row per event, numbered per session with no gaps.
CREATE TABLE events (
    session_id  uuid NOT NULL REFERENCES sessions (session_id),
    seq         bigint NOT NULL CHECK (seq > 0),
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    kind        text NOT NULL,
    turn_id     text,
    payload     jsonb NOT NULL,
    output_seq  bigint,
    PRIMARY KEY (session_id, seq)
);
-- An agent output is journaled at most once.
CREATE UNIQUE INDEX events_output_seq ON events (session_id, output_seq) WHERE output_seq IS NOT NULL;

-- Turns opened by user messages; the idempotency record of SendMessage.
CREATE TABLE turns (
    session_id         uuid NOT NULL REFERENCES sessions (session_id),
    turn_id            text NOT NULL,
    client_message_id  text NOT NULL,
    fingerprint        text NOT NULL,
    accepted_seq       bigint NOT NULL,
    PRIMARY KEY (session_id, turn_id),
    UNIQUE (session_id, client_message_id)
);

-- Data-plane agents and their leases.
CREATE TABLE agents (
    agent_id          text PRIMARY KEY,
    generation        bigint NOT NULL,
    lease_expires_at  timestamptz NOT NULL,
    drivers           text[] NOT NULL,
    engines           text[] NOT NULL,
    capacity          integer NOT NULL,
    instance_id       text NOT NULL,
    last_command_seq  bigint NOT NULL DEFAULT 0,
    connected_at      timestamptz NOT NULL DEFAULT now()
);

-- Commands for agents, delivered at least once in command_seq order until acknowledged.
CREATE TABLE agent_commands (
    agent_id     text NOT NULL REFERENCES agents (agent_id),
    command_seq  bigint NOT NULL,
    command_id   text NOT NULL UNIQUE,
    session_id   uuid NOT NULL,
    body         bytea NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    acked_at     timestamptz,
    error        text,
    PRIMARY KEY (agent_id, command_seq)
);
CREATE INDEX agent_commands_unacked ON agent_commands (agent_id, command_seq) WHERE acked_at IS NULL;
