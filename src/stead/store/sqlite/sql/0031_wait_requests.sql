-- upgrade: compatible online
-- stead schema 31 (SQLite): what a wait asks.
-- wait_requests: the request a wait was opened with (`run.wait(request=)`; a
-- LangGraph interrupt's node and value), as JSON text, bounded (see
-- `stead.workflow.waits.REQUEST_CHARS`): what the person deciding is shown.
-- A table of its own rather than a column of `waits`, so the rows older code
-- reads with `SELECT * FROM waits` keep their shape (PostgreSQL refuses to run
-- a prepared statement whose result type changed under it).
CREATE TABLE wait_requests (
    wait_id TEXT PRIMARY KEY,
    request TEXT NOT NULL
);
