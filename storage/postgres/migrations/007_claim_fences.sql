-- Fencing tokens (see instanceai.RunClaims). Every claim and take of a row
-- of active_runs or background_agents stores a fresh token from this
-- sequence in the row's fence column, and every write for a run or a
-- background agent (its events, checkpoint pieces, kept endings and
-- confirmation requests) checks, in its own transaction, that a claim row
-- of the thread still holds the token it carries: an instance cut off from
-- the database past its lease cannot write after the instance that took
-- its work over. nextval takes no row lock and is not rolled back, so a
-- take waits for nothing but the row it takes, and a token is never handed
-- out twice.
CREATE SEQUENCE claim_fences;

-- Rows claimed before this migration have 0, which no live holder has.
ALTER TABLE active_runs ADD COLUMN fence BIGINT NOT NULL DEFAULT 0;
ALTER TABLE background_agents ADD COLUMN fence BIGINT NOT NULL DEFAULT 0;
