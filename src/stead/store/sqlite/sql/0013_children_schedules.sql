-- upgrade: compatible locking
-- stead schema 13 (SQLite): child runs, run deadlines, cancellation requests
-- and schedules.
-- parent_id: the run that started this one with `run.child` (its result is
-- journaled in the parent). deadline: when the run fails if it has not ended.
-- cancel_requested: when a person asked to cancel a run a worker holds; the
-- worker ends it as cancelled at its next call boundary.
ALTER TABLE runs ADD COLUMN parent_id TEXT;
ALTER TABLE runs ADD COLUMN deadline REAL;
ALTER TABLE runs ADD COLUMN cancel_requested REAL;
CREATE INDEX runs_parent ON runs (parent_id) WHERE parent_id IS NOT NULL;

-- A child that ends wakes its parent if the parent suspended waiting for it.
CREATE TRIGGER wake_parent_of_ended_child AFTER UPDATE OF status ON runs
WHEN NEW.parent_id IS NOT NULL
 AND NEW.status IN ('completed', 'failed', 'cancelled', 'revalidation_failed')
BEGIN
    UPDATE runs SET status = 'running', wake_at = NULL, updated_at = NEW.updated_at
    WHERE run_id = NEW.parent_id AND status = 'waiting';
END;

-- One row per schedule: the next tick not yet fired. Firing moves it forward
-- by compare-and-set in the transaction that starts the tick's runs, so each
-- tick is fired once however many workers look.
CREATE TABLE schedules (
    name       TEXT PRIMARY KEY,
    cron       TEXT NOT NULL,
    next_tick  REAL NOT NULL,
    updated_at REAL NOT NULL
);
