-- Memory stores (MemoryService, controlplane.memory): a project's named sets of versioned text
-- documents that sessions attach. Nothing is updated in place but the store's updated_at: each
-- write of a document is a new row of memory_versions, a deletion a row marked deleted.
CREATE TABLE memory_stores (
    store_id        uuid PRIMARY KEY,
    project_id      uuid NOT NULL REFERENCES projects (project_id),
    name            text NOT NULL,
    description     text NOT NULL DEFAULT '',
    request_id      text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT memory_stores_name_per_project UNIQUE (project_id, name),
    CONSTRAINT memory_stores_request_id_per_project UNIQUE (project_id, request_id)
);

-- Every version of every document: version is 1, 2, 3 … per (store, path). The writer is the
-- calling principal, or 'session' with the session and turn that wrote it. conflicting_version
-- names a version the writer replaced without having seen it (a session's copy was older).
-- restore_request_id marks the versions one RestoreMemoryStore wrote (its retry writes none).
CREATE TABLE memory_versions (
    store_id            uuid NOT NULL REFERENCES memory_stores (store_id) ON DELETE CASCADE,
    path                text NOT NULL,
    version             bigint NOT NULL,
    content             text NOT NULL DEFAULT '',
    deleted             boolean NOT NULL DEFAULT false,
    sha256              text NOT NULL DEFAULT '',
    writer              text NOT NULL DEFAULT '',
    session_id          uuid,
    turn_id             text NOT NULL DEFAULT '',
    conflicting_version bigint NOT NULL DEFAULT 0,
    restored_from       timestamptz,
    restore_request_id  text,
    created_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (store_id, path, version)
);

-- The store's history newest first (ListMemoryDocumentVersions, point-in-time reads).
CREATE INDEX memory_versions_by_time ON memory_versions (store_id, created_at DESC, path);
CREATE UNIQUE INDEX memory_versions_restore ON memory_versions (store_id, restore_request_id, path)
    WHERE restore_request_id IS NOT NULL;

-- The stores a session attached (CreateSessionRequest.memory): its later starts mount them again.
CREATE TABLE session_memory (
    session_id      uuid NOT NULL REFERENCES sessions (session_id) ON DELETE CASCADE,
    store_id        uuid NOT NULL REFERENCES memory_stores (store_id) ON DELETE CASCADE,
    read_write      boolean NOT NULL,
    PRIMARY KEY (session_id, store_id)
);
