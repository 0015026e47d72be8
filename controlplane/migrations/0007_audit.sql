-- Who did what: one row per mutating call (identity.rules marks them), whatever
-- its outcome. `actor` is `key:<key id>` or `oidc:<subject>`, never a secret;
-- `details` holds the identifiers the request named (session, key, project,
-- name), never its text or files.
CREATE TABLE audit_records (
    record_id   bigserial PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    project_id  uuid NOT NULL REFERENCES projects (project_id),
    actor       text NOT NULL,
    method      text NOT NULL,
    session_id  uuid,
    details     jsonb NOT NULL DEFAULT '{}'::jsonb,
    code        text NOT NULL
);
CREATE INDEX audit_records_by_project ON audit_records (project_id, record_id DESC);
