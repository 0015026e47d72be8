-- Where a project's sessions that bind credentials may run (AdminService.SetCredentialHosts):
-- 'any', its dedicated agents first, then the shared pool; 'dedicated', only agents dedicated to
-- it, and no other agent is given those sessions' credentials (credential_store.resolve).
ALTER TABLE projects ADD COLUMN credential_hosts text NOT NULL DEFAULT 'any'
    CHECK (credential_hosts IN ('any', 'dedicated'));
