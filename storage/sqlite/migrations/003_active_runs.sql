-- Each thread's active run, and which instance runs it. The primary key is
-- what keeps one active run per thread across every process on this file:
-- a second claim on the thread conflicts. A row goes when the run's
-- run-finish is stored; a row whose owner's lease ran out belongs to a dead
-- process, and any live one may take it and settle the run.
--
-- lease_expires is epoch milliseconds: the processes sharing one SQLite
-- file share one machine's clock.
CREATE TABLE active_runs (
    thread_id     TEXT    NOT NULL PRIMARY KEY REFERENCES threads (id) ON DELETE CASCADE,
    run_id        TEXT    NOT NULL,
    -- The owning instance's id; '' while no process runs it.
    owner_id      TEXT    NOT NULL DEFAULT '',
    -- 1 while waiting for a confirmation.
    suspended     INTEGER NOT NULL DEFAULT 0 CHECK (suspended IN (0, 1)),
    lease_expires INTEGER NOT NULL
) STRICT;

CREATE INDEX active_runs_owner ON active_runs (owner_id);
CREATE INDEX active_runs_lease ON active_runs (lease_expires) WHERE owner_id <> '';
