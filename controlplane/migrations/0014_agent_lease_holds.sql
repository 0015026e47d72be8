-- While an agent's stream is live on a replica, that replica holds a session
-- advisory lock for the stream's lease generation on a connection of its own
-- (controlplane.leases). A lease whose lock is held has not lapsed, whatever
-- its lease_expires_at says: its renewal may be late, its heartbeats are not.
-- The lock goes with the holder's connection, so a replica that dies or loses
-- the database releases what it held.

-- The lock's key: the first 64 bits of the MD5 of "<agent_id>/<generation>".
-- Two leases sharing a key (about 2^-64 apart) would only keep each other
-- from lapsing while one is held.
CREATE FUNCTION agent_lease_lock_key(agent_id text, generation bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT ('x' || left(md5(agent_id || '/' || generation), 16))::bit(64)::bigint $$;

-- Whether any session of this database holds the lease's lock (pg_locks
-- shows a bigint key as its high and low 32 bits, objsubid 1).
CREATE FUNCTION agent_lease_held(agent_id text, generation bigint) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
    SELECT EXISTS (
        SELECT 1 FROM pg_locks l
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND l.classid = ((agent_lease_lock_key($1, $2) >> 32) & 4294967295)::oid
          AND l.objid = (agent_lease_lock_key($1, $2) & 4294967295)::oid)
    $$;
