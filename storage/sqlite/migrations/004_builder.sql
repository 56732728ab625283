-- The N8N Builder's projects, their workflow files, the versions (backups)
-- of each file, and the modify/iterate history of workflows with their
-- feedback. Timestamps are TEXT as in 001. Deleting a project takes its
-- files, deleting a file its versions (foreign_keys is on for the writer).

CREATE TABLE builder_projects (
    id          INTEGER PRIMARY KEY,
    owner_id    TEXT NOT NULL,
    name        TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    -- builder.Settings as its JSON object, extra keys included.
    settings    TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    -- Names are per owner; the index also finds an owner's projects.
    UNIQUE (owner_id, name)
) STRICT;

CREATE TABLE builder_workflows (
    id         INTEGER PRIMARY KEY,
    project_id INTEGER NOT NULL REFERENCES builder_projects (id) ON DELETE CASCADE,
    filename   TEXT    NOT NULL,
    -- The workflow JSON byte for byte as saved; size is its length in
    -- bytes (length() would count characters).
    data       TEXT    NOT NULL,
    size       INTEGER NOT NULL,
    created_at TEXT    NOT NULL,
    updated_at TEXT    NOT NULL,
    -- Also serves the cascade from builder_projects.
    UNIQUE (project_id, filename)
) STRICT;

CREATE TABLE builder_versions (
    -- Insertion order is age: the version limit keeps the highest ids.
    id            INTEGER PRIMARY KEY,
    workflow_id   INTEGER NOT NULL REFERENCES builder_workflows (id) ON DELETE CASCADE,
    filename      TEXT    NOT NULL,
    data          TEXT    NOT NULL,
    size          INTEGER NOT NULL,
    -- builder.Describe of data, taken when the backup was made, so that
    -- listing versions reads no content.
    workflow_name TEXT    NOT NULL,
    node_count    INTEGER NOT NULL,
    tags          TEXT    NOT NULL,
    -- When the backup was made, and when its content had been saved.
    created_at    TEXT    NOT NULL,
    modified_at   TEXT    NOT NULL,
    UNIQUE (workflow_id, filename)
) STRICT;

-- A file's versions newest first, and the cascade from builder_workflows.
CREATE INDEX builder_versions_age ON builder_versions (workflow_id, id);

CREATE TABLE builder_iterations (
    id              INTEGER PRIMARY KEY,
    owner_id        TEXT    NOT NULL,
    workflow_id     TEXT    NOT NULL,
    created_at      TEXT    NOT NULL,
    description     TEXT    NOT NULL,
    -- builder.Hash values, their 64 bits stored as a signed integer.
    original_hash   INTEGER NOT NULL,
    modified_hash   INTEGER NOT NULL,
    -- The caller's JSON object byte for byte.
    changes_summary TEXT    NOT NULL,
    original_size   INTEGER NOT NULL,
    modified_size   INTEGER NOT NULL
) STRICT;

CREATE INDEX builder_iterations_workflow ON builder_iterations (owner_id, workflow_id, created_at);

CREATE TABLE builder_feedback (
    id            INTEGER PRIMARY KEY,
    owner_id      TEXT NOT NULL,
    workflow_id   TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    feedback      TEXT NOT NULL,
    feedback_type TEXT NOT NULL
) STRICT;

CREATE INDEX builder_feedback_workflow ON builder_feedback (owner_id, workflow_id, created_at);
