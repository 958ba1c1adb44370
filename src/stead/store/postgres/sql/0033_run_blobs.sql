-- upgrade: compatible online
-- stead schema 33 (PostgreSQL): which run owns which large value's blob.
-- run_blobs: a row per (run, blob) for each payload stored in the blob store
-- as a reference (`stead.payloads.references`), inserted in the transaction
-- that commits the reference, after the blob was made durable. Pruning a run
-- deletes its rows, then the blobs no run owns any more; `stead blobs gc`
-- deletes blobs no row names (orphans of a write whose reference never
-- committed). A blob shared by two runs (the same value) has two rows.
CREATE TABLE run_blobs (
    run_id TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size BIGINT NOT NULL,
    at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (run_id, sha256)
);
CREATE INDEX run_blobs_sha256 ON run_blobs (sha256);
