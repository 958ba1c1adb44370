-- upgrade: compatible online
-- stead schema 10 (sqlite): workspaces. A snapshot of a run's workspace is
-- saved with the journal record that announces it (same fenced transaction);
-- its files' contents are blobs named by their sha256, stored once however
-- many snapshots hold them (unless the snapshot keeps them outside, `blobs`).
CREATE TABLE workspace_blobs (
    sha256  TEXT PRIMARY KEY,
    size    INTEGER NOT NULL,
    data    BLOB NOT NULL
);
CREATE TABLE workspace_snapshots (
    run_id        TEXT NOT NULL REFERENCES runs (run_id),
    name          TEXT NOT NULL,
    seq           INTEGER NOT NULL,
    epoch         INTEGER NOT NULL,
    worker_id     TEXT NOT NULL,
    tree          TEXT NOT NULL,
    manifest      TEXT NOT NULL,
    git           TEXT,
    files         INTEGER NOT NULL,
    bytes         INTEGER NOT NULL,
    stored_bytes  INTEGER NOT NULL,
    blobs         TEXT,
    source        TEXT NOT NULL,
    at            REAL NOT NULL,
    PRIMARY KEY (run_id, seq)
);
