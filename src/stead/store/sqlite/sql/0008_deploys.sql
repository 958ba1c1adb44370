-- upgrade: compatible online
-- stead schema 8 (SQLite): what deploys need.
-- worker_hosts: each worker's heartbeat, per workflow@version it serves
-- ('hosts': it runs that version; 'migrates': it claims runs of that version
-- to migrate them); stopped_at once it stopped cleanly. A runnable run whose
-- version no worker has served for a grace period is stranded.
-- migrations: every migration applied to a run (who, when, from -> to, the
-- input before and after); rolled_back_at once a person undid it.
-- journal_archive: a run's journal as it was before a migration (kept, never
-- replayed; a rollback puts it back).
CREATE TABLE worker_hosts (
    worker_id  TEXT NOT NULL,
    code       TEXT NOT NULL,
    role       TEXT NOT NULL,
    started_at REAL NOT NULL,
    seen_at    REAL NOT NULL,
    stopped_at REAL,
    PRIMARY KEY (worker_id, code, role)
);
CREATE INDEX worker_hosts_code ON worker_hosts (code, seen_at);

CREATE TABLE migrations (
    run_id         TEXT NOT NULL REFERENCES runs (run_id),
    number         INTEGER NOT NULL,
    from_version   INTEGER NOT NULL,
    to_version     INTEGER NOT NULL,
    old_input      TEXT NOT NULL,
    new_input      TEXT NOT NULL,
    records_before INTEGER NOT NULL,
    records_after  INTEGER NOT NULL,
    author         TEXT NOT NULL,
    at             REAL NOT NULL,
    epoch          INTEGER NOT NULL,
    rolled_back_at REAL,
    rolled_back_by TEXT,
    PRIMARY KEY (run_id, number)
);

CREATE TABLE journal_archive (
    run_id    TEXT NOT NULL REFERENCES runs (run_id),
    migration INTEGER NOT NULL,
    seq       INTEGER NOT NULL,
    addr      TEXT NOT NULL,
    attempt   INTEGER NOT NULL,
    kind      TEXT NOT NULL,
    name      TEXT NOT NULL,
    digest    TEXT NOT NULL,
    status    TEXT NOT NULL,
    payload   TEXT NOT NULL,
    epoch     INTEGER NOT NULL,
    at        REAL NOT NULL,
    PRIMARY KEY (run_id, migration, seq)
);
