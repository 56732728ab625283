-- User messages, confirmation requests, and the indexes that find runs
-- without a run-finish.

CREATE TABLE messages (
    id         TEXT NOT NULL PRIMARY KEY,
    thread_id  TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    run_id     TEXT NOT NULL DEFAULT '',
    role       TEXT NOT NULL,
    content    TEXT NOT NULL,
    created_at TEXT NOT NULL
) STRICT;

-- A thread's messages oldest first; the rowid at the end of every index
-- entry breaks ties in insertion order. Also serves the cascade from threads.
CREATE INDEX messages_thread_created ON messages (thread_id, created_at);

CREATE TABLE confirmations (
    request_id   TEXT NOT NULL PRIMARY KEY,
    thread_id    TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    run_id       TEXT NOT NULL,
    agent_id     TEXT NOT NULL,
    tool_call_id TEXT NOT NULL,
    owner_id     TEXT NOT NULL,
    -- The confirmation-request payload, byte for byte as it was sent.
    request      TEXT NOT NULL,
    status       TEXT NOT NULL DEFAULT 'pending' CHECK (status <> ''),
    -- The answer body as received; NULL while pending.
    answer       TEXT,
    created_at   TEXT NOT NULL,
    answered_at  TEXT
) STRICT;

-- A thread's pending confirmations oldest first, and the cascade from threads.
CREATE INDEX confirmations_thread_status ON confirmations (thread_id, status, created_at);

-- UnfinishedRuns looks at run boundaries only: partial indexes hold just
-- those rows, so the appends of every other event pay nothing for them.
-- The start index carries seq, which bounds a run's events from below.
CREATE INDEX events_run_starts ON events (thread_id, run_id, seq) WHERE type = 'run-start';
CREATE INDEX events_run_finishes ON events (thread_id, run_id) WHERE type = 'run-finish';
