-- upgrade: compatible locking
-- stead schema 13 (PostgreSQL): child runs, run deadlines, cancellation
-- requests and schedules (see ../sqlite/0013_children_schedules.sql).
ALTER TABLE runs ADD COLUMN parent_id TEXT;
ALTER TABLE runs ADD COLUMN deadline DOUBLE PRECISION;
ALTER TABLE runs ADD COLUMN cancel_requested DOUBLE PRECISION;
CREATE INDEX runs_parent ON runs (parent_id) WHERE parent_id IS NOT NULL;

-- A child that ends wakes its parent if the parent suspended waiting for it,
-- and tells idle workers (NOTIFY, delivered at commit). A parent suspending
-- share-locks the rows of the children it waits for (query child_status), so
-- the two cannot miss each other.
CREATE FUNCTION stead_wake_parent() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE runs SET status = 'running', wake_at = NULL, updated_at = NEW.updated_at
    WHERE run_id = NEW.parent_id AND status = 'waiting';
    IF FOUND THEN
        PERFORM pg_notify('stead_work', current_schema());
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER wake_parent_of_ended_child AFTER UPDATE OF status ON runs
FOR EACH ROW
WHEN (NEW.parent_id IS NOT NULL
      AND NEW.status IN ('completed', 'failed', 'cancelled', 'revalidation_failed'))
EXECUTE FUNCTION stead_wake_parent();

CREATE TABLE schedules (
    name       TEXT PRIMARY KEY,
    cron       TEXT NOT NULL,
    next_tick  DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL
);
