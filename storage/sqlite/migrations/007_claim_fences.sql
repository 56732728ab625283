-- Fencing tokens (see instanceai.RunClaims). Every claim and take of a row
-- of active_runs or background_agents stores a fresh token from this
-- one-row counter in the row's fence column, and every write for a run or
-- a background agent (its events, checkpoint pieces, kept endings and
-- confirmation requests) checks, in its own transaction, that a claim row
-- of the thread still holds the token it carries: a process whose lease
-- ran out while it stalled cannot write after the process that took its
-- work over. SQLite has one writer at a time, so a claim bumps the counter
-- with UPDATE ... RETURNING in its own transaction and no two claims get
-- the same token.
CREATE TABLE claim_fences (
    id   INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    last INTEGER NOT NULL
) STRICT;
INSERT INTO claim_fences (id, last) VALUES (1, 0);

-- Rows claimed before this migration have 0, which no live holder has.
ALTER TABLE active_runs ADD COLUMN fence INTEGER NOT NULL DEFAULT 0;
ALTER TABLE background_agents ADD COLUMN fence INTEGER NOT NULL DEFAULT 0;
