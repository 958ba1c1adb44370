-- upgrade: breaking locking
-- stead schema 7 (postgres): a run's intent, versioned. Every change (given at
-- start, declared by the workflow, a renewal, a human's resume, a policy's
-- revision) is a new version with who and why; none is overwritten.
-- runs.intent_version is the version in force (0: the run has no intent), so
-- a claim knows without a read whether there is an intent to load.
-- revalidation_failed is a terminal status: the live-task index and the
-- trigger that closes an ended run's waits learn it.
CREATE TABLE intents (
    run_id   TEXT NOT NULL REFERENCES runs (run_id),
    version  INTEGER NOT NULL,
    intent   TEXT NOT NULL,
    author   TEXT NOT NULL,
    why      TEXT NOT NULL,
    at       DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (run_id, version)
);
ALTER TABLE runs ADD COLUMN intent_version INTEGER NOT NULL DEFAULT 0;
DROP INDEX runs_live_task;
CREATE UNIQUE INDEX runs_live_task ON runs (task_id)
    WHERE task_id IS NOT NULL
      AND status NOT IN ('completed', 'failed', 'cancelled', 'revalidation_failed');
DROP TRIGGER close_waits_of_ended_runs ON runs;
CREATE TRIGGER close_waits_of_ended_runs AFTER UPDATE OF status ON runs
FOR EACH ROW
WHEN (NEW.status IN ('completed', 'failed', 'cancelled', 'revalidation_failed'))
EXECUTE FUNCTION stead_close_waits();
