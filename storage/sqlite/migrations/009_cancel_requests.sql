-- A cancel asked of a run or background agent that another instance runs
-- is written into its claim row: its owner reads it with its next lease
-- renewal and stops the work, whether or not the bus carried the request
-- too (the bus only makes it sooner). '' while nothing was asked. The row
-- goes with the work it claims, and the request with it.
ALTER TABLE active_runs ADD COLUMN cancel_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE background_agents ADD COLUMN cancel_reason TEXT NOT NULL DEFAULT '';
