-- The advertise address of the control-plane replica that holds the agent's
-- Connect stream, written by that stream's replica when it attaches. Other
-- replicas forward the agent's workspace requests there. Stale after a
-- replica dies: a forward then fails UNAVAILABLE and the client retries.
ALTER TABLE agents ADD COLUMN replica_address text;

-- The secret replicas present to each other on ForwardWorkspace, so an agent
-- (which can also reach RunnerService) cannot reach another agent's sandbox.
-- One row, generated once: two random UUIDs are 244 bits from pg_strong_random.
CREATE TABLE cluster_secret (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    secret     text NOT NULL
);
INSERT INTO cluster_secret (secret)
    VALUES (replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''));
