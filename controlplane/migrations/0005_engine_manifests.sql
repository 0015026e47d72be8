-- What each engine an agent runs can do, as its latest Hello declared it, by
-- kind: {"claude_code": {"permission_modes": [...], "default_permission_mode":
-- ..., "supports_interactions": ..., "supports_background_tasks": ...,
-- "supports_server_info": ...}}. Requests are validated against it; `engines`
-- stays the list of its kinds, for placement. Rows written before it are empty
-- until their agent's next Hello.
ALTER TABLE agents ADD COLUMN engine_manifests jsonb NOT NULL DEFAULT '{}'::jsonb;
