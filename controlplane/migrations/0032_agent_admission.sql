-- Hosts are admitted, not only enrolled (identity.agent_admission). An agent that enrols with the
-- enrollment token alone is PENDING (admitted_at NULL): its Hello is refused and it is given no
-- session, credential or workspace request until an operator admits it (AdmitAgent) or it presents
-- a join token an operator minted for it. admitted_by says how: `key:<key_id>` or `oidc:<sub>` of
-- the admitting operator, `join:<token_id>`, or `automatic` (--agent-admission automatic).
-- project_id: the project a join token dedicated it to, applied when its agents row is first made.
-- last_refused_at / last_peer: a pending agent's latest attempt, for the operator deciding on it.
ALTER TABLE agent_credentials ADD COLUMN admitted_at timestamptz;
ALTER TABLE agent_credentials ADD COLUMN admitted_by text NOT NULL DEFAULT '';
ALTER TABLE agent_credentials ADD COLUMN project_id uuid REFERENCES projects (project_id);
ALTER TABLE agent_credentials ADD COLUMN last_refused_at timestamptz;
ALTER TABLE agent_credentials ADD COLUMN last_peer text NOT NULL DEFAULT '';
-- Agents enrolled before admission existed were given work at once: they stay admitted.
UPDATE agent_credentials SET admitted_at = enrolled_at, admitted_by = 'enrolled before admission';

-- Join tokens (`astrabox hosts join-token`): each admits one new agent once, before it expires.
-- Only the secret's SHA-256 is kept; token_id is the public part (`abxj_<token_id>_<secret>`).
CREATE TABLE agent_join_tokens (
    token_id       text PRIMARY KEY,
    secret_sha256  bytea NOT NULL,
    project_id     uuid REFERENCES projects (project_id),
    created_by     text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    expires_at     timestamptz NOT NULL,
    used_at        timestamptz,
    used_by_agent  text
);
