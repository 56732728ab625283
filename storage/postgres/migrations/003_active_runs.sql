-- Each thread's active run, and which instance runs it. The primary key is
-- what keeps one active run per thread across every instance on this
-- database: a second claim on the thread conflicts. A row goes when the
-- run's run-finish is stored; a row whose owner's lease ran out belongs to
-- a dead instance, and any live one may take it and settle the run.
CREATE TABLE active_runs (
    thread_id     TEXT        NOT NULL PRIMARY KEY REFERENCES threads (id) ON DELETE CASCADE,
    run_id        TEXT        NOT NULL,
    -- The owning instance's id; '' while no process runs it (a run
    -- suspended on a confirmation whose process shut down).
    owner_id      TEXT        NOT NULL DEFAULT '',
    -- Waiting for a confirmation: never swept as dead while the agent can
    -- resume it.
    suspended     BOOLEAN     NOT NULL DEFAULT false,
    lease_expires TIMESTAMPTZ NOT NULL,
    claimed_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The heartbeat renews one owner's rows; the sweep looks for expired ones.
CREATE INDEX active_runs_owner ON active_runs (owner_id);
CREATE INDEX active_runs_lease ON active_runs (lease_expires) WHERE owner_id <> '';
