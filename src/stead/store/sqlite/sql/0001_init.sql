-- upgrade: compatible online
-- stead schema 1 (SQLite).
-- runs: one row per run; epoch + lease_owner + lease_expires_at are the lease.
-- journal: a run's acknowledged calls; seq is commit order, addr the call identity.
-- resumes: one row per takeover.
CREATE TABLE runs (
    run_id           TEXT PRIMARY KEY,
    workflow         TEXT NOT NULL,
    version          INTEGER NOT NULL,
    task_id          TEXT,
    status           TEXT NOT NULL,
    input            TEXT NOT NULL,
    result           TEXT,
    error            TEXT,
    epoch            INTEGER NOT NULL DEFAULT 0,
    lease_owner      TEXT,
    lease_expires_at REAL,
    created_at       REAL NOT NULL,
    updated_at       REAL NOT NULL
);
CREATE UNIQUE INDEX runs_live_task ON runs (task_id)
    WHERE task_id IS NOT NULL AND status NOT IN ('completed', 'failed', 'cancelled');
CREATE INDEX runs_runnable ON runs (created_at)
    WHERE status IN ('pending', 'running');
CREATE INDEX runs_status ON runs (status, created_at);

CREATE TABLE journal (
    run_id  TEXT NOT NULL REFERENCES runs (run_id),
    seq     INTEGER NOT NULL,
    addr    TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    kind    TEXT NOT NULL,
    name    TEXT NOT NULL,
    digest  TEXT NOT NULL,
    status  TEXT NOT NULL,
    payload TEXT NOT NULL,
    epoch   INTEGER NOT NULL,
    at      REAL NOT NULL,
    PRIMARY KEY (run_id, seq),
    UNIQUE (run_id, addr, attempt, status)
);

CREATE TABLE resumes (
    run_id       TEXT NOT NULL REFERENCES runs (run_id),
    epoch        INTEGER NOT NULL,
    worker_id    TEXT NOT NULL,
    at           REAL NOT NULL,
    from_seq     INTEGER NOT NULL,
    code_version TEXT NOT NULL,
    reused       INTEGER NOT NULL,
    detail       TEXT NOT NULL,
    PRIMARY KEY (run_id, epoch)
);
