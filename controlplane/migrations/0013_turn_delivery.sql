-- When a turn was handed to its agent (DeliverInput enqueued) and when the agent
-- accepted it (that command acknowledged without error). A running turn whose
-- input its agent has not accepted by the delivery deadline is failed with a
-- reason, and the agent is told to let go of it (controlplane/deadlines.py).
ALTER TABLE turns ADD COLUMN dispatched_at timestamptz, ADD COLUMN delivered_at timestamptz;

CREATE INDEX turns_undelivered ON turns (dispatched_at) WHERE state = 'running' AND delivered_at IS NULL;
