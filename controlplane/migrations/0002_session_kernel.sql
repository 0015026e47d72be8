-- Turns: queued until the engine is free, then running, then settled.
ALTER TABLE turns
    ADD COLUMN state text NOT NULL DEFAULT 'running',
    ADD COLUMN text text NOT NULL DEFAULT '',
    ADD COLUMN permission_mode text NOT NULL DEFAULT '',
    ADD COLUMN origin text NOT NULL DEFAULT 'user',
    ADD COLUMN accepted_at timestamptz NOT NULL DEFAULT now(),
    ALTER COLUMN client_message_id DROP NOT NULL,
    ALTER COLUMN fingerprint DROP NOT NULL;
CREATE INDEX turns_queued ON turns (session_id, accepted_seq) WHERE state = 'queued';

ALTER TABLE sessions
    ADD COLUMN sandbox_id text,
    ADD COLUMN slash_commands text[] NOT NULL DEFAULT '{}',
    ADD COLUMN interrupt_deadline timestamptz;

-- Questions the engine asked a human; one answer takes effect.
CREATE TABLE interactions (
    interaction_id  text PRIMARY KEY,
    session_id      uuid NOT NULL REFERENCES sessions (session_id),
    turn_id         text NOT NULL,
    kind            text NOT NULL,
    tool_name       text NOT NULL,
    input           jsonb NOT NULL,
    tool_use_id     text NOT NULL,
    requested_seq   bigint NOT NULL,
    state           text NOT NULL DEFAULT 'pending',
    request_id      text,
    answer          jsonb,
    settled_at      timestamptz
);
CREATE UNIQUE INDEX interactions_one_pending ON interactions (session_id) WHERE state = 'pending';

-- Background tasks the engine reported; open until a terminal status arrives.
CREATE TABLE background_tasks (
    session_id   uuid NOT NULL REFERENCES sessions (session_id),
    task_id      text NOT NULL,
    description  text NOT NULL,
    started_seq  bigint NOT NULL,
    state        text NOT NULL DEFAULT 'open',
    PRIMARY KEY (session_id, task_id)
);

-- Idempotency of session commands other than SendMessage.
CREATE TABLE session_requests (
    session_id   uuid NOT NULL REFERENCES sessions (session_id),
    request_id   text NOT NULL,
    kind         text NOT NULL,
    fingerprint  text NOT NULL,
    PRIMARY KEY (session_id, request_id)
);

-- The engine's own transcript, so a new sandbox can resume the conversation.
CREATE TABLE engine_transcripts (
    session_id         uuid PRIMARY KEY REFERENCES sessions (session_id),
    engine_session_id  text NOT NULL,
    content            bytea NOT NULL,
    updated_at         timestamptz NOT NULL DEFAULT now()
);
