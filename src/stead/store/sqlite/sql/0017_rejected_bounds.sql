-- upgrade: compatible locking
-- stead schema 17 (SQLite): rejected events are bounded.
-- Only the newest rejected events are kept, per run and, for runs that do
-- not exist, in all (see the trim_rejected queries); rejected_tally counts
-- those no longer kept: per run, and under run_id '' for runs that do not
-- exist. Accepted events are never trimmed.
CREATE TABLE rejected_tally (
    run_id   TEXT PRIMARY KEY,
    dropped  BIGINT NOT NULL,
    last_at  REAL NOT NULL
);
-- Retention deletes rejected events by age, of any run.
CREATE INDEX events_rejected ON events (received_at) WHERE verdict = 'rejected';
-- Events to runs that do not exist are trimmed oldest first, in all.
CREATE INDEX events_unknown_run ON events (received_at, run_id, event_id)
    WHERE reason = 'unknown_run';
