-- Each background agent at work, and which instance runs it. A background
-- agent keeps working after its run's run-finish has freed the thread's
-- active_runs row, so this row is what tells the agent of a dead process
-- (its lease ran out: any live process may take the row and settle the
-- agent with agent-completed{error}) from one a live process runs. A row
-- goes once the agent's agent-completed is stored.
--
-- lease_expires is epoch milliseconds, as in active_runs.
CREATE TABLE background_agents (
    thread_id     TEXT    NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    agent_id      TEXT    NOT NULL,
    run_id        TEXT    NOT NULL,
    owner_id      TEXT    NOT NULL,
    lease_expires INTEGER NOT NULL,
    PRIMARY KEY (thread_id, agent_id)
) STRICT;

CREATE INDEX background_agents_owner ON background_agents (owner_id);
CREATE INDEX background_agents_lease ON background_agents (lease_expires);
