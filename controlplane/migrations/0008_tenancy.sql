-- Every session belongs to a project; sessions made before projects existed
-- belong to the operator project `default`. Idempotency keys (request_id) are
-- per project, and each project's listing has its own index.
ALTER TABLE sessions ADD COLUMN project_id uuid REFERENCES projects (project_id);
UPDATE sessions SET project_id = (SELECT project_id FROM projects WHERE operator ORDER BY created_at, name LIMIT 1);
ALTER TABLE sessions ALTER COLUMN project_id SET NOT NULL;
ALTER TABLE sessions DROP CONSTRAINT sessions_request_id_key;
ALTER TABLE sessions ADD CONSTRAINT sessions_request_id_per_project UNIQUE (project_id, request_id);
DROP INDEX sessions_listing;
CREATE INDEX sessions_listing ON sessions (project_id, created_at DESC, session_id DESC) WHERE deleted_at IS NULL;
