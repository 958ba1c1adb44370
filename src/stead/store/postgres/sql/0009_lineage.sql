-- upgrade: compatible online
-- stead schema 9 (postgres): where a run came from. A fork copies a prefix of
-- its parent's journal; a successor (continue-as-new) starts with an empty
-- one. One row per run that has a parent, read from either side: a run's
-- parent by its id, its forks and successor by the parent's.
CREATE TABLE lineage (
    run_id     TEXT PRIMARY KEY REFERENCES runs (run_id),
    parent_id  TEXT NOT NULL REFERENCES runs (run_id),
    kind       TEXT NOT NULL,
    at_seq     INTEGER NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX lineage_parent ON lineage (parent_id, created_at);
