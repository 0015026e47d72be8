-- The credential store (CredentialService, controlplane.credential_store): one row per named
-- secret of a project, encrypted under the operator's key (never kept in the database). ciphertext is
-- AES-256-GCM of the secret (its tag appended) under a random 96-bit nonce, with associated data
-- binding it to its project, name and version, so a row copied elsewhere does not decrypt. key_id
-- is a short hash of the key it was written under: a row under another key is told apart from a
-- damaged one. version counts from 1, one more each time the secret is replaced.
CREATE TABLE credential_store (
    project_id   uuid NOT NULL REFERENCES projects (project_id),
    name         text NOT NULL,
    version      integer NOT NULL CHECK (version >= 1),
    description  text NOT NULL DEFAULT '',
    ciphertext   bytea NOT NULL,
    nonce        bytea NOT NULL CHECK (octet_length(nonce) = 12),
    key_id       text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    -- Also the listing's index: a project's credentials by name.
    PRIMARY KEY (project_id, name)
);
