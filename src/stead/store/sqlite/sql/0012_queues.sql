-- upgrade: breaking locking
-- stead schema 12 (sqlite): queues. A run started in a queue carries its name,
-- its priority (lower runs first) and an optional dedup key (unique among the
-- queue's live runs, as a task id is among all live runs); started_at is its
-- first claim, which a queue's rate counts. Queued runs are claimed only by
-- the queue's own claim, under its limits: the plain claim's indexes leave
-- them out, and the queue's indexes serve its claim and the counts it makes.
ALTER TABLE runs ADD COLUMN queue TEXT;
ALTER TABLE runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN dedup_key TEXT;
ALTER TABLE runs ADD COLUMN started_at REAL;
DROP INDEX runs_runnable;
CREATE INDEX runs_runnable ON runs (created_at)
    WHERE status IN ('pending', 'running') AND queue IS NULL;
DROP INDEX runs_waking;
CREATE INDEX runs_waking ON runs (wake_at) WHERE status = 'waiting' AND queue IS NULL;
CREATE INDEX runs_queued ON runs (queue, priority, created_at)
    WHERE queue IS NOT NULL AND status IN ('pending', 'running');
CREATE INDEX runs_queue_waking ON runs (queue, wake_at)
    WHERE queue IS NOT NULL AND status = 'waiting';
CREATE INDEX runs_queue_leased ON runs (queue, lease_expires_at)
    WHERE queue IS NOT NULL AND lease_owner IS NOT NULL;
CREATE INDEX runs_queue_started ON runs (queue, started_at)
    WHERE queue IS NOT NULL AND started_at IS NOT NULL;
CREATE UNIQUE INDEX runs_live_dedup ON runs (queue, dedup_key)
    WHERE dedup_key IS NOT NULL
      AND status NOT IN ('completed', 'failed', 'cancelled', 'revalidation_failed');
