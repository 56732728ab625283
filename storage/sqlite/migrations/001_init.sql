-- Threads and their ordered event logs.
--
-- Timestamps are TEXT in the fixed-width UTC form 2006-01-02T15:04:05.000000Z:
-- fixed width makes text order chronological order, so created_at sorts and
-- indexes correctly without conversion. STRICT makes SQLite reject values of
-- the wrong type instead of silently storing them.

CREATE TABLE threads (
    id         TEXT    NOT NULL PRIMARY KEY,
    owner_id   TEXT    NOT NULL,
    title      TEXT    NOT NULL DEFAULT '',
    -- The per-thread seq counter. Append bumps it inside its transaction, so
    -- seqs are handed out in commit order and never skip.
    last_seq   INTEGER NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
    created_at TEXT    NOT NULL,
    updated_at TEXT    NOT NULL
) STRICT;

-- Listing an owner's threads newest first reads this index in order.
CREATE INDEX threads_owner_created ON threads (owner_id, created_at DESC, id DESC);

CREATE TABLE events (
    thread_id  TEXT    NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL CHECK (seq > 0),
    type       TEXT    NOT NULL,
    run_id     TEXT    NOT NULL DEFAULT '',
    agent_id   TEXT    NOT NULL DEFAULT '',
    -- The whole event as the JSON text it was appended as, byte for byte;
    -- the columns above are copies for ad-hoc queries.
    data       TEXT    NOT NULL,
    created_at TEXT    NOT NULL,
    -- A safety net under the counter: a duplicate seq fails the append
    -- instead of forking the log.
    PRIMARY KEY (thread_id, seq)
) STRICT;
