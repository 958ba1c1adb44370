-- upgrade: compatible online
-- stead schema 4 (PostgreSQL): a journal row costs less to keep.
-- The unique index on (run_id, addr, attempt, status) goes. A run's records are
-- written by the one holder of its fence, and its primary key (run_id, seq)
-- still refuses a second write of a position; the only lookups by call
-- identity are the read-backs of an unacknowledged commit, which the primary
-- key serves (they scan one run's journal). The index cost ~120 bytes a record.
ALTER TABLE journal DROP CONSTRAINT IF EXISTS journal_run_id_addr_attempt_status_key;
-- Journal rows are never updated nor deleted: fill the primary key's pages.
ALTER INDEX journal_pkey SET (fillfactor = 100);
