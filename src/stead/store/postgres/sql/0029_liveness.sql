-- upgrade: compatible online
-- stead schema 29 (PostgreSQL): a worker's death is told by what a network
-- blip cannot fake.
-- worker_processes.presence_taken: how many times the worker has taken its
-- presence lock. A claimer that finds the lock free notes this count, and
-- judges the holder dead only if the lock stayed free, with the same count,
-- for a grace period longer than a reconnect (a live worker whose presence
-- connection dropped takes its lock again within it, and counts one more).
-- runs.prior_lease_until: when the lease ended early by such a judgement
-- would have run out. Its holder may still be alive and cut off, sending: a
-- takeover does not act on "not found" for an effect whose outcome is unknown
-- before then.
ALTER TABLE worker_processes ADD COLUMN presence_taken BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN prior_lease_until DOUBLE PRECISION;
