-- Projects: the unit of tenancy. The operator project's admins manage every
-- project; `default` is made here, and the control plane's bootstrap key
-- (--bootstrap-key-file) is its first admin key.
CREATE TABLE projects (
    project_id  uuid PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    operator    boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO projects (project_id, name, operator) VALUES (gen_random_uuid(), 'default', true);

-- API keys: `abx_<key_id>_<secret>`; only the secret's SHA-256 is kept.
CREATE TABLE api_keys (
    key_id         text PRIMARY KEY,
    project_id     uuid NOT NULL REFERENCES projects (project_id),
    name           text NOT NULL,
    role           text NOT NULL CHECK (role IN ('viewer', 'developer', 'admin')),
    secret_sha256  bytea NOT NULL,
    created_by     text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    expires_at     timestamptz,
    revoked_at     timestamptz,
    -- Written at most once a minute per key (identity.keys.verify).
    last_used_at   timestamptz
);
CREATE INDEX api_keys_by_project ON api_keys (project_id, created_at DESC);
