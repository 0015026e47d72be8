-- Environments (EnvironmentService, controlplane.environments): a project's named
-- descriptions of where its sessions run. Each change of definition is a new
-- immutable row of environment_versions; latest_version is the newest's number.
-- An archived environment starts no session and keeps its name. request_id is the
-- CreateEnvironment request's: a retry finds the environment it made.
CREATE TABLE environments (
    environment_id  uuid PRIMARY KEY,
    project_id      uuid NOT NULL REFERENCES projects (project_id),
    name            text NOT NULL,
    latest_version  integer NOT NULL CHECK (latest_version >= 1),
    archived        boolean NOT NULL DEFAULT false,
    request_id      text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    -- Also the listing's index: a project's environments by name.
    CONSTRAINT environments_name_per_project UNIQUE (project_id, name),
    CONSTRAINT environments_request_id_per_project UNIQUE (project_id, request_id)
);

-- One version of an environment: the EnvironmentSpec in its canonical form (the
-- deterministic serialization), that form's SHA-256 (hex), and the build digest:
-- the SHA-256 of what is built into the layer (packages, setup script).
CREATE TABLE environment_versions (
    environment_id  uuid NOT NULL REFERENCES environments (environment_id),
    version         integer NOT NULL CHECK (version >= 1),
    spec            bytea NOT NULL,
    spec_digest     text NOT NULL,
    build_digest    text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (environment_id, version)
);

-- The environment version a session pins (none: the built-in environment), with
-- the version's spec copied as sessions.config copies its agent's: every
-- StartRuntime carries it, so a session placed again or rebuilt after a lost
-- sandbox runs in the same environment whatever the environment has become since.
ALTER TABLE sessions
    ADD COLUMN environment_id uuid,
    ADD COLUMN environment_name text,
    ADD COLUMN environment_version integer,
    ADD COLUMN environment_build_digest text,
    ADD COLUMN environment_spec bytea;
