-- upgrade: compatible online
-- stead schema 11 (PostgreSQL): an event an operator delivered (from the dashboard,
-- or a webhook signed with stead's key) instead of the wait's token keeps who
-- vouched for it and why, so the audit shows it as an operator's decision.
ALTER TABLE events ADD COLUMN delivered_by TEXT;
ALTER TABLE events ADD COLUMN delivered_why TEXT;

-- Every operator action (the dashboard's, or any caller of stead.operator.act)
-- with who decided it and why, done or refused, for the run's audit.
CREATE TABLE operator_actions (
    action_id TEXT PRIMARY KEY,
    run_id    TEXT NOT NULL,
    action    TEXT NOT NULL,
    target    TEXT NOT NULL,
    author    TEXT NOT NULL,
    why       TEXT NOT NULL,
    outcome   TEXT NOT NULL,
    detail    TEXT NOT NULL,
    at        DOUBLE PRECISION NOT NULL
);
CREATE INDEX operator_actions_run ON operator_actions (run_id, at);
