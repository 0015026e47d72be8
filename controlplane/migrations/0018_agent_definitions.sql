-- Agent definitions (AgentService, controlplane.agent_definitions): a project's
-- named agents. Each change of definition is a new immutable row of
-- agent_definition_versions; latest_version is the newest's number. An archived
-- agent starts no session and keeps its name. request_id is the CreateAgent
-- request's: a retry finds the agent it made.
CREATE TABLE agent_definitions (
    agent_id        uuid PRIMARY KEY,
    project_id      uuid NOT NULL REFERENCES projects (project_id),
    name            text NOT NULL,
    latest_version  integer NOT NULL CHECK (latest_version >= 1),
    archived        boolean NOT NULL DEFAULT false,
    request_id      text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    -- Also the listing's index: a project's agents by name.
    CONSTRAINT agent_definitions_name_per_project UNIQUE (project_id, name),
    CONSTRAINT agent_definitions_request_id_per_project UNIQUE (project_id, request_id)
);

-- One version of an agent's definition: the AgentSpec in its canonical form (the
-- deterministic serialization) and that form's SHA-256, hex.
CREATE TABLE agent_definition_versions (
    agent_id     uuid NOT NULL REFERENCES agent_definitions (agent_id),
    version      integer NOT NULL CHECK (version >= 1),
    spec         bytea NOT NULL,
    spec_digest  text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (agent_id, version)
);
