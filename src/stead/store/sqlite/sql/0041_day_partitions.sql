-- upgrade: compatible online
-- stead schema 41 (SQLite): nothing changes. On PostgreSQL this migration
-- partitions the journal and the events by day, so retention drops a day's
-- rows whole (see stead/store/postgres/sql/0041_day_partitions.sql); SQLite
-- has no partitions, and its journal stays one table: retention deletes a
-- pruned run's rows one by one, as before (docs/guides/platform/retention.md
-- says where that stops). New run ids are time-ordered in both (stead/run_ids.py).
SELECT 1;
