-- Schedules (ScheduleService, controlplane.schedules): a project's cron expressions that
-- start a session from an agent definition and an environment with a prompt. spec is the
-- ScheduleSpec in its deterministic serialization. next_tick_at is the next tick not yet
-- claimed (frozen while paused, so a resume applies the missed-ticks policy); a replica
-- claims due ticks by moving it on in the transaction that inserts their runs.
CREATE TABLE schedules (
    schedule_id     uuid PRIMARY KEY,
    project_id      uuid NOT NULL REFERENCES projects (project_id),
    name            text NOT NULL,
    spec            bytea NOT NULL,
    paused          boolean NOT NULL DEFAULT false,
    next_tick_at    timestamptz NOT NULL,
    -- Ticks skipped (MISSED_TICKS_SKIP) since the last run: the next run counts them.
    missed_ticks    integer NOT NULL DEFAULT 0,
    request_id      text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT schedules_name_per_project UNIQUE (project_id, name),
    CONSTRAINT schedules_request_id_per_project UNIQUE (project_id, request_id)
);

-- What the scheduler looks for: schedules due now.
CREATE INDEX schedules_due ON schedules (next_tick_at) WHERE NOT paused;

-- One run per (schedule, tick): the primary key is what makes a tick run once however many
-- replicas see it due. state is creating → starting → started | failed; a run in a
-- transitional state is worked on by the replica holding its lease (leased_until), and by
-- any replica once the lease lapsed (its holder died): every step is idempotent (the
-- session's request id and the prompt's client_message_id derive from schedule and tick).
-- deadline_at bounds the whole run. session_id names no foreign key: a session is
-- forgotten by retention on its own, its run stays in the history.
CREATE TABLE schedule_runs (
    schedule_id     uuid NOT NULL REFERENCES schedules (schedule_id) ON DELETE CASCADE,
    tick_at         timestamptz NOT NULL,
    state           text NOT NULL CHECK (state IN ('creating', 'starting', 'started', 'failed')),
    missed_ticks    integer NOT NULL DEFAULT 0,
    session_id      uuid,
    error_reason    text NOT NULL DEFAULT '',
    error_message   text NOT NULL DEFAULT '',
    leased_until    timestamptz NOT NULL,
    deadline_at     timestamptz NOT NULL,
    attempts        integer NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schedule_id, tick_at)
);

-- Runs still in a transitional state, for the scheduler's pass.
CREATE INDEX schedule_runs_open ON schedule_runs (leased_until) WHERE state IN ('creating', 'starting');
