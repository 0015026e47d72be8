-- The size of each event's payload as journaled: the bytes of its JSON text as written (what a
-- reader holds of it, within the small factor by which PostgreSQL's rendering of it may differ).
-- Reads for clients cut their pages by it (controlplane.store.events.read_for_clients), so a page of
-- large events stays within a byte budget without PostgreSQL rendering each one to measure it.
-- NULL for the events journaled before this column: those are measured as they are read.
ALTER TABLE events ADD COLUMN payload_bytes integer;
