-- upgrade: compatible locking
-- stead schema 2 (SQLite): waits, events, task state, durable wake-ups.
-- A suspended run has status 'waiting', no lease, and wakes when an event is
-- accepted for it or when wake_at (its earliest timer or wait expiry) passes.
ALTER TABLE runs ADD COLUMN wake_at REAL;
CREATE INDEX runs_waking ON runs (wake_at) WHERE status = 'waiting';

-- One row per wait. Only the token's hash is stored.
CREATE TABLE waits (
    wait_id     TEXT PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES runs (run_id),
    addr        TEXT NOT NULL,
    kind        TEXT NOT NULL,
    bind        TEXT NOT NULL,
    schema      TEXT,
    token_hash  TEXT,
    task_key    TEXT NOT NULL,
    expires_at  REAL,
    state       TEXT NOT NULL,
    event_id    TEXT,
    created_at  REAL NOT NULL,
    closed_at   REAL
);
CREATE INDEX waits_run ON waits (run_id, kind);
CREATE INDEX waits_open ON waits (expires_at) WHERE state = 'open';

-- Every delivered event, accepted or not, with its verdict.
CREATE TABLE events (
    run_id      TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    wait_id     TEXT,
    kind        TEXT,
    payload     TEXT NOT NULL,
    bind        TEXT NOT NULL,
    verdict     TEXT NOT NULL,
    reason      TEXT,
    detail      TEXT,
    received_at REAL NOT NULL,
    PRIMARY KEY (run_id, event_id)
);

-- Versioned business facts of a task, changed only by compare-and-set.
CREATE TABLE task_state (
    task_key   TEXT PRIMARY KEY,
    version    INTEGER NOT NULL,
    data       TEXT NOT NULL,
    run_id     TEXT NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE task_state_history (
    task_key   TEXT NOT NULL,
    version    INTEGER NOT NULL,
    data       TEXT NOT NULL,
    run_id     TEXT NOT NULL,
    at         REAL NOT NULL,
    PRIMARY KEY (task_key, version)
);

-- Per-database settings; `secret` signs wait tokens when STEAD_SECRET is unset.
CREATE TABLE stead_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
