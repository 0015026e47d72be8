-- Webhooks (WebhookService, controlplane.webhooks): a project's subscriptions to its sessions'
-- events, and the durable outbox of their deliveries.
--
-- The outbox is filled by a trigger on `events`, so a delivery is written in the same transaction
-- as the journal event it announces, whichever statement journals it (a kernel transaction or an
-- agent's batch of outputs): an event that commits has its deliveries, one that rolls back has
-- none, and a control plane that crashes afterwards leaves them in the table for any replica.
--
-- A webhook's signing secrets are sealed under the operator's credentials key (as the credential
-- store's, controlplane.credential_store.cipher): the current one, and while a rotation's overlap
-- lasts the previous one, whose signature is sent beside the new one.
CREATE TABLE webhooks (
    webhook_id               uuid PRIMARY KEY,
    project_id               uuid NOT NULL REFERENCES projects (project_id),
    url                      text NOT NULL,
    description              text NOT NULL DEFAULT '',
    event_types              text[] NOT NULL,
    enabled                  boolean NOT NULL DEFAULT true,
    -- The client's CreateWebhook request_id: a retried create returns the same webhook.
    request_id               text,
    secret_version           integer NOT NULL CHECK (secret_version >= 1),
    secret_ciphertext        bytea NOT NULL,
    secret_nonce             bytea NOT NULL,
    secret_key_id            text NOT NULL,
    -- The secret before the last rotation, signed with too until previous_expires_at.
    previous_ciphertext      bytea,
    previous_nonce           bytea,
    previous_key_id          text,
    previous_expires_at      timestamptz,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    UNIQUE (project_id, request_id)
);
CREATE INDEX webhooks_listing ON webhooks (project_id, created_at, webhook_id);

-- One row per (webhook, event): what is sent (payload, fixed once written), where it stands, and the
-- lease of the replica attempting it. delivery_id is the `webhook-id` header: the same on every
-- attempt, so a receiver drops the repeats of at-least-once delivery.
CREATE TABLE webhook_deliveries (
    delivery_id       uuid PRIMARY KEY,
    webhook_id        uuid NOT NULL REFERENCES webhooks (webhook_id) ON DELETE CASCADE,
    project_id        uuid NOT NULL,
    event_type        text NOT NULL,
    session_id        uuid,
    seq               bigint,
    payload           jsonb NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    state             text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    -- Attempts made, ever; `round_attempts` of them since the last (re)delivery began, which the
    -- limits count (with `round_started_at`, for the age limit).
    attempts          integer NOT NULL DEFAULT 0,
    round_attempts    integer NOT NULL DEFAULT 0,
    round_started_at  timestamptz NOT NULL DEFAULT now(),
    next_attempt_at   timestamptz NOT NULL DEFAULT now(),
    -- Set while a replica attempts it; a lapsed lease lets another replica try again.
    lease_until       timestamptz,
    last_status_code  integer,
    last_error        text NOT NULL DEFAULT '',
    finished_at       timestamptz,
    UNIQUE (webhook_id, session_id, seq)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_listing ON webhook_deliveries (webhook_id, created_at DESC, delivery_id DESC);

-- The delivery log: one row per attempt, written when it starts (an attempt whose replica died has
-- no outcome) and completed when it ends.
CREATE TABLE webhook_attempts (
    delivery_id       uuid NOT NULL REFERENCES webhook_deliveries (delivery_id) ON DELETE CASCADE,
    attempt           integer NOT NULL CHECK (attempt >= 1),
    started_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz,
    status_code       integer,
    error             text NOT NULL DEFAULT '',
    -- The start of the response body, bounded (controlplane.webhooks.sender).
    response_excerpt  text NOT NULL DEFAULT '',
    PRIMARY KEY (delivery_id, attempt)
);

-- The event types a webhook subscribes to, by the journal's event kinds. Kept in step with
-- controlplane.webhooks.events.EVENT_TYPES (tests/controlplane/test_webhooks.py compares them).
CREATE FUNCTION webhook_event_type(kind text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE kind
        WHEN 'session_created' THEN 'session.created'
        WHEN 'runtime_ready' THEN 'session.ready'
        WHEN 'runtime_failed' THEN 'session.failed'
        WHEN 'runtime_lost' THEN 'session.runtime_lost'
        WHEN 'interaction_requested' THEN 'session.waiting_for_input'
        WHEN 'session_archived' THEN 'session.archived'
        WHEN 'session_deleted' THEN 'session.deleted'
        WHEN 'turn_completed' THEN 'turn.completed'
        WHEN 'turn_failed' THEN 'turn.failed'
        WHEN 'turn_interrupted' THEN 'turn.interrupted'
    END
    $$;

-- The Standard Webhooks payload: {type, timestamp, data}. `data` names the session and the event
-- (seq: read the journal from there for everything else) with a few small fields of its payload;
-- never an engine message or a tool's input.
CREATE FUNCTION webhook_deliveries_enqueue() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
    DECLARE
        event_type text := webhook_event_type(NEW.kind);
        project uuid;
    BEGIN
        SELECT s.project_id INTO project FROM sessions s WHERE s.session_id = NEW.session_id;
        INSERT INTO webhook_deliveries (delivery_id, webhook_id, project_id, event_type, session_id, seq, payload)
        SELECT gen_random_uuid(), w.webhook_id, w.project_id, event_type, NEW.session_id, NEW.seq,
            jsonb_build_object(
                'type', event_type,
                'timestamp', to_char(NEW.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                'data', jsonb_strip_nulls(jsonb_build_object(
                    'project_id', w.project_id,
                    'session_id', NEW.session_id,
                    'seq', NEW.seq,
                    'event_kind', NEW.kind,
                    'turn_id', NEW.turn_id,
                    'reason', NEW.payload->'reason',
                    'interaction_id', NEW.payload->'interaction'->'interaction_id'
                ))
            )
        FROM webhooks w
        WHERE w.project_id = project AND w.enabled AND event_type = ANY (w.event_types)
        ON CONFLICT (webhook_id, session_id, seq) DO NOTHING;
        IF FOUND THEN
            PERFORM pg_notify('astrabox_webhooks', '');
        END IF;
        RETURN NULL;
    END
    $$;

CREATE TRIGGER events_webhook_deliveries AFTER INSERT ON events
    FOR EACH ROW
    WHEN (NEW.kind IN ('session_created', 'runtime_ready', 'runtime_failed', 'runtime_lost',
        'interaction_requested', 'session_archived', 'session_deleted', 'turn_completed',
        'turn_failed', 'turn_interrupted'))
    EXECUTE FUNCTION webhook_deliveries_enqueue();
