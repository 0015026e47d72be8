-- Retention (controlplane.retention): when a session was released (archived or deleted; the first
-- of the two), from which --session-retention counts before the sweep forgets it and everything
-- of it. Sessions released before this column existed count from their SESSION_ARCHIVED or
-- SESSION_DELETED event.
ALTER TABLE sessions ADD COLUMN released_at timestamptz;
UPDATE sessions s SET released_at = COALESCE(
    (SELECT min(e.at) FROM events e
      WHERE e.session_id = s.session_id AND e.kind IN ('session_archived', 'session_deleted')),
    s.deleted_at, s.updated_at)
  WHERE s.state IN ('archived', 'deleted');
-- forgettable: released sessions whose sandbox is gone, oldest first
CREATE INDEX sessions_released ON sessions (released_at)
    WHERE state IN ('deleted', 'archived') AND sandbox_id IS NULL;
