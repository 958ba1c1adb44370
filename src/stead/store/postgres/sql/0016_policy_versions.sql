-- upgrade: compatible online
-- stead schema 16 (PostgreSQL): the policy versions deliveries compare, and task
-- state changed from outside a run.
-- waits.policy_version: the app's policy version when the wait opened (the
-- bound value, for a wait bound to `policy_version`); NULL: no policy.
-- worker_hosts.policy_version: the policy version the worker's app runs
-- (NULL: it has none); live_until: when the worker counts as gone if it is
-- not heard from again (its heartbeat row says so, three heartbeats ahead).
-- task_state_history.author, why: who changed the state from outside a run
-- and why (the row's run_id is then empty); NULL for a run's own change.
ALTER TABLE waits ADD COLUMN policy_version TEXT;
ALTER TABLE worker_hosts ADD COLUMN policy_version TEXT;
ALTER TABLE worker_hosts ADD COLUMN live_until DOUBLE PRECISION;
ALTER TABLE task_state_history ADD COLUMN author TEXT;
ALTER TABLE task_state_history ADD COLUMN why TEXT;
