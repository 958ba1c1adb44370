-- upgrade: compatible online
-- stead schema 29 (PostgreSQL): a worker's death is told by what a network
-- blip cannot fake.
-- worker_processes.presence_taken: how many times the worker has taken its
-- presence lock. A claimer that finds the lock free notes this count, and
-- judges the holder dead only if the lock stayed free, with the same count,
-- for a grace period longer than a reconnect (a live worker whose presence
-- connection dropped takes its lock again within it, and counts one more).
-- lease_ends: a lease ended early by such a judgement, at `epoch`, and when it
-- would have run out (`until`). Its holder may still be alive and cut off,
-- sending: the run's next holder does not act on "not found" for an effect
-- whose outcome is unknown before then. A table of its own, not a column of
-- runs: older workers read runs with prepared `SELECT *` statements, whose
-- cached plans fail once runs has another column.
ALTER TABLE worker_processes ADD COLUMN presence_taken BIGINT NOT NULL DEFAULT 0;
CREATE TABLE lease_ends (
    run_id TEXT PRIMARY KEY REFERENCES runs (run_id) ON DELETE CASCADE,
    epoch  BIGINT NOT NULL,
    until  DOUBLE PRECISION NOT NULL
);
