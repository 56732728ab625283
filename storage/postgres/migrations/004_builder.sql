-- The N8N Builder's projects, their workflow files, the versions (backups)
-- of each file, and the modify/iterate history of workflows with their
-- feedback. Deleting a project takes its files, deleting a file its
-- versions.
--
-- Names sort in byte order (COLLATE "C"), as the other backends sort them,
-- whatever the database's collation. JSON documents are TEXT, not JSONB,
-- which would reorder keys.

CREATE TABLE builder_projects (
    id          BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner_id    TEXT        NOT NULL,
    name        TEXT        COLLATE "C" NOT NULL,
    description TEXT        NOT NULL DEFAULT '',
    -- builder.Settings as its JSON object, extra keys included.
    settings    TEXT        NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL,
    -- Names are per owner; the index also finds an owner's projects.
    UNIQUE (owner_id, name)
);

CREATE TABLE builder_workflows (
    id         BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id BIGINT      NOT NULL REFERENCES builder_projects (id) ON DELETE CASCADE,
    filename   TEXT        COLLATE "C" NOT NULL,
    -- The workflow JSON byte for byte as saved; size is its length in bytes.
    data       TEXT        NOT NULL,
    size       BIGINT      NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL,
    -- Also serves the cascade from builder_projects.
    UNIQUE (project_id, filename)
);

CREATE TABLE builder_versions (
    -- Insertion order is age: the version limit keeps the highest ids.
    -- Saves of one project take turns on its row, so ids follow commits.
    id            BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workflow_id   BIGINT      NOT NULL REFERENCES builder_workflows (id) ON DELETE CASCADE,
    filename      TEXT        COLLATE "C" NOT NULL,
    data          TEXT        NOT NULL,
    size          BIGINT      NOT NULL,
    -- builder.Describe of data, taken when the backup was made, so that
    -- listing versions reads no content.
    workflow_name TEXT        NOT NULL,
    node_count    INTEGER     NOT NULL,
    tags          TEXT        NOT NULL,
    -- When the backup was made, and when its content had been saved.
    created_at    TIMESTAMPTZ NOT NULL,
    modified_at   TIMESTAMPTZ NOT NULL,
    UNIQUE (workflow_id, filename)
);

-- A file's versions newest first, and the cascade from builder_workflows.
CREATE INDEX builder_versions_age ON builder_versions (workflow_id, id);

CREATE TABLE builder_iterations (
    id              BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner_id        TEXT        NOT NULL,
    workflow_id     TEXT        NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL,
    description     TEXT        NOT NULL,
    -- builder.Hash values, their 64 bits stored as a signed integer.
    original_hash   BIGINT      NOT NULL,
    modified_hash   BIGINT      NOT NULL,
    -- The caller's JSON object byte for byte.
    changes_summary TEXT        NOT NULL,
    original_size   BIGINT      NOT NULL,
    modified_size   BIGINT      NOT NULL
);

CREATE INDEX builder_iterations_workflow ON builder_iterations (owner_id, workflow_id, created_at, id);

CREATE TABLE builder_feedback (
    id            BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner_id      TEXT        NOT NULL,
    workflow_id   TEXT        NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL,
    feedback      TEXT        NOT NULL,
    feedback_type TEXT        NOT NULL
);

CREATE INDEX builder_feedback_workflow ON builder_feedback (owner_id, workflow_id, created_at, id);
