-- A released session's sandbox its agent refused or could not confirm destroying
-- (controlplane.destructions): the failures in a row, the last one's reason, when
-- the sweep tries again (exponential backoff), and when it gave up (then an
-- operator must remove the sandbox). All cleared once the sandbox is released.
ALTER TABLE sessions
    ADD COLUMN destroy_attempts integer NOT NULL DEFAULT 0,
    ADD COLUMN destroy_failure text NOT NULL DEFAULT '',
    ADD COLUMN destroy_retry_at timestamptz,
    ADD COLUMN destroy_abandoned_at timestamptz;
