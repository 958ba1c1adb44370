-- upgrade: compatible online
-- stead schema 24 (PostgreSQL): durable streams, the values a workflow appends
-- for a screen to follow (see stead.streams). A stream is (run_id, name);
-- pos numbers its entries from 1 in commit order, the offset a reader
-- resumes after. entry_key is the append's identity: a replayed append finds
-- its key and is not appended again. Entries appended from inside a live call
-- (a model's deltas) carry the call's address and try (epoch.attempt); when
-- another try of that call appends, the earlier try's entries are marked
-- superseded and a 'superseded' entry says so. Retention deletes a run's
-- streams with the run.
CREATE TABLE stream_entries (
    run_id     TEXT NOT NULL,
    name       TEXT NOT NULL,
    pos        BIGINT NOT NULL,
    entry_key  TEXT NOT NULL,
    kind       TEXT NOT NULL,
    value      TEXT NOT NULL,
    call_addr  TEXT,
    call_try   TEXT,
    superseded BIGINT NOT NULL DEFAULT 0,
    epoch      BIGINT NOT NULL,
    at         DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (run_id, name, pos),
    UNIQUE (run_id, name, entry_key)
);
CREATE INDEX stream_entries_call ON stream_entries (run_id, name, call_addr)
    WHERE call_addr IS NOT NULL;
