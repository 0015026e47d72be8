-- What a session's turns used (controlplane.usage): the sums of the usage journaled
-- on its TURN_COMPLETED and TURN_INTERRUPTED events, kept in the transaction that
-- journals each, so Session.usage reads one row. Costs are numeric: a sum of
-- thousands of turns keeps every digit the engine reported.
ALTER TABLE sessions
    ADD COLUMN usage_input_tokens bigint NOT NULL DEFAULT 0,
    ADD COLUMN usage_output_tokens bigint NOT NULL DEFAULT 0,
    ADD COLUMN usage_cache_creation_input_tokens bigint NOT NULL DEFAULT 0,
    ADD COLUMN usage_cache_read_input_tokens bigint NOT NULL DEFAULT 0,
    ADD COLUMN usage_cost_usd numeric NOT NULL DEFAULT 0,
    ADD COLUMN usage_turns integer NOT NULL DEFAULT 0,
    -- The engine's running totals at its newest result (Claude Code reports the cost
    -- of its whole conversation so far, not the turn's): a turn's cost is the
    -- difference from them, unless the engine's totals started again.
    ADD COLUMN engine_cost_usd numeric NOT NULL DEFAULT 0,
    ADD COLUMN engine_tokens bigint NOT NULL DEFAULT 0;


-- ListSessions' label selector (controlplane.listing): `@>` for key=value and `?` for a key.
CREATE INDEX sessions_labels ON sessions USING gin (labels) WHERE deleted_at IS NULL;
