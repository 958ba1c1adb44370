-- upgrade: compatible online
-- stead schema 28 (SQLite): worker_processes, the process each live worker runs in
-- (the machine, the pid and the kernel's start time of that pid; see
-- stead/processes.py). A claimer on the same machine that finds a lease
-- holder's process gone ends its leases at once instead of waiting them out.
-- locks (PostgreSQL): the worker holds a session-level advisory lock keyed
-- by its id, on a connection of its own; once that lock is free, its process
-- is gone (or cut off from the server), wherever it ran. A worker's row is
-- removed when it stops cleanly or is found dead.
CREATE TABLE worker_processes (
    worker_id TEXT PRIMARY KEY,
    machine   TEXT NOT NULL,
    pid       BIGINT NOT NULL,
    started   TEXT NOT NULL,
    at        DOUBLE PRECISION NOT NULL,
    locks     BOOLEAN NOT NULL DEFAULT FALSE
);
