-- upgrade: compatible online no-transaction
-- stead schema 26 (PostgreSQL): the dashboard's runs list pages by keyset,
-- newest first, in (created_at, run_id) order (the search_runs query): this
-- index serves each page, however deep, without sorting every run.
-- Built CONCURRENTLY, so runs are written on while it builds (a plain build
-- holds off every write to runs: seconds on a million runs, see
-- bench/RESULTS.md). A build that failed leaves an invalid index behind: it
-- is dropped before the next try.
DROP INDEX CONCURRENTLY IF EXISTS runs_created;
CREATE INDEX CONCURRENTLY runs_created ON runs (created_at, run_id);
