-- The text of coalescing segments still open, in pieces, stored as it
-- streams (instanceai.Checkpoint): a crash before a segment's block loses
-- only the text since its last piece, and the settlement of the crashed
-- run writes the block from the pieces. Clients never read this table; a
-- segment's pieces go once its block is in the log.
--
-- kind is text-delta or reasoning-delta; since_seq is the thread's
-- highest committed seq when the segment's first piece was stored, which
-- tells this segment's block from an earlier one of the same response.
CREATE TABLE segment_checkpoints (
    thread_id   TEXT    NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    run_id      TEXT    NOT NULL,
    agent_id    TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    since_seq   BIGINT  NOT NULL,
    piece       INTEGER NOT NULL CHECK (piece >= 0),
    response_id TEXT    NOT NULL,
    user_id     TEXT    NOT NULL,
    ts          BIGINT  NOT NULL,
    text        TEXT    NOT NULL,
    PRIMARY KEY (thread_id, run_id, since_seq, agent_id, kind, piece)
);
