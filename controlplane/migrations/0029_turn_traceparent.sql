-- The trace of the call that queued a message (a W3C traceparent, empty when none), so that the
-- turn it becomes is traced under that call even when it is dispatched later, by another call
-- (the settling of the turn before it): controlplane.turns.
ALTER TABLE turns ADD COLUMN traceparent text NOT NULL DEFAULT '';
