-- Threads and their ordered event logs.

CREATE TABLE threads (
    id         TEXT        NOT NULL PRIMARY KEY,
    owner_id   TEXT        NOT NULL,
    title      TEXT        NOT NULL DEFAULT '',
    -- The per-thread seq counter. Append bumps it with UPDATE ... RETURNING
    -- inside its transaction: the row lock queues concurrent appenders, on
    -- this instance or any other, so seqs are handed out without gaps.
    last_seq   BIGINT      NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Listing an owner's threads newest first reads this index in order.
CREATE INDEX threads_owner_created ON threads (owner_id, created_at DESC, id DESC);

CREATE TABLE events (
    thread_id  TEXT        NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    seq        BIGINT      NOT NULL CHECK (seq > 0),
    type       TEXT        NOT NULL,
    run_id     TEXT        NOT NULL DEFAULT '',
    agent_id   TEXT        NOT NULL DEFAULT '',
    -- The whole event as the JSON text it was appended as, byte for byte.
    -- TEXT rather than JSONB, which would reorder keys and drop whitespace;
    -- cast to jsonb in ad-hoc queries. The columns above are copies for
    -- filtering without parsing.
    data       TEXT        NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- A safety net under the counter: a duplicate seq fails the append
    -- instead of forking the log.
    PRIMARY KEY (thread_id, seq)
);
