-- upgrade: compatible locking
-- stead schema 26 (SQLite): the dashboard's runs list pages by keyset,
-- newest first, in (created_at, run_id) order (the search_runs query): this
-- index serves each page, however deep, without sorting every run.
CREATE INDEX runs_created ON runs (created_at, run_id);
