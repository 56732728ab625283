-- The serving processes on this database, each with the bus it joined the
-- others by: an instance records itself when it starts, renews its lease
-- with its heartbeat and removes itself when it stops. One that starts on
-- another bus than the live instances' (or on the memory bus beside a
-- live process on this file) would neither hear them nor be heard: it
-- refuses to start, naming both (see instanceai.CheckBus).
--
-- started_at and lease_expires are epoch milliseconds, as in active_runs.
CREATE TABLE instances (
    id            TEXT    NOT NULL PRIMARY KEY,
    bus           TEXT    NOT NULL,
    host          TEXT    NOT NULL,
    pid           INTEGER NOT NULL,
    started_at    INTEGER NOT NULL,
    lease_expires INTEGER NOT NULL
) STRICT;
