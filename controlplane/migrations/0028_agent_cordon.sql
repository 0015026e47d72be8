-- An operator's hold on an agent (controlplane.drains): a cordoned agent takes no new session
-- (placement skips it); a draining one is cordoned too, and the sweep moves its idle sessions
-- off it until drain_deadline, after which it interrupts the turns still running there. Both
-- outlive reconnects and control-plane restarts: a Hello renews the lease, never the hold.
ALTER TABLE agents ADD COLUMN cordoned_at timestamptz;
ALTER TABLE agents ADD COLUMN drain_deadline timestamptz;
-- What `astrabox status` shows of each agent: its version (its Hello's) and when its last
-- heartbeat was heard (the renewal's `heard_ago` before it).
ALTER TABLE agents ADD COLUMN agent_version text NOT NULL DEFAULT '';
ALTER TABLE agents ADD COLUMN heartbeat_at timestamptz;
