-- Each agent's own credential (identity.agent_admission): the SHA-256 of the
-- secret the agent made, bound to its agent_id by the first Hello that
-- carried it with the enrollment token. A revoked agent stays refused.
CREATE TABLE agent_credentials (
    agent_id       text PRIMARY KEY,
    secret_sha256  bytea NOT NULL,
    enrolled_at    timestamptz NOT NULL DEFAULT now(),
    revoked_at     timestamptz
);
