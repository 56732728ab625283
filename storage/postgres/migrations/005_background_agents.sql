-- Each background agent at work, and which instance runs it. A background
-- agent keeps working after its run's run-finish has freed the thread's
-- active_runs row, so this row is what tells the agent of a dead instance
-- (its lease ran out: any live instance may take the row and settle the
-- agent with agent-completed{error}) from one a live instance runs. A row
-- goes once the agent's agent-completed is stored.
CREATE TABLE background_agents (
    thread_id     TEXT        NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    agent_id      TEXT        NOT NULL,
    run_id        TEXT        NOT NULL,
    owner_id      TEXT        NOT NULL,
    lease_expires TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (thread_id, agent_id)
);

-- The heartbeat renews one owner's rows; the sweep looks for expired ones.
CREATE INDEX background_agents_owner ON background_agents (owner_id);
CREATE INDEX background_agents_lease ON background_agents (lease_expires);
