-- The serving processes on this database, each with the bus it joined the
-- others by: an instance records itself when it starts, renews its lease
-- with its heartbeat and removes itself when it stops. One that starts on
-- another bus than the live instances' (or on the memory bus beside a
-- live instance) would neither hear them nor be heard: it refuses to start,
-- naming both (see instanceai.CheckBus).
CREATE TABLE instances (
    id            TEXT        NOT NULL PRIMARY KEY,
    bus           TEXT        NOT NULL,
    host          TEXT        NOT NULL,
    pid           INTEGER     NOT NULL,
    started_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    lease_expires TIMESTAMPTZ NOT NULL
);
