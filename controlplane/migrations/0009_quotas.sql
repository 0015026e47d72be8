-- Quotas: each project's limits (controlplane.quotas). A NULL column is the
-- platform's default for that quota; a project without a row has every default.
CREATE TABLE project_quotas (
    project_id           uuid PRIMARY KEY REFERENCES projects (project_id),
    -- Sessions neither archived, deleted nor failed, at once.
    live_sessions        integer CHECK (live_sessions >= 0),
    -- Sessions created in any 60 seconds.
    sessions_per_minute  integer CHECK (sessions_per_minute >= 0),
    -- UTF-8 bytes of one message (SendMessage) or one answer (RespondToInteraction).
    message_bytes        integer CHECK (message_bytes >= 0),
    -- Bytes of one uploaded archive, as streamed.
    upload_bytes         bigint CHECK (upload_bytes >= 0),
    -- RunCommand calls running at once, across replicas.
    concurrent_commands  integer CHECK (concurrent_commands >= 0),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    updated_by           text NOT NULL
);

-- One row per RunCommand running, held by the replica running it and renewed
-- while it runs; a replica that dies leaves rows that lapse at expires_at.
CREATE TABLE command_leases (
    lease_id    uuid PRIMARY KEY,
    project_id  uuid NOT NULL REFERENCES projects (project_id),
    session_id  uuid NOT NULL,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX command_leases_by_project ON command_leases (project_id, expires_at);

-- Sessions created per minute are counted by project and time, deleted ones included.
CREATE INDEX sessions_created_by_project ON sessions (project_id, created_at);
