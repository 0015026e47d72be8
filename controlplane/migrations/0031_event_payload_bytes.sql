-- Where each event's payload lies among its session's: its size as journaled (the bytes of its JSON
-- text as written: what a reader holds of it, within the small factor by which PostgreSQL's
-- rendering may differ) and the bytes of the session's payloads journaled before it; and each
-- session's running total. Reads for clients cut their pages by them
-- (controlplane.store.events.read_for_clients), so a page of large events stays within a byte budget
-- with no measuring at read time. NULL for the events journaled before these columns (paged by count
-- alone); a session's total counts from here on.
ALTER TABLE events ADD COLUMN payload_bytes integer, ADD COLUMN payload_offset bigint;
ALTER TABLE sessions ADD COLUMN payload_bytes bigint NOT NULL DEFAULT 0;
