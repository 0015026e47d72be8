-- Forks (controlplane.forks): where a session forked from (the source session and the seq of the turn end it
-- forked at; NULL for a session created from nothing), and whether the source's files were copied into it.
ALTER TABLE sessions ADD COLUMN forked_from_session_id uuid;
ALTER TABLE sessions ADD COLUMN forked_from_seq bigint;
ALTER TABLE sessions ADD COLUMN fork_files_copied_at timestamptz;
-- The engine transcript as it stood when each turn ended: its length and SHA-256. The control plane keeps
-- only the newest transcript (engine_transcripts); the engine only appends to it, so a turn's transcript is
-- the newest one's first transcript_bytes bytes, which a fork checks against the digest before it uses them.
ALTER TABLE turns ADD COLUMN transcript_bytes bigint;
ALTER TABLE turns ADD COLUMN transcript_sha256 bytea;
