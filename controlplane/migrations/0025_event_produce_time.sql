-- When the agent produced an output (its Output.produce_time), kept on the events journaling it;
-- NULL for the events the control plane makes itself (and for those journaled before this column).
ALTER TABLE events ADD COLUMN produce_time timestamptz;
