-- The git repository a session starts with (CreateSessionRequest.git_source, checked by
-- controlplane.git_sources): the serialized astrabox.environments.v1.GitSource, NULL for none.
-- The session's first StartRuntime carries it; the agent clones it into the workspace once.
ALTER TABLE sessions ADD COLUMN git_source bytea;
