-- Named queries for the SQLite store (sqlite3 parameters: :name).
-- Leases are judged by the database's own clock, read inside the statement
-- (julianday('now'): one value per statement, millisecond precision): a lease
-- ends at that time of the claim or renewal plus the lease length. The clock
-- a store is given never enters it, so a process with a skewed clock cannot
-- take a live lease. :lease_now stands in for the database's time where a
-- test moves a fake lease clock; null (always, outside tests) means the
-- database's.

-- name: schema_table
-- Whether the version table is there (a file stead never opened has none).
SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'stead_schema';

-- name: create_version_table
CREATE TABLE IF NOT EXISTS stead_schema (version INTEGER PRIMARY KEY);

-- name: schema_applied
SELECT version FROM stead_schema;

-- name: schema_beyond
-- The versions past :known, as the releases that applied them described them.
SELECT version, name, compatible, stead_version FROM stead_schema
WHERE version > :known ORDER BY version;

-- name: insert_version
INSERT INTO stead_schema (version) VALUES (:version);

-- name: insert_version_described
INSERT INTO stead_schema (version, name, compatible, applied_at, stead_version)
VALUES (:version, :name, :compatible, :applied_at, :stead_version);

-- name: live_worker_versions
-- The workers heard from lately, each with the release and schema its code runs.
SELECT worker_id, MAX(stead_version) AS stead_version,
       MIN(schema_version) AS schema_version
FROM worker_hosts WHERE stopped_at IS NULL AND live_until > :now
GROUP BY worker_id ORDER BY worker_id;

-- name: live_workers_unversioned
-- The same on a database before schema 30, whose heartbeats name no version.
SELECT DISTINCT worker_id, NULL AS stead_version, NULL AS schema_version
FROM worker_hosts WHERE stopped_at IS NULL AND seen_at > :since ORDER BY worker_id;

-- name: find_live_task
SELECT * FROM runs
WHERE task_id = :task_id AND status NOT IN ('completed', 'failed', 'cancelled', 'revalidation_failed');

-- name: insert_run
-- Nothing (no row) if it conflicts: the flow then reads the run that won.
INSERT INTO runs (run_id, workflow, version, task_id, status, input, epoch,
                  created_at, updated_at, queue, priority, dedup_key)
VALUES (:run_id, :workflow, :version, :task_id, 'pending', :input, 0, :now, :now,
        :queue, :priority, :dedup_key)
ON CONFLICT DO NOTHING
RETURNING *;

-- name: get_run
-- The run, and the tenant it serves ('' none; no row: it ended before schema 35).
SELECT runs.*, (SELECT t.tenant FROM run_tenants t WHERE t.run_id = runs.run_id) AS tenant
FROM runs WHERE run_id = :run_id;

-- name: list_runs
SELECT runs.*, t.tenant FROM runs LEFT JOIN run_tenants t ON t.run_id = runs.run_id
WHERE (:status IS NULL OR runs.status = :status)
  AND (:tenant IS NULL OR t.tenant = :tenant)
  AND (:workflow IS NULL OR workflow = :workflow)
ORDER BY runs.created_at DESC, runs.run_id DESC
LIMIT :limit;

-- name: list_runs_of_status
-- list_runs of one status, by the index on (status, created_at): in list_runs,
-- `status IS NULL OR ...` leaves the planner no index but the runs' order.
-- Named, because the planner, told a status has a third of the runs, walks
-- the runs newest first for the LIMIT instead, and reads every run when
-- the status has few or none (the failed ones, at 120,000 runs: 25 ms
-- against 0.02).
SELECT runs.*, t.tenant FROM runs INDEXED BY runs_status LEFT JOIN run_tenants t ON t.run_id = runs.run_id
WHERE runs.status = :status
  AND (:tenant IS NULL OR t.tenant = :tenant)
  AND (:workflow IS NULL OR workflow = :workflow)
ORDER BY runs.created_at DESC, runs.run_id DESC
LIMIT :limit;

-- name: backlog
-- What workers could take, by workflow@version: runnable now, and leased (with
-- the soonest lease end). Waiting runs count once they are due.
SELECT workflow, version,
       SUM(CASE WHEN status = 'running' AND lease_expires_at >
           COALESCE(:lease_now, (julianday('now') - 2440587.5) * 86400.0)
                THEN 0 ELSE 1 END)
           AS runnable,
       SUM(CASE WHEN status = 'running' AND lease_expires_at >
           COALESCE(:lease_now, (julianday('now') - 2440587.5) * 86400.0)
                THEN 1 ELSE 0 END)
           AS leased,
       MIN(CASE WHEN status = 'running' AND lease_expires_at >
           COALESCE(:lease_now, (julianday('now') - 2440587.5) * 86400.0)
                THEN lease_expires_at END) AS next_expiry
FROM runs
WHERE status IN ('pending', 'running') OR (status = 'waiting' AND wake_at <= :now)
GROUP BY workflow, version
ORDER BY workflow, version;

-- name: leased_runs
-- Runs whose lease has not ended, soonest end first.
SELECT * FROM runs
WHERE status = 'running' AND lease_expires_at >
    COALESCE(:lease_now, (julianday('now') - 2440587.5) * 86400.0)
ORDER BY lease_expires_at
LIMIT :limit;

-- name: cancel_run
UPDATE runs
SET status = 'cancelled', epoch = epoch + 1, lease_owner = NULL,
    lease_expires_at = NULL, updated_at = :now
WHERE run_id = :run_id AND status NOT IN ('completed', 'failed', 'cancelled', 'revalidation_failed')
RETURNING *;

-- name: claim_candidates
-- The runs a claim would take, oldest first. Two arms, each reading an index
-- in order and stopping at :limit (one OR of both read every pending run and
-- sorted them); due sleepers come from the wake_at index, not from all
-- waiting runs. Runs in a queue are left to the queue's claim (claim_queue).
SELECT run_id FROM (
SELECT * FROM (
    SELECT run_id, created_at FROM runs INDEXED BY runs_runnable
    WHERE status IN ('pending', 'running') AND queue IS NULL
      AND (lease_expires_at IS NULL OR lease_expires_at <=
          COALESCE(:lease_now, (julianday('now') - 2440587.5) * 86400.0))
      AND (workflow || '@' || version) IN (SELECT value FROM json_each(:hosted))
      AND run_id NOT IN (SELECT value FROM json_each(:exclude))
    ORDER BY created_at LIMIT :limit)
UNION ALL
SELECT * FROM (
    SELECT run_id, created_at FROM runs INDEXED BY runs_waking
    WHERE status = 'waiting' AND wake_at <= :now AND queue IS NULL
      AND (workflow || '@' || version) IN (SELECT value FROM json_each(:hosted))
      AND run_id NOT IN (SELECT value FROM json_each(:exclude))
    ORDER BY created_at LIMIT :limit)
)
ORDER BY created_at LIMIT :limit;

-- name: claim
-- :run_ids are claim_candidates read in the same write transaction. A run's
-- first claim sets started_at: the trace shows the time before it as queued.
UPDATE runs
SET epoch = epoch + 1, lease_owner = :worker_id, lease_expires_at =
    COALESCE(:lease_now, (julianday('now') - 2440587.5) * 86400.0) + :lease_seconds,
    status = 'running', wake_at = NULL, updated_at = :now,
    started_at = COALESCE(started_at, :now)
WHERE run_id IN (SELECT value FROM json_each(:run_ids))
RETURNING *;

-- name: renew
-- :run_ids, :epochs, :workers: the fences, as three JSON arrays; :in_flight,
-- per fence, the started markers its holder has in flight (JSON text), ''
-- for none, or null to leave the column as it is.
WITH fences AS (
    SELECT r.value AS run_id, e.value AS epoch, w.value AS worker_id, i.value AS in_flight
    FROM json_each(:run_ids) AS r
    JOIN json_each(:epochs) AS e ON e.key = r.key
    JOIN json_each(:workers) AS w ON w.key = r.key
    JOIN json_each(:in_flight) AS i ON i.key = r.key
)
UPDATE runs SET lease_expires_at =
    COALESCE(:lease_now, (julianday('now') - 2440587.5) * 86400.0) + :lease_seconds,
    in_flight = CASE WHEN fences.in_flight IS NULL THEN runs.in_flight
                     ELSE NULLIF(fences.in_flight, '') END
FROM fences
WHERE runs.status = 'running' AND runs.run_id = fences.run_id
  AND runs.epoch = fences.epoch AND runs.lease_owner = fences.worker_id
RETURNING runs.run_id, runs.epoch, runs.lease_owner;

-- name: release
UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL, updated_at = :now
WHERE run_id = :run_id AND epoch = :epoch AND lease_owner = :worker_id
  AND status = 'running';

-- name: fence
SELECT 1 FROM runs
WHERE run_id = :run_id AND epoch = :epoch AND lease_owner = :worker_id
  AND status = 'running';

-- name: insert_record_fenced
-- insert_record, done only if the fence holds (`fence`): one statement fewer
-- for a journal append. No row inserted means a stale fence.
INSERT INTO journal (run_id, seq, addr, attempt, kind, name, digest, status,
                     payload, epoch, at, arguments)
SELECT :run_id, :seq, :addr, :attempt, :kind, :name, :digest, :status,
       :payload, :epoch, :at, :arguments
WHERE EXISTS (SELECT 1 FROM runs
              WHERE run_id = :run_id AND epoch = :fence_epoch
                AND lease_owner = :worker_id AND status = 'running');

-- name: insert_record
INSERT INTO journal (run_id, seq, addr, attempt, kind, name, digest, status,
                     payload, epoch, at, arguments)
VALUES (:run_id, :seq, :addr, :attempt, :kind, :name, :digest, :status,
        :payload, :epoch, :at, :arguments);

-- name: insert_resume
INSERT INTO resumes (run_id, epoch, worker_id, at, from_seq, code_version,
                     reused, detail)
VALUES (:run_id, :epoch, :worker_id, :at, :from_seq, :code_version, :reused,
        :detail)
-- a record written before the takeover's judgement is written again with it
ON CONFLICT (run_id, epoch) DO UPDATE SET detail = excluded.detail;

-- name: finish
UPDATE runs
SET status = :status, result = :result, error = :error, lease_owner = NULL,
    lease_expires_at = NULL, updated_at = :now
WHERE run_id = :run_id AND epoch = :epoch AND lease_owner = :worker_id
  AND status = 'running';

-- name: load_journal
SELECT seq, addr, attempt, kind, name, digest, status, payload, epoch, at, arguments
FROM journal WHERE run_id = :run_id ORDER BY seq;

-- name: list_resumes
SELECT * FROM resumes WHERE run_id = :run_id ORDER BY epoch;

-- name: resume_stopped
UPDATE runs
SET status = 'running', error = NULL, epoch = epoch + 1, lease_owner = NULL,
    lease_expires_at = NULL, updated_at = :now
WHERE run_id = :run_id AND status = :expect
RETURNING *;

-- name: next_seq
SELECT COALESCE(MAX(seq), -1) + 1 AS seq FROM journal WHERE run_id = :run_id;

-- name: find_record
SELECT seq FROM journal
WHERE run_id = :run_id AND addr = :addr AND attempt = :attempt AND status = :status;

-- name: count_records
-- Read-back after a write whose commit status is unknown (SQLite always
-- knows: kept so that both dialects answer every flow).
SELECT count(*) AS n FROM journal
JOIN (SELECT s.value AS seq, a.value AS addr, t.value AS attempt, u.value AS status
      FROM json_each(:seqs) AS s
      JOIN json_each(:addrs) AS a ON a.key = s.key
      JOIN json_each(:attempts) AS t ON t.key = s.key
      JOIN json_each(:statuses) AS u ON u.key = s.key) AS rec
  ON journal.seq = rec.seq AND journal.addr = rec.addr
 AND journal.attempt = rec.attempt AND journal.status = rec.status
WHERE journal.run_id = :run_id;

-- name: has_resume
SELECT 1 FROM resumes WHERE run_id = :run_id AND epoch = :epoch;

-- name: lock_run
-- Nothing to do: a write transaction (BEGIN IMMEDIATE) holds the file's one
-- write lock, so everything that touches a run happens one at a time.

-- name: lock_state
-- Nothing to do: the write transaction holds the file's write lock.

-- name: notify_work
-- Nothing to send: idle workers watch the file's data_version instead.

-- name: insert_wait
INSERT INTO waits (wait_id, run_id, addr, kind, bind, schema, token_hash, task_key,
                   expires_at, state, created_at, policy_version)
VALUES (:wait_id, :run_id, :addr, :kind, :bind, :schema, :token_hash, :task_key,
        :expires_at, 'open', :created_at,
        :policy_version);

-- name: get_wait
SELECT w.*, q.request FROM waits w LEFT JOIN wait_requests q ON q.wait_id = w.wait_id
WHERE w.wait_id = :wait_id;

-- name: insert_wait_request
INSERT INTO wait_requests (wait_id, request) VALUES (:wait_id, :request);

-- name: run_waits
SELECT w.*, q.request FROM waits w LEFT JOIN wait_requests q ON q.wait_id = w.wait_id
WHERE w.run_id = :run_id ORDER BY w.created_at, w.wait_id;

-- name: locked_run
-- A delivery's first statement: its run (the write transaction already holds
-- the file's one write lock).
SELECT * FROM runs WHERE run_id = :run_id;

-- name: run_waits_and_event
-- What a delivery judges against, in one read after its run's lock: the
-- event already stored under its id (its columns as e_*, repeated on every
-- row; NULL: none) and the run's waits, each with the version of its task's
-- state now (state_version NULL: no state yet, or no task). A run without
-- waits gives one row, its wait columns NULL.
SELECT ws.*, e.run_id AS e_run_id, e.event_id AS e_event_id, e.wait_id AS e_wait_id,
       e.kind AS e_kind, e.payload AS e_payload, e.bind AS e_bind, e.verdict AS e_verdict,
       e.reason AS e_reason, e.detail AS e_detail, e.received_at AS e_received_at,
       e.delivered_by AS e_delivered_by, e.delivered_why AS e_delivered_why
FROM (SELECT 1 AS one) AS x
LEFT JOIN events e ON e.run_id = :run_id AND e.event_id = :event_id
LEFT JOIN (SELECT w.*, s.version AS state_version
           FROM waits w LEFT JOIN task_state s ON s.task_key = w.task_key
           WHERE w.run_id = :run_id) AS ws ON true
ORDER BY ws.created_at, ws.wait_id;

-- name: wait_and_event
-- A wait and, if an event consumed it, that event (its columns as e_*), in one read.
SELECT w.*, e.run_id AS e_run_id, e.event_id AS e_event_id, e.wait_id AS e_wait_id,
       e.kind AS e_kind, e.payload AS e_payload, e.bind AS e_bind, e.verdict AS e_verdict,
       e.reason AS e_reason, e.detail AS e_detail, e.received_at AS e_received_at,
       e.delivered_by AS e_delivered_by, e.delivered_why AS e_delivered_why
FROM waits w LEFT JOIN events e ON e.run_id = w.run_id AND e.event_id = w.event_id
WHERE w.wait_id = :wait_id;

-- name: run_wait_and_event
-- wait_and_event of a wait the caller knows the run of (see
-- PostgreSQL's: there, the run's id prunes the events' partitions).
SELECT w.*, e.run_id AS e_run_id, e.event_id AS e_event_id, e.wait_id AS e_wait_id,
       e.kind AS e_kind, e.payload AS e_payload, e.bind AS e_bind, e.verdict AS e_verdict,
       e.reason AS e_reason, e.detail AS e_detail, e.received_at AS e_received_at,
       e.delivered_by AS e_delivered_by, e.delivered_why AS e_delivered_why
FROM waits w LEFT JOIN events e ON e.run_id = :run_id AND e.event_id = w.event_id
WHERE w.wait_id = :wait_id AND w.run_id = :run_id;

-- name: run_last_consumed_wait
-- The wait of a run an event consumed last, with that event (see
-- PostgreSQL's).
SELECT w.*, e.run_id AS e_run_id, e.event_id AS e_event_id, e.wait_id AS e_wait_id,
       e.kind AS e_kind, e.payload AS e_payload, e.bind AS e_bind, e.verdict AS e_verdict,
       e.reason AS e_reason, e.detail AS e_detail, e.received_at AS e_received_at,
       e.delivered_by AS e_delivered_by, e.delivered_why AS e_delivered_why
FROM waits w LEFT JOIN events e ON e.run_id = :run_id AND e.event_id = w.event_id
WHERE w.run_id = :run_id AND w.state = 'consumed'
ORDER BY w.closed_at DESC NULLS LAST
LIMIT 1;

-- name: list_waits
SELECT w.*, q.request FROM waits w LEFT JOIN wait_requests q ON q.wait_id = w.wait_id
WHERE (:run_id IS NULL OR w.run_id = :run_id) AND (:state IS NULL OR w.state = :state)
  AND (:tenant IS NULL OR w.run_id IN (SELECT t.run_id FROM run_tenants t
                                       WHERE t.tenant = :tenant))
ORDER BY w.created_at, w.wait_id
LIMIT :limit;

-- name: list_run_waits
-- One run's waits (its page, its takeover, a delivery by webhook): found by
-- the run's index. In list_waits, `run_id IS NULL OR ...` reads every wait.
SELECT w.*, q.request FROM waits w LEFT JOIN wait_requests q ON q.wait_id = w.wait_id
WHERE w.run_id = :run_id AND (:state IS NULL OR w.state = :state)
  AND (:tenant IS NULL OR w.run_id IN (SELECT t.run_id FROM run_tenants t
                                       WHERE t.tenant = :tenant))
ORDER BY w.created_at, w.wait_id
LIMIT :limit;

-- name: close_wait
UPDATE waits SET state = :state, closed_at = :now
WHERE wait_id = :wait_id AND state = 'open';

-- name: suspend
UPDATE runs
SET status = 'waiting', wake_at = :wake_at, lease_owner = NULL, lease_expires_at = NULL,
    updated_at = :now
WHERE run_id = :run_id AND epoch = :epoch AND lease_owner = :worker_id
  AND status = 'running';

-- name: wake
UPDATE runs SET status = 'running', wake_at = NULL, updated_at = :now
WHERE run_id = :run_id AND status = 'waiting';

-- name: count_bad_token
UPDATE waits
SET bad_tokens = bad_tokens + 1, locked_at = CASE WHEN :lock THEN :now ELSE locked_at END
WHERE wait_id = :wait_id;

-- name: unlock_wait
UPDATE waits SET bad_tokens = 0, locked_at = NULL
WHERE wait_id = :wait_id AND state = 'open';

-- name: get_event
SELECT * FROM events WHERE run_id = :run_id AND event_id = :event_id;

-- name: insert_event
-- A redelivered event that was rejected is judged again: its row takes the new verdict.
INSERT INTO events (run_id, event_id, wait_id, kind, payload, bind, verdict, reason,
                    detail, received_at, delivered_by, delivered_why)
VALUES (:run_id, :event_id, :wait_id, :kind, :payload, :bind, :verdict, :reason,
        :detail, :received_at, :delivered_by, :delivered_why)
ON CONFLICT (run_id, event_id) DO UPDATE
SET wait_id = excluded.wait_id, kind = excluded.kind, payload = excluded.payload,
    bind = excluded.bind, verdict = excluded.verdict, reason = excluded.reason,
    detail = excluded.detail, received_at = excluded.received_at,
    delivered_by = excluded.delivered_by, delivered_why = excluded.delivered_why;

-- name: accept_event
-- An accepted event: stored (as insert_event), its wait consumed, its run
-- woken if it was waiting (idle workers are told by the store after the commit
-- when `tell` is set, see `seam.noting_wakes`). Three statements, run in turn (`-- then`):
-- SQLite has no writable CTEs, and on one file a statement is no round trip.
INSERT INTO events (run_id, event_id, wait_id, kind, payload, bind, verdict, reason,
                    detail, received_at, delivered_by, delivered_why)
VALUES (:run_id, :event_id, :wait_id, :kind, :payload, :bind, :verdict, :reason,
        :detail, :received_at, :delivered_by, :delivered_why)
ON CONFLICT (run_id, event_id) DO UPDATE
SET wait_id = excluded.wait_id, kind = excluded.kind, payload = excluded.payload,
    bind = excluded.bind, verdict = excluded.verdict, reason = excluded.reason,
    detail = excluded.detail, received_at = excluded.received_at,
    delivered_by = excluded.delivered_by, delivered_why = excluded.delivered_why;
-- then
UPDATE waits SET state = 'consumed', event_id = :event_id, closed_at = :received_at
WHERE wait_id = :wait_id AND state = 'open';
-- then
UPDATE runs SET status = 'running', wake_at = NULL, updated_at = :received_at
WHERE run_id = :run_id AND status = 'waiting';

-- name: lease_woken
-- A run an accepted event just woke, leased to an idle worker of the
-- delivering process in the delivery's transaction, as a claim leases it.
UPDATE runs
SET epoch = epoch + 1, lease_owner = :worker_id, lease_expires_at =
    COALESCE(:lease_now, (julianday('now') - 2440587.5) * 86400.0) + :lease_seconds,
    updated_at = :now
WHERE run_id = :run_id AND status = 'running' AND lease_owner IS NULL AND queue IS NULL
RETURNING *;

-- name: list_events
SELECT * FROM events WHERE run_id = :run_id ORDER BY received_at, event_id LIMIT :limit;

-- name: read_state
SELECT * FROM task_state WHERE task_key = :task_key;

-- name: upsert_state
INSERT INTO task_state (task_key, version, data, run_id, updated_at)
VALUES (:task_key, :version, :data, :run_id, :now)
ON CONFLICT (task_key) DO UPDATE
SET version = excluded.version, data = excluded.data, run_id = excluded.run_id,
    updated_at = excluded.updated_at;

-- name: insert_state_history
INSERT INTO task_state_history (task_key, version, data, run_id, at)
VALUES (:task_key, :version, :data, :run_id, :now);

-- name: insert_state_change
-- A change made from outside any run: who made it and why (its run_id is empty).
INSERT INTO task_state_history (task_key, version, data, run_id, at, author, why)
VALUES (:task_key, :version, :data, '', :now, :author, :why);

-- name: get_meta
SELECT value FROM stead_meta WHERE key = :key;

-- name: insert_intent
INSERT INTO intents (run_id, version, intent, author, why, at)
VALUES (:run_id, :version, :intent, :author, :why, :at);

-- name: set_intent_version
UPDATE runs SET intent_version = :version WHERE run_id = :run_id;

-- name: latest_intent
SELECT * FROM intents WHERE run_id = :run_id ORDER BY version DESC LIMIT 1;

-- name: list_intents
SELECT * FROM intents WHERE run_id = :run_id ORDER BY version;

-- name: end_stopped
-- A human ends a run stopped for them (a terminal status, with why).
UPDATE runs
SET status = :status, error = :error, epoch = epoch + 1, lease_owner = NULL,
    lease_expires_at = NULL, updated_at = :now
WHERE run_id = :run_id AND status = :expect
RETURNING *;

-- name: set_epoch
-- A fork is created with its journal: epoch 1 says a claim must load it.
UPDATE runs SET epoch = :epoch WHERE run_id = :run_id;

-- name: state_version
SELECT * FROM task_state_history WHERE task_key = :task_key AND version = :version;

-- name: insert_lineage
INSERT INTO lineage (run_id, parent_id, kind, at_seq, created_at)
VALUES (:run_id, :parent_id, :kind, :at_seq, :created_at);

-- name: get_lineage
SELECT * FROM lineage WHERE run_id = :run_id;

-- name: list_descendants
SELECT * FROM lineage WHERE parent_id = :run_id ORDER BY created_at, run_id;

-- name: search_runs
-- The dashboard's runs list: each filter applies when given. :prefix matches
-- the start of a run id, :shown the part of a dated one a screen shows, :pattern a piece of its task id or workflow (LIKE
-- patterns whose wildcards the caller escaped). The page after a cursor (:before_at,
-- :before_id) is the runs strictly older in (created_at, run_id) order.
SELECT runs.*, t.tenant FROM runs LEFT JOIN run_tenants t ON t.run_id = runs.run_id
WHERE (:status IS NULL OR runs.status = :status)
  AND (:workflow IS NULL OR workflow = :workflow)
  AND (:version IS NULL OR version = :version)
  AND (:task_id IS NULL OR task_id = :task_id)
  AND (:queue IS NULL OR runs.queue = :queue)
  AND (:tenant IS NULL OR t.tenant = :tenant)
  AND (:since IS NULL OR runs.created_at >= :since)
  AND (:until IS NULL OR runs.created_at < :until)
  AND (:prefix IS NULL OR runs.run_id LIKE :prefix ESCAPE '\'
       OR runs.run_id LIKE :shown ESCAPE '\'
       OR task_id LIKE :pattern ESCAPE '\' OR workflow LIKE :pattern ESCAPE '\')
  AND (:before_at IS NULL OR runs.created_at < :before_at
       OR (runs.created_at = :before_at AND runs.run_id < :before_id))
ORDER BY runs.created_at DESC, runs.run_id DESC
LIMIT :limit;

-- name: search_runs_of_status
-- search_runs of one status, by the index on (status, created_at): in search_runs,
-- `status IS NULL OR ...` leaves the planner no index but the runs' order.
-- Named, because the planner, told a status has a third of the runs, walks
-- the runs newest first for the LIMIT instead, and reads every run when
-- the status has few or none (the failed ones, at 120,000 runs: 25 ms
-- against 0.02).
SELECT runs.*, t.tenant FROM runs INDEXED BY runs_status LEFT JOIN run_tenants t ON t.run_id = runs.run_id
WHERE runs.status = :status
  AND (:workflow IS NULL OR workflow = :workflow)
  AND (:version IS NULL OR version = :version)
  AND (:task_id IS NULL OR task_id = :task_id)
  AND (:queue IS NULL OR runs.queue = :queue)
  AND (:tenant IS NULL OR t.tenant = :tenant)
  AND (:since IS NULL OR runs.created_at >= :since)
  AND (:until IS NULL OR runs.created_at < :until)
  AND (:prefix IS NULL OR runs.run_id LIKE :prefix ESCAPE '\'
       OR runs.run_id LIKE :shown ESCAPE '\'
       OR task_id LIKE :pattern ESCAPE '\' OR workflow LIKE :pattern ESCAPE '\')
  AND (:before_at IS NULL OR runs.created_at < :before_at
       OR (runs.created_at = :before_at AND runs.run_id < :before_id))
ORDER BY runs.created_at DESC, runs.run_id DESC
LIMIT :limit;

-- name: journal_page
-- A run's records from seq :start on, in seq order: one page of its timeline.
SELECT seq, addr, attempt, kind, name, digest, status, payload, epoch, at, arguments
FROM journal WHERE run_id = :run_id AND seq >= :start ORDER BY seq LIMIT :limit;

-- name: journal_size
SELECT COUNT(*) AS records, COALESCE(MAX(seq), -1) AS last_seq
FROM journal WHERE run_id = :run_id;

-- name: journal_summaries
-- The records a run page sums up over the whole run (its effects, model
-- calls and workspaces), without the rest of a long journal.
SELECT seq, addr, attempt, kind, name, digest, status, payload, epoch, at, arguments
FROM journal WHERE run_id = :run_id AND kind IN ('effect', 'llm', 'workspace') ORDER BY seq;

-- name: journal_model_calls
-- The records a run's conversation is read from: its answered model calls,
-- and its steps, among which those holding an SDK's model calls.
SELECT seq, addr, attempt, kind, name, digest, status, payload, epoch, at, arguments
FROM journal WHERE run_id = :run_id AND kind IN ('llm', 'step') AND status = 'ok' ORDER BY seq;

-- name: count_runs_by_status
SELECT status, COUNT(*) AS runs FROM runs GROUP BY status;

-- name: count_tenant_runs_by_status
-- One tenant's runs in each status (run_tenants keeps each run's status).
SELECT status, COUNT(*) AS runs FROM run_tenants WHERE tenant = :tenant GROUP BY status;

-- name: state_since
-- A task's versions written after :version, oldest first: what changed the
-- world since a run last saw it, and who.
SELECT * FROM task_state_history WHERE task_key = :task_key AND version > :version
ORDER BY version LIMIT :limit;

-- name: list_state_history
-- A task's facts, newest version first.
SELECT * FROM task_state_history WHERE task_key = :task_key
ORDER BY version DESC LIMIT :limit;

-- name: insert_operator_action
-- Twice is once: the id is the caller's.
INSERT INTO operator_actions (action_id, run_id, action, target, author, why, outcome,
                              detail, at)
VALUES (:action_id, :run_id, :action, :target, :author, :why, :outcome, :detail, :at)
ON CONFLICT (action_id) DO NOTHING;

-- name: list_operator_actions
SELECT * FROM operator_actions WHERE run_id = :run_id ORDER BY at, action_id LIMIT :limit;

-- name: heartbeat
-- A worker says it is alive and serves `code` (as `role`).
-- `stead_version` and `schema_version` say which release its code is.
INSERT INTO worker_hosts (worker_id, code, role, started_at, seen_at, policy_version,
                          live_until, stead_version, schema_version)
VALUES (:worker_id, :code, :role, :now, :now, :policy_version,
        :live_until, :stead_version, :schema_version)
ON CONFLICT (worker_id, code, role) DO UPDATE
SET seen_at = excluded.seen_at, stopped_at = NULL, policy_version = excluded.policy_version,
    live_until = excluded.live_until, stead_version = excluded.stead_version,
    schema_version = excluded.schema_version;

-- name: live_policies
-- The policy versions (NULL: none) the live workers serving `code` run: not
-- stopped, and heard from recently enough that they count as alive.
SELECT DISTINCT policy_version FROM worker_hosts
WHERE code = :code AND stopped_at IS NULL AND live_until > :now;

-- name: host_stopped
-- A worker stopped cleanly: it serves nothing from now on.
UPDATE worker_hosts SET seen_at = :now, stopped_at = :now WHERE worker_id = :worker_id;

-- name: worker_hosts
-- Every worker's last heartbeat per version it serves, the latest first.
SELECT * FROM worker_hosts ORDER BY seen_at DESC, worker_id, code LIMIT :limit;

-- name: forget_hosts
-- Heartbeats older than :before are history, not news: dropped.
DELETE FROM worker_hosts WHERE seen_at < :before;

-- name: stranded_runs
-- Runnable runs no worker has served (hosted or migrated) since :since, and
-- that have waited for one at least as long; `hosted_at` is the last time one did.
-- The workflow filter comes before the LIMIT: a filtered page is never short.
SELECT runs.*, h.seen_at AS hosted_at FROM runs
LEFT JOIN (SELECT code, MAX(seen_at) AS seen_at FROM worker_hosts GROUP BY code) AS h
  ON h.code = runs.workflow || '@' || runs.version
WHERE (runs.status = 'pending'
       OR (runs.status = 'running' AND (runs.lease_expires_at IS NULL OR runs.lease_expires_at <=
           COALESCE(:lease_now, (julianday('now') - 2440587.5) * 86400.0)))
       OR (runs.status = 'waiting' AND runs.wake_at <= :now))
  AND (h.seen_at IS NULL OR h.seen_at <= :since)
  AND runs.updated_at <= :since
  AND (:workflow IS NULL OR runs.workflow = :workflow)
ORDER BY runs.created_at
LIMIT :limit;

-- name: list_migrations
SELECT * FROM migrations WHERE run_id = :run_id ORDER BY number;

-- name: insert_migration
INSERT INTO migrations (run_id, number, from_version, to_version, old_input, new_input,
                        records_before, records_after, author, at, epoch)
VALUES (:run_id, :number, :from_version, :to_version, :old_input, :new_input,
        :records_before, :records_after, :author, :at, :epoch);

-- name: archive_journal
INSERT INTO journal_archive (run_id, migration, seq, addr, attempt, kind, name, digest,
                             status, payload, epoch, at, arguments)
SELECT run_id, :migration, seq, addr, attempt, kind, name, digest, status, payload, epoch, at,
       arguments
FROM journal WHERE run_id = :run_id;

-- name: delete_journal
-- Only ever after archive_journal (a migration) or of a migrated journal (a
-- rollback, which puts the archived one back).
DELETE FROM journal WHERE run_id = :run_id;

-- name: restore_journal
INSERT INTO journal (run_id, seq, addr, attempt, kind, name, digest, status, payload,
                     epoch, at, arguments)
SELECT run_id, seq, addr, attempt, kind, name, digest, status, payload, epoch, at,
       arguments
FROM journal_archive WHERE run_id = :run_id AND migration = :migration;

-- name: set_code
-- The run goes on under another version and input (a migration or its rollback):
-- a new epoch fences out any former holder; a run stopped as incompatible
-- becomes claimable.
UPDATE runs
SET version = :version, input = :input, epoch = epoch + 1, lease_owner = NULL,
    lease_expires_at = NULL, error = CASE WHEN status = 'incompatible_checkpoint'
                                          THEN NULL ELSE error END,
    status = CASE WHEN status = 'incompatible_checkpoint' THEN 'running' ELSE status END,
    updated_at = :now
WHERE run_id = :run_id
RETURNING *;

-- name: set_code_fenced
-- The holder migrates the run it claimed: it keeps its lease and epoch.
UPDATE runs SET version = :version, input = :input, updated_at = :now
WHERE run_id = :run_id AND epoch = :epoch AND lease_owner = :worker_id
  AND status = 'running'
RETURNING *;

-- name: mark_rolled_back
UPDATE migrations SET rolled_back_at = :now, rolled_back_by = :author
WHERE run_id = :run_id AND number = :number;

-- name: import_run
INSERT INTO runs (run_id, workflow, version, task_id, status, input, result, error, epoch,
                  created_at, updated_at, wake_at)
VALUES (:run_id, :workflow, :version, :task_id, :status, :input, :result, :error, :epoch,
        :created_at, :updated_at, :wake_at)
ON CONFLICT DO NOTHING
RETURNING *;

-- name: import_wait
INSERT INTO waits (wait_id, run_id, addr, kind, bind, schema, token_hash, task_key,
                   expires_at, state, event_id, created_at, closed_at)
VALUES (:wait_id, :run_id, :addr, :kind, :bind, :schema, :token_hash, :task_key,
        :expires_at, :state, :event_id, :created_at, :closed_at);

-- name: load_archive
-- A run's journal as it was before migration :migration.
SELECT seq, addr, attempt, kind, name, digest, status, payload, epoch, at, arguments
FROM journal_archive WHERE run_id = :run_id AND migration = :migration ORDER BY seq;

-- name: blobs_present
SELECT sha256 FROM workspace_blobs WHERE sha256 IN (SELECT value FROM json_each(:hashes));

-- name: insert_blob
INSERT INTO workspace_blobs (sha256, size, data) VALUES (:sha256, :size, :data)
ON CONFLICT (sha256) DO NOTHING;

-- name: get_blobs
SELECT sha256, data FROM workspace_blobs
WHERE sha256 IN (SELECT value FROM json_each(:hashes));

-- name: insert_snapshot
INSERT INTO workspace_snapshots (run_id, name, seq, epoch, worker_id, tree, manifest, git,
                                 files, bytes, stored_bytes, blobs, source, at)
VALUES (:run_id, :name, :seq, :epoch, :worker_id, :tree, :manifest, :git, :files, :bytes,
        :stored_bytes, :blobs, :source, :at);

-- name: list_snapshots
SELECT * FROM workspace_snapshots WHERE run_id = :run_id ORDER BY seq;

-- name: get_snapshot
SELECT * FROM workspace_snapshots WHERE run_id = :run_id AND seq = :seq;

-- name: set_run_links
-- A child run's parent and a run's deadline (schema 13), set as it is created.
UPDATE runs SET parent_id = :parent_id, deadline = :deadline WHERE run_id = :run_id;

-- name: children
-- Every run `run.child` started from this one, live or ended, oldest first.
SELECT * FROM runs WHERE parent_id = :run_id ORDER BY created_at, run_id LIMIT :limit;

-- name: live_children
SELECT * FROM runs
WHERE parent_id = :run_id
  AND status NOT IN ('completed', 'failed', 'cancelled', 'revalidation_failed')
ORDER BY created_at, run_id;

-- name: request_cancel
-- The holder ends the run as cancelled at its next call boundary.
UPDATE runs SET cancel_requested = :now
WHERE run_id = :run_id AND status = 'running' AND cancel_requested IS NULL;

-- name: cancel_requests
-- Of these runs, those someone asked to cancel.
SELECT run_id FROM runs
WHERE run_id IN (SELECT value FROM json_each(:run_ids))
  AND status = 'running' AND cancel_requested IS NOT NULL;

-- name: get_schedule
SELECT * FROM schedules WHERE name = :name;

-- name: insert_schedule
INSERT INTO schedules (name, cron, next_tick, updated_at)
VALUES (:name, :cron, :next_tick, :now)
ON CONFLICT DO NOTHING;

-- name: advance_schedule
-- Compare-and-set: only the transaction that read :expect moves it.
UPDATE schedules SET cron = :cron, next_tick = :next_tick, updated_at = :now
WHERE name = :name AND next_tick = :expect;

-- name: list_schedules
SELECT * FROM schedules ORDER BY name;

-- name: prunable_runs
-- Finished runs last changed before :cutoff (of :run_ids, if given), oldest
-- first: never a live run, never one whose parent is live (it has still to
-- read the result), never one with an effect whose outcome is unknown (its
-- last phase intent, accepted or unknown, with no outcome after it).
SELECT run_id FROM runs
WHERE status IN ('completed', 'failed', 'cancelled', 'revalidation_failed')
  AND updated_at < :cutoff
  AND (:run_ids IS NULL OR run_id IN (SELECT value FROM json_each(:run_ids)))
  AND (parent_id IS NULL OR NOT EXISTS (
        SELECT 1 FROM runs AS p WHERE p.run_id = runs.parent_id
          AND p.status NOT IN ('completed', 'failed', 'cancelled', 'revalidation_failed')))
  AND NOT EXISTS (
        SELECT 1 FROM journal AS j
        WHERE j.run_id = runs.run_id AND j.kind = 'effect'
          AND j.status IN ('intent', 'accepted', 'unknown')
          AND NOT EXISTS (
                SELECT 1 FROM journal AS k
                WHERE k.run_id = j.run_id AND k.addr = j.addr AND k.kind = 'effect'
                  AND k.seq > j.seq AND k.status IN ('ok', 'error', 'reconciled')))
ORDER BY updated_at, run_id
LIMIT :limit;

-- name: prunable_runs_of
-- prunable_runs of the :run_ids given, found by their key: in prunable_runs,
-- `run_ids IS NULL OR ...` leaves the planner nothing but a scan of the
-- runs, made again by each batch a prune deletes, under its write lock.
SELECT run_id FROM runs
WHERE status IN ('completed', 'failed', 'cancelled', 'revalidation_failed')
  AND updated_at < :cutoff
  AND run_id IN (SELECT value FROM json_each(:run_ids))
  AND (parent_id IS NULL OR NOT EXISTS (
        SELECT 1 FROM runs AS p WHERE p.run_id = runs.parent_id
          AND p.status NOT IN ('completed', 'failed', 'cancelled', 'revalidation_failed')))
  AND NOT EXISTS (
        SELECT 1 FROM journal AS j
        WHERE j.run_id = runs.run_id AND j.kind = 'effect'
          AND j.status IN ('intent', 'accepted', 'unknown')
          AND NOT EXISTS (
                SELECT 1 FROM journal AS k
                WHERE k.run_id = j.run_id AND k.addr = j.addr AND k.kind = 'effect'
                  AND k.seq > j.seq AND k.status IN ('ok', 'error', 'reconciled')))
ORDER BY updated_at, run_id
LIMIT :limit;

-- name: delete_journals
DELETE FROM journal WHERE run_id IN (SELECT value FROM json_each(:run_ids));

-- name: delete_resumes
DELETE FROM resumes WHERE run_id IN (SELECT value FROM json_each(:run_ids));

-- name: delete_wait_requests
DELETE FROM wait_requests WHERE wait_id IN (
    SELECT wait_id FROM waits WHERE run_id IN (SELECT value FROM json_each(:run_ids)));

-- name: delete_waits
DELETE FROM waits WHERE run_id IN (SELECT value FROM json_each(:run_ids));

-- name: delete_events
DELETE FROM events WHERE run_id IN (SELECT value FROM json_each(:run_ids));

-- name: delete_intents
DELETE FROM intents WHERE run_id IN (SELECT value FROM json_each(:run_ids));

-- name: delete_runs
DELETE FROM runs WHERE run_id IN (SELECT value FROM json_each(:run_ids));

-- name: child_status
-- A child's status as a parent suspends (the file's one writer orders it
-- against the child's end).
SELECT status FROM runs WHERE run_id = :run_id;

-- name: delete_migrations
DELETE FROM migrations WHERE run_id IN (SELECT value FROM json_each(:run_ids));

-- name: delete_journal_archive
DELETE FROM journal_archive WHERE run_id IN (SELECT value FROM json_each(:run_ids));

-- name: delete_lineage
-- A pruned run's links go with it, also those to a fork of it that lives on.
DELETE FROM lineage
WHERE run_id IN (SELECT value FROM json_each(:run_ids)) OR parent_id IN (SELECT value FROM json_each(:run_ids));

-- name: delete_snapshots
-- The snapshots' blobs stay: other snapshots may share them.
DELETE FROM workspace_snapshots WHERE run_id IN (SELECT value FROM json_each(:run_ids));

-- name: delete_operator_actions
DELETE FROM operator_actions WHERE run_id IN (SELECT value FROM json_each(:run_ids));

-- name: find_live_dedup
SELECT * FROM runs
WHERE queue = :queue AND dedup_key = :dedup_key
  AND status NOT IN ('completed', 'failed', 'cancelled', 'revalidation_failed');

-- name: insert_runs
-- A batch of new runs, :runs a JSON array of objects. A run that conflicts (a
-- live run owns its task id or its queue's dedup key, also one earlier in the
-- batch) is neither inserted nor returned: the flow then reads the one that won.
INSERT INTO runs (run_id, workflow, version, task_id, status, input, epoch,
                  created_at, updated_at, queue, priority, dedup_key)
SELECT json_extract(value, '$.run_id'), json_extract(value, '$.workflow'),
       json_extract(value, '$.version'), json_extract(value, '$.task_id'), 'pending',
       json_extract(value, '$.input'), 0, json_extract(value, '$.created_at'),
       json_extract(value, '$.created_at'), json_extract(value, '$.queue'),
       json_extract(value, '$.priority'), json_extract(value, '$.dedup_key')
FROM json_each(:runs) WHERE true  -- "WHERE true": the upsert clause parses after a FROM
ON CONFLICT DO NOTHING
RETURNING *;

-- name: lock_queue
-- Nothing here: SQLite's single writer already runs one claim at a time.

-- name: ready_queues
-- Which of the queues named (:queues, a JSON array) have a run a claim
-- could take: not leased, of hosted code, not excluded, runnable or a due
-- sleeper (read before taking the write lock, as claim_candidates is).
SELECT q.value AS queue FROM json_each(:queues) AS q
WHERE EXISTS (
    SELECT 1 FROM runs
    WHERE queue = q.value AND status IN ('pending', 'running')
      AND (lease_expires_at IS NULL OR lease_expires_at <=
          COALESCE(:lease_now, (julianday('now') - 2440587.5) * 86400.0))
      AND (workflow || '@' || version) IN (SELECT value FROM json_each(:hosted))
      AND run_id NOT IN (SELECT value FROM json_each(:exclude))
) OR EXISTS (
    SELECT 1 FROM runs
    WHERE queue = q.value AND status = 'waiting' AND wake_at <= :now
      AND (workflow || '@' || version) IN (SELECT value FROM json_each(:hosted))
      AND run_id NOT IN (SELECT value FROM json_each(:exclude))
);

-- name: queue_load
-- What a queue's limits are measured against: its runs leased now (all, and
-- this worker's), and its runs first claimed since :since (its rate window).
SELECT
    (SELECT count(*) FROM runs
     WHERE queue = :queue AND lease_owner IS NOT NULL AND lease_expires_at >
         COALESCE(:lease_now, (julianday('now') - 2440587.5) * 86400.0)
       AND status = 'running') AS active,
    (SELECT count(*) FROM runs
     WHERE queue = :queue AND lease_owner = :worker_id AND lease_expires_at >
         COALESCE(:lease_now, (julianday('now') - 2440587.5) * 86400.0)
       AND status = 'running') AS mine,
    (SELECT count(*) FROM runs
     WHERE queue = :queue AND started_at IS NOT NULL AND started_at > :since) AS recent;

-- name: claim_queue
-- Lease up to :limit runs of the queue (the room its limits leave), lowest
-- priority number first, then oldest; due sleepers of the queue come from
-- runs_queue_waking. A run's first claim sets started_at, which the rate counts.
UPDATE runs
SET epoch = epoch + 1, lease_owner = :worker_id, lease_expires_at =
    COALESCE(:lease_now, (julianday('now') - 2440587.5) * 86400.0) + :lease_seconds,
    status = 'running', wake_at = NULL, updated_at = :now,
    started_at = COALESCE(started_at, :now)
WHERE run_id IN (
    SELECT run_id FROM (
        SELECT * FROM (
            SELECT run_id, priority, created_at FROM runs
            WHERE queue = :queue AND status IN ('pending', 'running')
              AND (lease_expires_at IS NULL OR lease_expires_at <=
                  COALESCE(:lease_now, (julianday('now') - 2440587.5) * 86400.0))
              AND (workflow || '@' || version) IN (SELECT value FROM json_each(:hosted))
              AND run_id NOT IN (SELECT value FROM json_each(:exclude))
            ORDER BY priority, created_at LIMIT :limit)
        UNION ALL
        SELECT * FROM (
            SELECT run_id, priority, created_at FROM runs
            WHERE queue = :queue AND status = 'waiting' AND wake_at <= :now
              AND (workflow || '@' || version) IN (SELECT value FROM json_each(:hosted))
              AND run_id NOT IN (SELECT value FROM json_each(:exclude))
            ORDER BY wake_at LIMIT :limit)
    )
    ORDER BY priority, created_at LIMIT :limit
)
RETURNING *;

-- name: lease_now
-- The time leases are judged at (see the top of this file).
SELECT COALESCE(:lease_now, (julianday('now') - 2440587.5) * 86400.0) AS now;

-- name: claimed_by
-- The runs leased to this worker by one claim (its time, updated_at, is its own).
-- SQLite never needs it as a read-back (a local commit returns or raises).
SELECT * FROM runs
WHERE lease_owner = :worker_id AND updated_at = :now AND status = 'running'
  AND run_id NOT IN (SELECT value FROM json_each(:exclude))
ORDER BY created_at;

-- == rejected events: how many are kept (store/_rejections.py) ==
-- name: trim_rejected
-- The run's rejected events past its newest `keep` (accepted ones are never touched).
DELETE FROM events
WHERE run_id = :run_id AND event_id IN (
    SELECT event_id FROM events WHERE run_id = :run_id AND verdict = 'rejected'
    ORDER BY received_at DESC, event_id DESC LIMIT -1 OFFSET :keep);

-- name: lock_rejected_unknown
-- Nothing here: SQLite's single writer already trims one delivery at a time.

-- name: trim_rejected_unknown
-- Events to runs that do not exist past the newest 1000 of them all
-- (`_rejections.UNKNOWN_RUNS`, written here as PostgreSQL's is).
DELETE FROM events
WHERE (run_id, event_id) IN (
    SELECT run_id, event_id FROM events WHERE reason = 'unknown_run'
    ORDER BY received_at DESC, run_id DESC, event_id DESC LIMIT -1 OFFSET 1000);

-- name: tally_rejected
INSERT INTO rejected_tally (run_id, dropped, last_at) VALUES (:run_id, :dropped, :now)
ON CONFLICT (run_id) DO UPDATE
SET dropped = rejected_tally.dropped + excluded.dropped, last_at = excluded.last_at;

-- name: get_rejected_tally
SELECT dropped FROM rejected_tally WHERE run_id = :run_id;

-- name: prune_rejected
-- Up to `limit` rejected events received before `cutoff`, of any run.
DELETE FROM events
WHERE (run_id, event_id) IN (
    SELECT run_id, event_id FROM events WHERE verdict = 'rejected' AND received_at < :cutoff
    LIMIT :limit);

-- name: count_old_rejected
SELECT COUNT(*) AS n FROM events WHERE verdict = 'rejected' AND received_at < :cutoff;

-- name: prune_rejected_tally
DELETE FROM rejected_tally WHERE last_at < :cutoff;

-- name: delete_rejected_tally
DELETE FROM rejected_tally WHERE run_id IN (SELECT value FROM json_each(:run_ids));

-- durable streams (see store/_streams.py) ------------------------------------
-- name: append_stream_entry
-- The common append in one statement: only while the fence holds, not after
-- the stream's closed entry, not twice with one key. No row: one of those
-- (the flow then finds out which).
INSERT INTO stream_entries (run_id, name, pos, entry_key, kind, value, call_addr, call_try,
                            epoch, at)
SELECT :run_id, :name,
       COALESCE((SELECT max(pos) FROM stream_entries
                 WHERE run_id = :run_id AND name = :name), 0) + 1,
       :entry_key, :kind, :value, :call_addr, :call_try, :epoch, :at
WHERE EXISTS (SELECT 1 FROM runs WHERE run_id = :run_id AND epoch = :epoch
              AND lease_owner = :worker_id AND status = 'running')
  AND COALESCE((SELECT kind FROM stream_entries WHERE run_id = :run_id AND name = :name
                ORDER BY pos DESC LIMIT 1), '') <> 'closed'
  AND NOT EXISTS (SELECT 1 FROM stream_entries
                  WHERE run_id = :run_id AND name = :name AND entry_key = :entry_key)
RETURNING pos;

-- name: stream_entry_by_key
SELECT pos FROM stream_entries
WHERE run_id = :run_id AND name = :name AND entry_key = :entry_key;

-- name: last_stream_entry
SELECT pos, kind FROM stream_entries
WHERE run_id = :run_id AND name = :name
ORDER BY pos DESC LIMIT 1;

-- name: supersede_stream_call
-- The entries of a call's earlier tries, not yet superseded, marked so.
UPDATE stream_entries SET superseded = 1
WHERE run_id = :run_id AND name = :name AND call_addr = :call_addr
  AND call_try <> :call_try AND superseded = 0
RETURNING pos;

-- name: insert_stream_entry
INSERT INTO stream_entries (run_id, name, pos, entry_key, kind, value, call_addr, call_try,
                            epoch, at)
VALUES (:run_id, :name, :pos, :entry_key, :kind, :value,
        :call_addr, :call_try, :epoch, :at);

-- name: read_stream
SELECT run_id, name, pos, kind, value, superseded, at FROM stream_entries
WHERE run_id = :run_id AND name = :name AND pos > :after
ORDER BY pos LIMIT :limit;

-- name: delete_streams
DELETE FROM stream_entries WHERE run_id IN (SELECT value FROM json_each(:run_ids));

-- name: delete_payload_keys
DELETE FROM payload_keys WHERE scope IN (SELECT value FROM json_each(:run_ids));

-- == dead lease holders: leases whose holder is surely gone (store/_holders.py) ==
-- name: record_process
INSERT INTO worker_processes (worker_id, machine, pid, started, at)
VALUES (:worker_id, :machine, :pid, :started, :now)
ON CONFLICT (worker_id) DO UPDATE
SET machine = excluded.machine, pid = excluded.pid, started = excluded.started, at = excluded.at,
    locks = FALSE;

-- name: present
-- SQLite has no presence locks (see the PostgreSQL query): never asked.

-- name: forget_process
DELETE FROM worker_processes WHERE worker_id = :worker_id;

-- name: lease_holders
-- The processes of the other workers that hold leases not ended yet (from
-- the few process rows, each looked up among the running runs, runs_status);
-- lock_free: SQLite has no presence locks (see the PostgreSQL query).
SELECT p.worker_id, p.machine, p.pid, p.started, p.presence_taken, 0 AS lock_free
FROM worker_processes AS p
WHERE p.worker_id <> :worker_id AND EXISTS (
    SELECT 1 FROM runs
    WHERE runs.lease_owner = p.worker_id AND runs.status = 'running'
      AND runs.lease_expires_at > COALESCE(:lease_now, (julianday('now') - 2440587.5) * 86400.0))
LIMIT :limit;

-- name: worker_liveness
-- Every recorded worker process, for `Store.worker_liveness` (doctor): judged
-- as lease_holders' are; SQLite has no presence locks. Then the workers whose
-- heartbeats say they did not stop cleanly but whose process is not recorded
-- (machine NULL): end_leases_of_gone forgets the process of a holder gone.
SELECT worker_id, machine, pid, started, presence_taken, 0 AS locks, 0 AS lock_free
FROM worker_processes
UNION ALL
SELECT h.worker_id, NULL, NULL, NULL, 0, 0, 0 FROM (
    SELECT DISTINCT worker_id FROM worker_hosts WHERE stopped_at IS NULL) AS h
WHERE NOT EXISTS (SELECT 1 FROM worker_processes AS p WHERE p.worker_id = h.worker_id)
ORDER BY 1;

-- name: forget_gone_processes
-- Process rows of workers whose heartbeats were forgotten (forget_hosts) are
-- history too. Only rows recorded before :before (a day ago): a worker records
-- its process just before its first heartbeat, and must not lose it meanwhile.
DELETE FROM worker_processes
WHERE at < :before AND worker_id NOT IN (SELECT worker_id FROM worker_hosts);

-- name: end_leases_of_gone
-- The holder's process has ended (told on its machine): its leases end now,
-- so the next claim takes its runs (the epoch the claim bumps fences anything
-- it might have left to write). Only if its process row is still the one
-- judged: a worker that recorded another process since is another life.
UPDATE runs SET lease_expires_at = COALESCE(:lease_now, (julianday('now') - 2440587.5) * 86400.0)
WHERE status = 'running' AND lease_owner = :worker_id
  AND lease_expires_at > COALESCE(:lease_now, (julianday('now') - 2440587.5) * 86400.0)
  AND EXISTS (
    SELECT 1 FROM worker_processes AS p
    WHERE p.worker_id = :worker_id AND p.machine = :machine AND p.pid = :pid
      AND p.started = :started);

-- name: end_leases_of_absent
-- SQLite has no presence locks (see the PostgreSQL query): never asked.

-- name: gauge_live_runs
-- Live runs by workflow@version and status, with the oldest update of each
-- (read off runs_status: the terminal runs, which only grow, are not read).
SELECT workflow, version, status, COUNT(*) AS runs, MIN(updated_at) AS oldest
FROM runs
WHERE status IN ('pending', 'running', 'waiting', 'incompatible_checkpoint',
                 'outcome_unknown', 'paused')
GROUP BY workflow, version, status;

-- name: gauge_queues
-- Runs claimable now, by queue ('' for none), and since when the longest
-- waiting of them has been ready: a pending run since it was last changed, a
-- run whose lease ran out since then, a due sleeper since its wake time.
SELECT COALESCE(queue, '') AS queue, COUNT(*) AS runnable,
       MIN(CASE WHEN status = 'waiting' THEN wake_at
                WHEN status = 'running' THEN COALESCE(lease_expires_at, updated_at)
                ELSE updated_at END) AS ready_since
FROM runs
WHERE status = 'pending'
   OR (status = 'running' AND (lease_expires_at IS NULL OR lease_expires_at <= COALESCE(:lease_now, (julianday('now') - 2440587.5) * 86400.0)))
   OR (status = 'waiting' AND wake_at <= :now)
GROUP BY COALESCE(queue, '');

-- name: gauge_waits
-- Open waits, and those of them that expire before the given time (off waits_open).
SELECT COUNT(*) AS open_waits,
       COALESCE(SUM(CASE WHEN expires_at <= :soon THEN 1 ELSE 0 END), 0) AS expiring
FROM waits WHERE state = 'open';

-- name: count_resumes_since
-- Takeovers recorded since :since (`stead status`; a scan of resumes, one row a takeover).
SELECT COUNT(*) AS takeovers FROM resumes WHERE at >= :since;

-- name: put_meta
INSERT INTO stead_meta (key, value) VALUES (:key, :value)
ON CONFLICT (key) DO UPDATE SET value = excluded.value;

-- name: delete_meta
DELETE FROM stead_meta WHERE key = :key;

-- == the requests model calls sent (0034; store/transactions/conversations.py) ==
-- name: insert_conversation_part
INSERT INTO conversation_parts (run_id, name, parent, body)
VALUES (:run_id, :name, :parent, :body)
ON CONFLICT (run_id, name) DO NOTHING;

-- name: conversation_parts
SELECT name, parent, body FROM conversation_parts WHERE run_id = :run_id;

-- name: delete_conversation_parts
DELETE FROM conversation_parts WHERE run_id IN (SELECT value FROM json_each(:run_ids));

-- Payload data keys (see stead.payloads and store/_sealing.py).
-- name: get_payload_key
SELECT scope, key_id, wrapped, forgotten_at FROM payload_keys WHERE scope = :scope;

-- name: insert_payload_key
INSERT INTO payload_keys (scope, key_id, wrapped, created_at)
VALUES (:scope, :key_id, :wrapped, (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (scope) DO NOTHING;

-- Forgetting a task (`stead tasks forget`, see store/base/payloads.py): its
-- runs' payloads overwritten with a marker everywhere they are kept, its live runs
-- ended (a new epoch: their holder's next write is refused), its task state
-- emptied (its history kept, overwritten), and its data keys destroyed.
-- name: task_runs
-- The task's runs and every run that came from one: its forks and
-- continuations (lineage) and its children, and theirs, at any depth.
WITH RECURSIVE edges (child, parent) AS (
    SELECT run_id, parent_id FROM lineage
    UNION ALL
    SELECT run_id, parent_id FROM runs WHERE parent_id IS NOT NULL
), family (run_id) AS (
    SELECT run_id FROM runs WHERE task_id = :task_id
    UNION
    SELECT e.child FROM edges e JOIN family f ON e.parent = f.run_id
)
SELECT r.run_id, r.status, r.task_id FROM runs r JOIN family f ON f.run_id = r.run_id
ORDER BY r.created_at;

-- name: forget_end_runs
UPDATE runs SET status = 'failed', error = :error, lease_owner = NULL,
       lease_expires_at = NULL, wake_at = NULL, epoch = epoch + 1, updated_at = :now
WHERE run_id IN (SELECT value FROM json_each(:run_ids)) AND status NOT IN ('completed', 'failed', 'cancelled', 'revalidation_failed');

-- name: forget_runs
UPDATE runs SET input = :marker,
       result = CASE WHEN result IS NULL THEN NULL ELSE :marker END,
       error = CASE WHEN error IS NULL THEN NULL ELSE :error END
WHERE run_id IN (SELECT value FROM json_each(:run_ids));

-- name: forget_journal
UPDATE journal SET payload = :marker WHERE run_id IN (SELECT value FROM json_each(:run_ids));

-- name: forget_archive
UPDATE journal_archive SET payload = :marker WHERE run_id IN (SELECT value FROM json_each(:run_ids));

-- name: forget_events
UPDATE events SET payload = :marker, detail = CASE WHEN detail IS NULL THEN NULL ELSE :marker END
WHERE run_id IN (SELECT value FROM json_each(:run_ids));

-- name: forget_actions
UPDATE operator_actions SET detail = :marker WHERE run_id IN (SELECT value FROM json_each(:run_ids));

-- name: forget_streams
UPDATE stream_entries SET value = :marker WHERE run_id IN (SELECT value FROM json_each(:run_ids));

-- name: forget_intents
UPDATE intents SET intent = :marker WHERE run_id IN (SELECT value FROM json_each(:run_ids));

-- name: forget_migrations
UPDATE migrations SET old_input = :marker, new_input = :marker WHERE run_id IN (SELECT value FROM json_each(:run_ids));

-- name: forget_requests
UPDATE wait_requests SET request = :marker
WHERE wait_id IN (SELECT wait_id FROM waits WHERE run_id IN (SELECT value FROM json_each(:run_ids)));

-- The state in force knows nothing any more; its version stays, so the
-- task's next change goes on from it.
-- name: forget_state
UPDATE task_state SET data = '{}' WHERE task_key = :task_key;

-- name: forget_state_history
UPDATE task_state_history SET data = :marker WHERE task_key = :task_key;

-- name: forget_key
INSERT INTO payload_keys (scope, key_id, wrapped, created_at, task_id, forgotten_at,
                          forgotten_by, forgotten_why)
VALUES (:scope, NULL, NULL, :now, :task_id, :now, :by, :why)
ON CONFLICT (scope) DO UPDATE SET key_id = NULL, wrapped = NULL, task_id = excluded.task_id,
    forgotten_at = excluded.forgotten_at, forgotten_by = excluded.forgotten_by,
    forgotten_why = excluded.forgotten_why;

-- A task state's key goes: its history is overwritten, and the task may
-- come back (a new run of the same task id) with a new key.
-- name: drop_payload_key
DELETE FROM payload_keys WHERE scope = :scope;

-- name: forgotten_run
SELECT scope, task_id, forgotten_at, forgotten_by, forgotten_why FROM payload_keys
WHERE scope = :scope AND forgotten_at IS NOT NULL;

-- Rewrapping data keys under the newest key (`stead keys reencrypt`): a
-- batch of keys wrapped by another and made by the time the pass began
-- (those made during it by writers still wrapping with an older key are left
-- to the next pass, so that a pass ends whatever they do), then each
-- rewrapped only if it was not changed meanwhile. The pass's start is read
-- with lease_now (no fake lease clock): the clock that stamps created_at.
-- name: keys_to_rewrap
SELECT scope, key_id, wrapped FROM payload_keys
WHERE key_id IS NOT NULL AND key_id <> :newest AND scope > :after
  AND created_at <= :until
ORDER BY scope LIMIT :limit;

-- name: rewrap_key
UPDATE payload_keys SET key_id = :key_id, wrapped = :wrapped
WHERE scope = :scope AND key_id = :old_key_id AND wrapped = :old_wrapped;

-- name: payload_key_counts
SELECT key_id, count(*) AS n FROM payload_keys GROUP BY key_id ORDER BY key_id;

-- name: revoke_stream_token
-- A token (or, as 'run:<id>', every token of a run issued until now) is
-- refused from now on; revoking again moves the time forward.
INSERT INTO stream_token_revocations (revoked, revoked_at, expires_at)
    VALUES (:revoked, :now, :expires_at)
    ON CONFLICT (revoked) DO UPDATE SET revoked_at = excluded.revoked_at,
        expires_at = max(stream_token_revocations.expires_at, excluded.expires_at);

-- name: forget_stream_revocations
DELETE FROM stream_token_revocations WHERE expires_at < :now;

-- name: stream_token_revoked
SELECT 1 AS revoked FROM stream_token_revocations
WHERE revoked = :token_id OR (revoked = :run_key AND revoked_at >= :issued_at)
LIMIT 1;

-- name: set_run_tenant
-- The tenant of a run just inserted (its insert's trigger made the row, saying none).
UPDATE run_tenants SET tenant = :tenant WHERE run_id = :run_id;

-- name: inherit_tenant
-- A run just inserted serves the tenant of the run it came from (a child's
-- parent, a fork's, a successor's predecessor).
UPDATE run_tenants
SET tenant = COALESCE((SELECT p.tenant FROM run_tenants p WHERE p.run_id = :from_id), '')
WHERE run_id = :run_id;

-- name: set_run_tenants
-- The tenants of a batch just inserted, runs a JSON array of {run_id, tenant}.
UPDATE run_tenants SET tenant = j.tenant
FROM (SELECT json_extract(value, '$.run_id') AS run_id, json_extract(value, '$.tenant') AS tenant
      FROM json_each(:runs)) AS j
WHERE run_tenants.run_id = j.run_id;

-- name: ready_tenants
-- The tenants with runs a claim could take (runnable, or asleep until a
-- time), at most :most, by a skip scan of run_tenants_live: one index probe
-- per tenant, however many runs each has.
WITH RECURSIVE t (tenant) AS (
    SELECT MIN(tenant) FROM run_tenants
    WHERE status IN ('pending', 'running') OR (status = 'waiting' AND wake_at IS NOT NULL)
    UNION ALL
    SELECT (SELECT MIN(r.tenant) FROM run_tenants AS r
            WHERE (r.status IN ('pending', 'running')
                   OR (r.status = 'waiting' AND r.wake_at IS NOT NULL))
              AND r.tenant > t.tenant)
    FROM t WHERE t.tenant IS NOT NULL
)
SELECT tenant FROM t WHERE tenant IS NOT NULL LIMIT :most;

-- name: lock_tenants
-- Nothing here: SQLite's single writer already runs one claim at a time.

-- name: tenant_loads
-- For each tenant with runs a claim could take (the skip scan of
-- ready_tenants, at most :most): its runs leased now (active), whether it has
-- one a claim of this worker could take (ready: runnable outside a queue, or
-- due), and its runs first claimed after its since (recent; 0 without one):
-- the tenants in :named (a JSON array) take theirs from :sinces (a JSON
-- object), the others :since. Each is a bounded read of run_tenants' indexes
-- for that tenant alone.
WITH RECURSIVE t (tenant) AS (
    SELECT MIN(tenant) FROM run_tenants
    WHERE status IN ('pending', 'running') OR (status = 'waiting' AND wake_at IS NOT NULL)
    UNION ALL
    SELECT (SELECT MIN(r.tenant) FROM run_tenants AS r
            WHERE (r.status IN ('pending', 'running')
                   OR (r.status = 'waiting' AND r.wake_at IS NOT NULL))
              AND r.tenant > t.tenant)
    FROM t WHERE t.tenant IS NOT NULL
), n AS (
    SELECT t.tenant,
        CASE WHEN t.tenant IN (SELECT value FROM json_each(:named))
             THEN (SELECT s.value FROM json_each(:sinces) AS s WHERE s.key = t.tenant)
             ELSE :since END AS since
    FROM t WHERE t.tenant IS NOT NULL LIMIT :most
)
SELECT t.tenant AS tenant,
    (SELECT count(*) FROM run_tenants AS rt INDEXED BY run_tenants_running
     JOIN runs AS r ON r.run_id = rt.run_id
     WHERE rt.tenant = t.tenant AND rt.status = 'running' AND r.lease_owner IS NOT NULL
       AND r.lease_expires_at > COALESCE(:lease_now, (julianday('now') - 2440587.5) * 86400.0)
    ) AS active,
    (SELECT rt.run_id FROM run_tenants AS rt INDEXED BY run_tenants_runnable
     JOIN runs AS r ON r.run_id = rt.run_id
     WHERE rt.tenant = t.tenant AND rt.status IN ('pending', 'running') AND rt.queue IS NULL
       AND (r.lease_expires_at IS NULL OR r.lease_expires_at <=
           COALESCE(:lease_now, (julianday('now') - 2440587.5) * 86400.0))
       AND (r.workflow || '@' || r.version) IN (SELECT value FROM json_each(:hosted))
       AND r.run_id NOT IN (SELECT value FROM json_each(:exclude))
     ORDER BY rt.created_at LIMIT 1) IS NOT NULL
    OR (SELECT rt.run_id FROM run_tenants AS rt
        JOIN runs AS r ON r.run_id = rt.run_id
        WHERE rt.tenant = t.tenant AND rt.status = 'waiting' AND rt.wake_at <= :now
          AND rt.queue IS NULL
          AND (r.workflow || '@' || r.version) IN (SELECT value FROM json_each(:hosted))
          AND r.run_id NOT IN (SELECT value FROM json_each(:exclude))
        ORDER BY rt.wake_at LIMIT 1) IS NOT NULL AS ready,
    CASE WHEN t.since IS NULL THEN 0 ELSE
        (SELECT count(*) FROM run_tenants AS rt
         WHERE rt.tenant = t.tenant AND rt.started_at > t.since) END AS recent
FROM n AS t;

-- name: claim_tenant
-- Lease up to :limit runs of one tenant outside any queue, oldest first (a
-- due sleeper by its creation too, as in claim), read through run_tenants'
-- indexes for that tenant alone. A run's first claim sets started_at. Each
-- row returned names its tenant (the claim's, as run_tenants holds it).
UPDATE runs
SET epoch = epoch + 1, lease_owner = :worker_id, lease_expires_at =
    COALESCE(:lease_now, (julianday('now') - 2440587.5) * 86400.0) + :lease_seconds,
    status = 'running', wake_at = NULL, updated_at = :now,
    started_at = COALESCE(started_at, :now)
WHERE run_id IN (
    SELECT run_id FROM (
        SELECT * FROM (
            SELECT rt.run_id, rt.created_at FROM run_tenants AS rt
            INDEXED BY run_tenants_runnable
            JOIN runs AS r ON r.run_id = rt.run_id
            WHERE rt.tenant = :tenant AND rt.status IN ('pending', 'running')
              AND rt.queue IS NULL
              AND (r.lease_expires_at IS NULL OR r.lease_expires_at <=
                  COALESCE(:lease_now, (julianday('now') - 2440587.5) * 86400.0))
              AND (r.workflow || '@' || r.version) IN (SELECT value FROM json_each(:hosted))
              AND r.run_id NOT IN (SELECT value FROM json_each(:exclude))
            ORDER BY rt.created_at LIMIT :limit)
        UNION ALL
        SELECT * FROM (
            SELECT rt.run_id, rt.created_at FROM run_tenants AS rt
            JOIN runs AS r ON r.run_id = rt.run_id
            WHERE rt.tenant = :tenant AND rt.status = 'waiting' AND rt.wake_at <= :now
              AND rt.queue IS NULL
              AND (r.workflow || '@' || r.version) IN (SELECT value FROM json_each(:hosted))
              AND r.run_id NOT IN (SELECT value FROM json_each(:exclude))
            ORDER BY rt.wake_at LIMIT :limit)
    )
    ORDER BY created_at LIMIT :limit
)
RETURNING *, :tenant AS tenant;

-- name: claim_tenants
-- Empty: SQLite has no LIMIT that reads a column of the row it is read for,
-- so the claim takes each tenant's runs with claim_tenant, in turn (no round
-- trip to save here).

-- Spend and quotas (schema 36, see `stead.spend`).

-- name: reserve_context
-- What a reservation is judged on, in one read: the run's tenant ('' none),
-- the model's price (null: unpriced), what the run's model calls hold, and
-- the tenant's limits (JSON; null: none).
SELECT (SELECT t.tenant FROM run_tenants t WHERE t.run_id = :run_id) AS tenant,
       p.input_per_million, p.output_per_million,
       (SELECT COALESCE(SUM(r.tokens), 0) FROM spend_reservations r
        WHERE r.run_id = :run_id AND r.state <> 'released') AS run_tokens,
       (SELECT COALESCE(SUM(r.cost), 0) FROM spend_reservations r
        WHERE r.run_id = :run_id AND r.state <> 'released') AS run_cost,
       (SELECT l.limits FROM tenant_limits l JOIN run_tenants t ON t.tenant = l.tenant
        WHERE t.run_id = :run_id) AS limits
FROM (SELECT 1 AS one) AS o LEFT JOIN model_prices p ON p.model = :model;

-- name: run_tenant
-- The tenant a run serves ('' or no row: none).
SELECT tenant FROM run_tenants WHERE run_id = :run_id;


-- name: set_price
INSERT INTO model_prices (model, input_per_million, output_per_million, updated_at)
VALUES (:model, :input, :output, :now)
ON CONFLICT (model) DO UPDATE
SET input_per_million = excluded.input_per_million,
    output_per_million = excluded.output_per_million, updated_at = excluded.updated_at;

-- name: list_prices
SELECT model, input_per_million, output_per_million, updated_at FROM model_prices
ORDER BY model;

-- name: get_tenant_limits
SELECT tenant, limits, updated_at, updated_by, why FROM tenant_limits
WHERE tenant = :tenant;

-- name: set_tenant_limits
INSERT INTO tenant_limits (tenant, limits, updated_at, updated_by, why)
VALUES (:tenant, :limits, :now, :by, :why)
ON CONFLICT (tenant) DO UPDATE
SET limits = excluded.limits, updated_at = excluded.updated_at,
    updated_by = excluded.updated_by, why = excluded.why;

-- name: list_tenant_limits
SELECT tenant, limits, updated_at, updated_by, why FROM tenant_limits
ORDER BY tenant;

-- name: lock_tenant_spend
-- The row every reservation and quota check of the tenant reads and changes,
-- made if missing: the write transaction holds the file's one write lock, so
-- two workers reserving at once are judged one after the other.
INSERT INTO tenant_spend (tenant) VALUES (:tenant)
ON CONFLICT (tenant) DO UPDATE SET tenant = excluded.tenant
RETURNING tokens, cost, reserved_tokens, reserved_cost;

-- name: get_tenant_spend
SELECT tenant, tokens, cost, reserved_tokens, reserved_cost FROM tenant_spend
WHERE tenant = :tenant;


-- name: reset_tenant_spend
-- A new budget period: what was settled is forgotten, what is reserved stays.
UPDATE tenant_spend SET tokens = 0, cost = 0 WHERE tenant = :tenant;


-- name: reserved_at
-- The reservations of one call still open (its attempts in flight, or whose
-- worker died).
SELECT run_id, addr, attempt, tenant, model, input_price, output_price, tokens, cost,
       state, at
FROM spend_reservations
WHERE run_id = :run_id AND addr = :addr AND state = 'reserved'
ORDER BY attempt;

-- name: open_reservation
-- A reservation, and its estimate held by its tenant (if it has one). Two
-- statements, run in turn (`-- then`).
INSERT INTO spend_reservations (run_id, addr, attempt, tenant, model, input_price,
                                output_price, tokens, cost, state, at)
VALUES (:run_id, :addr, :attempt, :tenant, :model, :input_price, :output_price,
        :tokens, :cost, 'reserved', :now);
-- then
UPDATE tenant_spend
SET reserved_tokens = reserved_tokens + :tokens, reserved_cost = reserved_cost + :cost
WHERE tenant = :tenant;

-- name: close_reservation
-- A reservation resolved (`state`: settled, released, died), now holding
-- `tokens` and `cost`; its tenant's counts move from reserved (`held_tokens`,
-- `held_cost`: its estimate) to settled. Two statements, run in turn.
UPDATE spend_reservations SET state = :state, tokens = :tokens, cost = :cost, at = :now
WHERE run_id = :run_id AND addr = :addr AND attempt = :attempt AND state = 'reserved';
-- then
UPDATE tenant_spend
SET tokens = tokens + :tokens, cost = cost + :cost,
    reserved_tokens = reserved_tokens - :held_tokens, reserved_cost = reserved_cost - :held_cost
WHERE tenant = :tenant;

-- name: settle_reservation
-- A reservation settled to the tokens its attempt used (`input_tokens`,
-- `output_tokens`, costed at the prices it was reserved at), or released (no
-- tokens); its tenant's counts move from reserved to settled. Two statements,
-- run in turn (`-- then`): the tenant's first, while the row still says what
-- it reserved.
UPDATE tenant_spend
SET tokens = tokens + :input_tokens + :output_tokens,
    cost = cost + (SELECT (:input_tokens * COALESCE(r.input_price, 0)
                           + :output_tokens * COALESCE(r.output_price, 0)) / 1000000.0
                   FROM spend_reservations r
                   WHERE r.run_id = :run_id AND r.addr = :addr AND r.attempt = :attempt
                     AND r.state = 'reserved'),
    reserved_tokens = reserved_tokens - (
        SELECT r.tokens FROM spend_reservations r
        WHERE r.run_id = :run_id AND r.addr = :addr AND r.attempt = :attempt
          AND r.state = 'reserved'),
    reserved_cost = reserved_cost - (
        SELECT r.cost FROM spend_reservations r
        WHERE r.run_id = :run_id AND r.addr = :addr AND r.attempt = :attempt
          AND r.state = 'reserved')
WHERE tenant = (SELECT r.tenant FROM spend_reservations r
                WHERE r.run_id = :run_id AND r.addr = :addr AND r.attempt = :attempt
                  AND r.state = 'reserved');
-- then
UPDATE spend_reservations
SET state = :state, tokens = :input_tokens + :output_tokens,
    cost = (:input_tokens * COALESCE(input_price, 0)
            + :output_tokens * COALESCE(output_price, 0)) / 1000000.0,
    at = :now
WHERE run_id = :run_id AND addr = :addr AND attempt = :attempt AND state = 'reserved';

-- name: list_reservations
SELECT run_id, addr, attempt, tenant, model, input_price, output_price, tokens, cost,
       state, at
FROM spend_reservations WHERE run_id = :run_id
ORDER BY at, addr, attempt;

-- name: tenant_recent_starts
-- The tenant's runs created since `since` (its runs-per-minute quota).
SELECT COUNT(*) AS n FROM run_tenants WHERE tenant = :tenant AND created_at >= :since;

-- name: count_children
-- How many children a run has started (its tenant's children-per-run quota).
SELECT COUNT(*) AS n FROM runs WHERE parent_id = :run_id;

-- name: tenant_open_waits
-- The waits open over all of a tenant's runs (its open-waits quota).
SELECT COUNT(*) AS n FROM waits w JOIN run_tenants t ON t.run_id = w.run_id
WHERE t.tenant = :tenant AND w.state = 'open';

-- name: tenant_stored_bytes
-- The bytes a tenant's runs hold (its stored-bytes quota; see run_bytes).
SELECT COALESCE(SUM(b.bytes), 0) AS n
FROM run_tenants t JOIN run_bytes b ON b.run_id = t.run_id WHERE t.tenant = :tenant;

-- large values (see stead/payloads/references.py) -----------------------------
-- name: own_blob
-- The run owns the blob its reference names (in the reference's transaction).
-- A run_id of `task:<task key>` is a task's state (store/_large_state.py).
INSERT INTO run_blobs (run_id, sha256, size, at) VALUES (:run_id, :sha256, :size, :at)
ON CONFLICT (run_id, sha256) DO NOTHING;

-- name: blobs_of_runs
SELECT DISTINCT sha256 FROM run_blobs WHERE run_id IN (SELECT value FROM json_each(:run_ids));

-- name: delete_run_blobs
DELETE FROM run_blobs WHERE run_id IN (SELECT value FROM json_each(:run_ids));

-- name: owned_blobs
-- Which of `hashes` some run owns.
SELECT DISTINCT sha256 FROM run_blobs WHERE sha256 IN (SELECT value FROM json_each(:hashes));

-- == day partitions of the journal and the events: PostgreSQL only ==
-- name: add_day
-- name: gauge_days
-- name: partition_days
-- name: day_runs
-- name: empty_day
-- name: drop_day
-- name: day_run_ids
