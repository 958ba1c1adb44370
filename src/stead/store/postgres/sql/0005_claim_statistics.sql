-- upgrade: compatible online
-- stead schema 5 (PostgreSQL): statistics for the claim's plan.
-- The claim filters runs by (workflow || '@' || version), an expression the
-- planner has no statistics on: it guessed that 0.5% of the runnable runs
-- match and, to get a few, read them all and sorted them by created_at. With
-- statistics on the expression (gathered by ANALYZE, which autovacuum runs),
-- it reads runs_runnable in order and stops at the claim's limit.
CREATE STATISTICS IF NOT EXISTS runs_code ON (workflow || '@' || version) FROM runs;
