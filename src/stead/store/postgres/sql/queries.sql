-- Named queries for the PostgreSQL store (psycopg parameters: %(name)s).
-- Lists are passed as arrays: `= ANY(%(x)s::text[])`, and lists of rows as one
-- JSON array (`json_to_recordset(%(x)s::json)`); never spliced in.
-- Leases are judged by the server's clock: a lease ends at the server's time of
-- the claim or renewal plus the lease length, and has ended once the server's
-- time of a later statement is past it (statement_timestamp(), which is stable
-- within a statement, so an index still serves it). A worker's clock never
-- enters it, so a worker whose clock runs ahead cannot take a live lease.
-- %(lease_now)s stands in for the server's time where a test moves a fake
-- lease clock; null (always, outside tests) means the server's.

-- name: try_migrate_lock
-- Serialises migrations of one schema across every process that opens it,
-- until the transaction ends. Tried, never waited for: an opener that waits
-- inside a transaction holds a snapshot, which an index being built
-- CONCURRENTLY would wait for in turn.
SELECT pg_try_advisory_xact_lock(1937007972, hashtext(%(schema)s)) AS taken;

-- name: try_migrate_session_lock
-- The same lock, held by the session: around a migration whose statements
-- run outside a transaction.
SELECT pg_try_advisory_lock(1937007972, hashtext(%(schema)s)) AS taken;

-- name: migrate_unlock
SELECT pg_advisory_unlock(1937007972, hashtext(%(schema)s));

-- name: set_lock_timeout
-- How long a migration's statement waits for a lock, for this transaction:
-- while it waits, every statement that needs the table queues behind it.
SELECT set_config('lock_timeout', %(lock_timeout)s, true);

-- name: oldest_transaction
-- The longest-open transaction but this one: what a migration that could not
-- take its lock most likely waited for.
SELECT pid, application_name, EXTRACT(EPOCH FROM now() - xact_start) AS seconds,
       left(query, 80) AS query
FROM pg_stat_activity
WHERE xact_start IS NOT NULL AND pid <> pg_backend_pid() AND datname = current_database()
ORDER BY xact_start LIMIT 1;

-- name: name_schema
SELECT set_config('stead.schema', %(schema)s, true);

-- name: create_schema
-- Runs without parameters; the schema name comes from the setting above and
-- is quoted by format('%I').
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_namespace WHERE nspname = current_setting('stead.schema')
    ) THEN
        EXECUTE format('CREATE SCHEMA %I', current_setting('stead.schema'));
    END IF;
END
$$;

-- name: read_only
-- Whether this session cannot write: a hot standby (in recovery), or a role
-- or database whose transactions are read-only by default.
SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on' AS read_only;

-- name: set_search_path
SELECT set_config('search_path', quote_ident(%(schema)s), false);

-- name: schema_table
-- Whether the version table is there (the search path is the store's schema,
-- which may not exist yet).
SELECT to_regclass('stead_schema') IS NOT NULL AS present;

-- name: create_version_table
CREATE TABLE IF NOT EXISTS stead_schema (version INTEGER PRIMARY KEY);

-- name: schema_applied
SELECT version FROM stead_schema;

-- name: schema_beyond
-- The versions past %(known)s, as the releases that applied them described them.
SELECT version, name, compatible, stead_version FROM stead_schema
WHERE version > %(known)s ORDER BY version;

-- name: insert_version
INSERT INTO stead_schema (version) VALUES (%(version)s);

-- name: insert_version_described
INSERT INTO stead_schema (version, name, compatible, applied_at, stead_version)
VALUES (%(version)s, %(name)s, %(compatible)s, %(applied_at)s, %(stead_version)s);

-- name: live_worker_versions
-- The workers heard from lately, each with the release and schema its code runs.
SELECT worker_id, MAX(stead_version) AS stead_version,
       MIN(schema_version) AS schema_version
FROM worker_hosts WHERE stopped_at IS NULL AND live_until > %(now)s
GROUP BY worker_id ORDER BY worker_id;

-- name: live_workers_unversioned
-- The same on a database before schema 30, whose heartbeats name no version.
SELECT DISTINCT worker_id, NULL AS stead_version, NULL::integer AS schema_version
FROM worker_hosts WHERE stopped_at IS NULL AND seen_at > %(since)s ORDER BY worker_id;

-- name: listen
LISTEN stead_work;

-- name: notify_work
-- Wakes idle workers listening on this database (payload: the schema, so two
-- apps in two schemas do not wake each other; the search path is the store's
-- schema alone). Delivered at commit.
SELECT pg_notify('stead_work', current_schema());

-- name: find_live_task
SELECT * FROM runs
WHERE task_id = %(task_id)s AND status NOT IN ('completed', 'failed', 'cancelled', 'revalidation_failed');

-- name: insert_run
-- ON CONFLICT: a concurrent start of the same task (or a retried start whose
-- first attempt committed) inserts nothing; the caller then looks it up. A
-- run inserted wakes idle workers (NOTIFY, delivered at commit): one
-- statement, so it may commit on its own.
WITH created AS (
    INSERT INTO runs (run_id, workflow, version, task_id, status, input, epoch,
                      created_at, updated_at, queue, priority, dedup_key)
    VALUES (%(run_id)s, %(workflow)s, %(version)s, %(task_id)s, 'pending', %(input)s, 0,
            %(now)s, %(now)s, %(queue)s, %(priority)s, %(dedup_key)s)
    ON CONFLICT DO NOTHING
    RETURNING *
)
SELECT created.* FROM created
CROSS JOIN LATERAL (SELECT pg_notify('stead_work', current_schema())) AS woken;

-- name: get_run
-- The run, and the tenant it serves ('' none; no row: it ended before schema 35).
SELECT runs.*, (SELECT t.tenant FROM run_tenants t WHERE t.run_id = runs.run_id) AS tenant
FROM runs WHERE run_id = %(run_id)s;

-- name: list_runs
SELECT runs.*, t.tenant FROM runs LEFT JOIN run_tenants t ON t.run_id = runs.run_id
WHERE (%(status)s::text IS NULL OR runs.status = %(status)s::text)
  AND (%(tenant)s::text IS NULL OR t.tenant = %(tenant)s::text)
  AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s::text)
ORDER BY runs.created_at DESC, runs.run_id DESC
LIMIT %(limit)s;

-- name: list_runs_of_status
-- list_runs of one status, by the index on (status, created_at): in list_runs,
-- `status IS NULL OR ...` leaves the planner no index but the runs' order.
SELECT runs.*, t.tenant FROM runs LEFT JOIN run_tenants t ON t.run_id = runs.run_id
WHERE runs.status = %(status)s::text
  AND (%(tenant)s::text IS NULL OR t.tenant = %(tenant)s::text)
  AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s::text)
ORDER BY runs.created_at DESC, runs.run_id DESC
LIMIT %(limit)s;

-- name: backlog
-- What workers could take, by workflow@version: runnable now, and leased (with
-- the soonest lease end). Waiting runs count once they are due.
SELECT workflow, version,
       SUM(CASE WHEN status = 'running' AND lease_expires_at >
           COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8
                THEN 0 ELSE 1 END)
           AS runnable,
       SUM(CASE WHEN status = 'running' AND lease_expires_at >
           COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8
                THEN 1 ELSE 0 END)
           AS leased,
       MIN(CASE WHEN status = 'running' AND lease_expires_at >
           COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8
                THEN lease_expires_at END) AS next_expiry
FROM runs
WHERE status IN ('pending', 'running') OR (status = 'waiting' AND wake_at <= %(now)s)
GROUP BY workflow, version
ORDER BY workflow, version;

-- name: leased_runs
-- Runs whose lease has not ended, soonest end first.
SELECT * FROM runs
WHERE status = 'running' AND lease_expires_at >
    COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8
ORDER BY lease_expires_at
LIMIT %(limit)s;

-- name: cancel_run
UPDATE runs
SET status = 'cancelled', epoch = epoch + 1, lease_owner = NULL,
    lease_expires_at = NULL, updated_at = %(now)s
WHERE run_id = %(run_id)s AND status NOT IN ('completed', 'failed', 'cancelled', 'revalidation_failed')
RETURNING *;

-- name: claim
-- SKIP LOCKED: concurrent claimers never wait on, nor share, a run; a row
-- another transaction changed meanwhile is re-checked against the WHERE.
-- Two arms, each reading an index in order and stopping at :limit (one OR of
-- both read every pending run and sorted them): runnable runs oldest first
-- (runs_runnable; the planner takes it once runs is analyzed, see schema 5),
-- due sleepers longest overdue first (runs_waking), not all waiting runs.
-- Rows an arm locked but the final LIMIT leaves are unlocked at the commit.
-- Runs in a queue are left to the queue's claim (claim_queue), under its limits.
-- prior_lease_until: when the lease ended early under the epoch before would
-- have run out (see end_leases_of_absent), if it was.
-- A run's first claim sets started_at: the trace shows the time before it as queued.
WITH runnable AS (
    SELECT run_id, created_at FROM runs
    WHERE status IN ('pending', 'running') AND queue IS NULL
      AND (lease_expires_at IS NULL OR lease_expires_at <=
          COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8)
      AND (workflow || '@' || version) = ANY(%(hosted)s::text[])
      AND NOT (run_id = ANY(%(exclude)s::text[]))
    ORDER BY created_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), due AS (
    SELECT run_id, created_at FROM runs
    WHERE status = 'waiting' AND wake_at <= %(now)s AND queue IS NULL
      AND (workflow || '@' || version) = ANY(%(hosted)s::text[])
      AND NOT (run_id = ANY(%(exclude)s::text[]))
    ORDER BY wake_at  -- the order of runs_waking: longest overdue first
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT run_id FROM (SELECT * FROM runnable UNION ALL SELECT * FROM due) AS candidates
    ORDER BY created_at
    LIMIT %(limit)s
)
UPDATE runs
SET epoch = runs.epoch + 1, lease_owner = %(worker_id)s, lease_expires_at =
    COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8 + %(lease_seconds)s,
    status = 'running', wake_at = NULL, updated_at = %(now)s,
    started_at = COALESCE(runs.started_at, %(now)s)
FROM picked
WHERE runs.run_id = picked.run_id
RETURNING runs.*,
    (SELECT e.until FROM lease_ends AS e
     WHERE e.run_id = runs.run_id AND e.epoch = runs.epoch - 1) AS prior_lease_until;

-- name: claim_unshared
-- claim, taken only if at most one tenant has runs a claim could take
-- (ready_tenants' skip scan, stopped at %(most)s tenants): one round trip
-- where ready_tenants then claim would take two. Answers one row per run
-- leased, or one row with a null run_id when none was; each names the
-- tenants read (ready_tenants).
WITH RECURSIVE t (tenant) AS (
    SELECT MIN(tenant) FROM run_tenants
    WHERE status IN ('pending', 'running') OR (status = 'waiting' AND wake_at IS NOT NULL)
    UNION ALL
    SELECT (SELECT MIN(r.tenant) FROM run_tenants AS r
            WHERE (r.status IN ('pending', 'running')
                   OR (r.status = 'waiting' AND r.wake_at IS NOT NULL))
              AND r.tenant > t.tenant)
    FROM t WHERE t.tenant IS NOT NULL
), ready AS (
    SELECT tenant FROM t WHERE tenant IS NOT NULL LIMIT %(most)s
), runnable AS (
    SELECT run_id, created_at FROM runs
    WHERE status IN ('pending', 'running') AND queue IS NULL
      AND (lease_expires_at IS NULL OR lease_expires_at <=
          COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8)
      AND (workflow || '@' || version) = ANY(%(hosted)s::text[])
      AND NOT (run_id = ANY(%(exclude)s::text[]))
      AND (SELECT count(*) FROM ready) <= 1
    ORDER BY created_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), due AS (
    SELECT run_id, created_at FROM runs
    WHERE status = 'waiting' AND wake_at <= %(now)s AND queue IS NULL
      AND (workflow || '@' || version) = ANY(%(hosted)s::text[])
      AND NOT (run_id = ANY(%(exclude)s::text[]))
      AND (SELECT count(*) FROM ready) <= 1
    ORDER BY wake_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT run_id FROM (SELECT * FROM runnable UNION ALL SELECT * FROM due) AS candidates
    ORDER BY created_at
    LIMIT %(limit)s
), claimed AS (
    UPDATE runs
    SET epoch = runs.epoch + 1, lease_owner = %(worker_id)s, lease_expires_at =
        COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8
            + %(lease_seconds)s,
        status = 'running', wake_at = NULL, updated_at = %(now)s,
        started_at = COALESCE(runs.started_at, %(now)s)
    FROM picked
    WHERE runs.run_id = picked.run_id
    RETURNING runs.*,
        (SELECT e.until FROM lease_ends AS e
         WHERE e.run_id = runs.run_id AND e.epoch = runs.epoch - 1) AS prior_lease_until
)
SELECT claimed.*, ARRAY(SELECT tenant FROM ready ORDER BY tenant) AS ready_tenants
FROM (SELECT 1) AS answer LEFT JOIN claimed ON true;

-- name: lease_now
-- The time leases are judged at (see the top of this file).
SELECT COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8 AS now;

-- name: claimed_by
-- Read-back after a claim whose commit status is unknown: the runs leased to
-- this worker by that very claim (its time, updated_at, is its own).
SELECT runs.*,
    (SELECT e.until FROM lease_ends AS e
     WHERE e.run_id = runs.run_id AND e.epoch = runs.epoch - 1) AS prior_lease_until
FROM runs
WHERE lease_owner = %(worker_id)s AND updated_at = %(now)s AND status = 'running'
  AND NOT (run_id = ANY(%(exclude)s::text[]))
ORDER BY created_at;

-- name: renew
-- Locks the runs in run_id order, as a group of fenced writes does, so a
-- renewal and a group commit never wait for each other in a cycle.
-- %(in_flight)s, per fence: the started markers its holder has in flight
-- (JSON text), '' for none, or null to leave the column as it is.
WITH held AS MATERIALIZED (
    SELECT locked.run_id, f.in_flight
    FROM (SELECT * FROM unnest(%(run_ids)s::text[], %(epochs)s::bigint[], %(workers)s::text[],
                               %(in_flight)s::text[])
              AS f (run_id, epoch, worker_id, in_flight)
          ORDER BY run_id) AS f
    CROSS JOIN LATERAL (
        SELECT runs.run_id FROM runs
        WHERE runs.run_id = f.run_id AND runs.epoch = f.epoch
          AND runs.lease_owner = f.worker_id AND runs.status = 'running'
        FOR NO KEY UPDATE
    ) AS locked
)
UPDATE runs SET lease_expires_at =
    COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8 + %(lease_seconds)s,
    in_flight = CASE WHEN held.in_flight IS NULL THEN runs.in_flight
                     ELSE NULLIF(held.in_flight, '') END
FROM held
WHERE runs.run_id = held.run_id
RETURNING runs.run_id, runs.epoch, runs.lease_owner;

-- name: release
-- The run is claimable again: wake idle workers (NOTIFY, delivered at commit).
WITH released AS (
    UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL, updated_at = %(now)s
    WHERE run_id = %(run_id)s AND epoch = %(epoch)s AND lease_owner = %(worker_id)s
      AND status = 'running'
    RETURNING run_id
)
SELECT released.run_id FROM released
CROSS JOIN LATERAL (SELECT pg_notify('stead_work', current_schema())) AS woken;

-- name: fence
-- Locks the run row until commit: a claim skips it, a cancel waits for it,
-- so nothing can take the run over between this check and the commit.
SELECT 1 FROM runs
WHERE run_id = %(run_id)s AND epoch = %(epoch)s AND lease_owner = %(worker_id)s
  AND status = 'running'
FOR NO KEY UPDATE;

-- name: fenced_write
-- Fenced journal writes of any number of runs as ONE statement that commits
-- on its own (autocommit): one round trip and one commit for a whole group.
-- jobs: the fences [{n, run_id, epoch, worker_id}], in run_id order (the
-- order rows are locked in, so two groups never deadlock). A fence that holds
-- locks its run row until the commit, so no claim or cancel can slip in, and
-- only then are that job's records and resume record inserted; a stale fence
-- inserts nothing. The jobs listed in finishes [{n, status, result, error,
-- now}] also end their run's attempt (releasing the lease), in the same
-- statement and commit. Returns the jobs (n) whose fence held.
WITH fence AS MATERIALIZED (
    SELECT job.n, held.run_id
    FROM json_to_recordset(%(jobs)s::json)
        AS job (n int, run_id text, epoch bigint, worker_id text)
    CROSS JOIN LATERAL (
        SELECT runs.run_id FROM runs
        WHERE runs.run_id = job.run_id AND runs.epoch = job.epoch
          AND runs.lease_owner = job.worker_id AND runs.status = 'running'
        FOR NO KEY UPDATE
    ) AS held
), records AS (
    INSERT INTO journal (run_id, seq, addr, attempt, kind, name, digest, status, payload,
                         epoch, at, arguments)
    SELECT fence.run_id, r.seq, r.addr, r.attempt, r.kind, r.name, r.digest, r.status,
           r.payload, r.epoch, r.at, r.arguments
    FROM json_to_recordset(%(records)s::json)
        AS r (n int, seq bigint, addr text, attempt int, kind text, name text, digest text,
              status text, payload text, epoch bigint, at float8, arguments text)
    JOIN fence ON fence.n = r.n
), resumes AS (
    INSERT INTO resumes (run_id, epoch, worker_id, at, from_seq, code_version, reused, detail)
    SELECT fence.run_id, r.epoch, r.worker_id, r.at, r.from_seq, r.code_version, r.reused,
           r.detail
    FROM json_to_recordset(%(resumes)s::json)
        AS r (n int, epoch bigint, worker_id text, at float8, from_seq bigint,
              code_version text, reused int, detail text)
    JOIN fence ON fence.n = r.n
    -- a record written before the takeover's judgement is written again with it
    ON CONFLICT (run_id, epoch) DO UPDATE SET detail = EXCLUDED.detail
), finished AS (
    UPDATE runs
    SET status = f.status, result = f.result, error = f.error, lease_owner = NULL,
        lease_expires_at = NULL, updated_at = f.now
    FROM json_to_recordset(%(finishes)s::json)
        AS f (n int, status text, result text, error text, now float8)
    JOIN fence ON fence.n = f.n
    WHERE runs.run_id = fence.run_id
      AND runs.run_id = ANY (ARRAY(SELECT run_id FROM fence))  -- by the primary key
)
SELECT n FROM fence;

-- name: append_one
-- `fenced_write` of the commonest write, one record of one run, in plain
-- parameters: cheaper, on both sides, than the JSON a group needs.
WITH fence AS MATERIALIZED (
    SELECT run_id FROM runs
    WHERE run_id = %(run_id)s AND epoch = %(epoch)s AND lease_owner = %(worker_id)s
      AND status = 'running'
    FOR NO KEY UPDATE
)
INSERT INTO journal (run_id, seq, addr, attempt, kind, name, digest, status, payload,
                     epoch, at, arguments)
SELECT fence.run_id, %(seq)s::bigint, %(addr)s::text, %(attempt)s::int, %(kind)s::text,
       %(name)s::text, %(digest)s::text, %(status)s::text, %(payload)s::text,
       %(record_epoch)s::bigint, %(at)s::float8, %(arguments)s::text
FROM fence
RETURNING 1 AS n;

-- name: finish_one
-- `fenced_write` of one run that has no record left to write: the UPDATE is
-- the fence (it locks the row while it checks the epoch).
UPDATE runs
SET status = %(status)s, result = %(result)s, error = %(error)s, lease_owner = NULL,
    lease_expires_at = NULL, updated_at = %(now)s
WHERE run_id = %(run_id)s AND epoch = %(epoch)s AND lease_owner = %(worker_id)s
  AND status = 'running'
RETURNING 1 AS n;

-- name: insert_records
-- Records of a transaction that checked its fence itself (`fence`), as in
-- `fenced_write`: records [{seq, addr, ...}], resumes [{epoch, ...}].
WITH records AS (
    INSERT INTO journal (run_id, seq, addr, attempt, kind, name, digest, status, payload,
                         epoch, at, arguments)
    SELECT %(run_id)s, r.seq, r.addr, r.attempt, r.kind, r.name, r.digest, r.status,
           r.payload, r.epoch, r.at, r.arguments
    FROM json_to_recordset(%(records)s::json)
        AS r (seq bigint, addr text, attempt int, kind text, name text, digest text,
              status text, payload text, epoch bigint, at float8, arguments text)
)
INSERT INTO resumes (run_id, epoch, worker_id, at, from_seq, code_version, reused, detail)
SELECT %(run_id)s, r.epoch, r.worker_id, r.at, r.from_seq, r.code_version, r.reused,
       r.detail
FROM json_to_recordset(%(resumes)s::json)
    AS r (epoch bigint, worker_id text, at float8, from_seq bigint, code_version text,
          reused int, detail text)
ON CONFLICT (run_id, epoch) DO UPDATE SET detail = EXCLUDED.detail;

-- name: insert_record
-- One record (a human's decision on a stopped run, see resume_stopped).
INSERT INTO journal (run_id, seq, addr, attempt, kind, name, digest, status,
                     payload, epoch, at, arguments)
VALUES (%(run_id)s, %(seq)s, %(addr)s, %(attempt)s, %(kind)s, %(name)s, %(digest)s,
        %(status)s, %(payload)s, %(epoch)s, %(at)s, %(arguments)s);

-- name: count_records
-- Read-back after an append whose commit status is unknown.
SELECT count(*) AS n FROM journal
JOIN unnest(%(seqs)s::bigint[], %(addrs)s::text[], %(attempts)s::int[], %(statuses)s::text[])
    AS rec (seq, addr, attempt, status)
  ON journal.seq = rec.seq AND journal.addr = rec.addr
 AND journal.attempt = rec.attempt AND journal.status = rec.status
WHERE journal.run_id = %(run_id)s;

-- name: has_resume
SELECT 1 FROM resumes WHERE run_id = %(run_id)s AND epoch = %(epoch)s;

-- name: load_journal
SELECT seq, addr, attempt, kind, name, digest, status, payload, epoch, at, arguments
FROM journal WHERE run_id = %(run_id)s ORDER BY seq;

-- name: list_resumes
SELECT * FROM resumes WHERE run_id = %(run_id)s ORDER BY epoch;

-- name: resume_stopped
UPDATE runs
SET status = 'running', error = NULL, epoch = epoch + 1, lease_owner = NULL,
    lease_expires_at = NULL, updated_at = %(now)s
WHERE run_id = %(run_id)s AND status = %(expect)s
RETURNING *;

-- name: next_seq
SELECT COALESCE(MAX(seq), -1) + 1 AS seq FROM journal WHERE run_id = %(run_id)s;

-- name: find_record
SELECT seq FROM journal
WHERE run_id = %(run_id)s AND addr = %(addr)s AND attempt = %(attempt)s
  AND status = %(status)s;

-- name: lock_run
-- Deliveries and revocations lock the run first (as fenced writes do), so
-- everything that touches one run's waits happens one at a time.
SELECT 1 FROM runs WHERE run_id = %(run_id)s FOR UPDATE;

-- name: insert_wait
INSERT INTO waits (wait_id, run_id, addr, kind, bind, schema, token_hash, task_key,
                   expires_at, state, created_at, policy_version)
VALUES (%(wait_id)s, %(run_id)s, %(addr)s, %(kind)s, %(bind)s, %(schema)s, %(token_hash)s,
        %(task_key)s, %(expires_at)s, 'open', %(created_at)s,
        %(policy_version)s);

-- name: get_wait
SELECT w.*, q.request FROM waits w LEFT JOIN wait_requests q ON q.wait_id = w.wait_id
WHERE w.wait_id = %(wait_id)s;

-- name: insert_wait_request
INSERT INTO wait_requests (wait_id, request) VALUES (%(wait_id)s, %(request)s);

-- name: run_waits
SELECT w.*, q.request FROM waits w LEFT JOIN wait_requests q ON q.wait_id = w.wait_id
WHERE w.run_id = %(run_id)s ORDER BY w.created_at, w.wait_id;

-- name: locked_run
-- A delivery's first statement: its run, locked (as fenced writes lock it),
-- so everything that touches one run's waits happens one at a time.
SELECT * FROM runs WHERE run_id = %(run_id)s FOR UPDATE;

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
LEFT JOIN events e ON e.run_id = %(run_id)s AND e.event_id = %(event_id)s
LEFT JOIN (SELECT w.*, s.version AS state_version
           FROM waits w LEFT JOIN task_state s ON s.task_key = w.task_key
           WHERE w.run_id = %(run_id)s) AS ws ON true
ORDER BY ws.created_at, ws.wait_id;

-- name: wait_and_event
-- A wait and, if an event consumed it, that event (its columns as e_*), in one read.
SELECT w.*, e.run_id AS e_run_id, e.event_id AS e_event_id, e.wait_id AS e_wait_id,
       e.kind AS e_kind, e.payload AS e_payload, e.bind AS e_bind, e.verdict AS e_verdict,
       e.reason AS e_reason, e.detail AS e_detail, e.received_at AS e_received_at,
       e.delivered_by AS e_delivered_by, e.delivered_why AS e_delivered_why
FROM waits w LEFT JOIN events e ON e.run_id = w.run_id AND e.event_id = w.event_id
WHERE w.wait_id = %(wait_id)s;

-- name: run_wait_and_event
-- wait_and_event of a wait the caller knows the run of (a run resuming
-- from its wait): the event is looked for under that run's id, a value
-- the planner prunes the events' day partitions by, so that one is read
-- (joined on the wait's run id, as in wait_and_event, a read opens every
-- day's partition: its cost grows with the days kept).
SELECT w.*, e.run_id AS e_run_id, e.event_id AS e_event_id, e.wait_id AS e_wait_id,
       e.kind AS e_kind, e.payload AS e_payload, e.bind AS e_bind, e.verdict AS e_verdict,
       e.reason AS e_reason, e.detail AS e_detail, e.received_at AS e_received_at,
       e.delivered_by AS e_delivered_by, e.delivered_why AS e_delivered_why
FROM waits w LEFT JOIN events e ON e.run_id = %(run_id)s AND e.event_id = w.event_id
WHERE w.wait_id = %(wait_id)s AND w.run_id = %(run_id)s;

-- name: run_last_consumed_wait
-- The wait of a run an event consumed last, with that event, as
-- run_wait_and_event answers it: what a run woken by a delivery resumes
-- from, read with its takeover rather than one round trip after it.
SELECT w.*, e.run_id AS e_run_id, e.event_id AS e_event_id, e.wait_id AS e_wait_id,
       e.kind AS e_kind, e.payload AS e_payload, e.bind AS e_bind, e.verdict AS e_verdict,
       e.reason AS e_reason, e.detail AS e_detail, e.received_at AS e_received_at,
       e.delivered_by AS e_delivered_by, e.delivered_why AS e_delivered_why
FROM waits w LEFT JOIN events e ON e.run_id = %(run_id)s AND e.event_id = w.event_id
WHERE w.run_id = %(run_id)s AND w.state = 'consumed'
ORDER BY w.closed_at DESC NULLS LAST
LIMIT 1;

-- name: list_waits
SELECT w.*, q.request FROM waits w LEFT JOIN wait_requests q ON q.wait_id = w.wait_id
WHERE (%(run_id)s::text IS NULL OR w.run_id = %(run_id)s::text)
  AND (%(state)s::text IS NULL OR w.state = %(state)s::text)
  AND (%(tenant)s::text IS NULL OR w.run_id IN (SELECT t.run_id FROM run_tenants t
                                                WHERE t.tenant = %(tenant)s::text))
ORDER BY w.created_at, w.wait_id
LIMIT %(limit)s;

-- name: list_run_waits
-- One run's waits (its page, its takeover, a delivery by webhook): found by
-- the run's index, in a generic plan too. In list_waits, `run_id IS NULL OR
-- ...` leaves a generic plan nothing but a scan of every wait.
SELECT w.*, q.request FROM waits w LEFT JOIN wait_requests q ON q.wait_id = w.wait_id
WHERE w.run_id = %(run_id)s::text
  AND (%(state)s::text IS NULL OR w.state = %(state)s::text)
  AND (%(tenant)s::text IS NULL OR w.run_id IN (SELECT t.run_id FROM run_tenants t
                                                WHERE t.tenant = %(tenant)s::text))
ORDER BY w.created_at, w.wait_id
LIMIT %(limit)s;

-- name: close_wait
UPDATE waits SET state = %(state)s, closed_at = %(now)s
WHERE wait_id = %(wait_id)s AND state = 'open'
RETURNING wait_id;

-- name: suspend
UPDATE runs
SET status = 'waiting', wake_at = %(wake_at)s, lease_owner = NULL, lease_expires_at = NULL,
    updated_at = %(now)s
WHERE run_id = %(run_id)s AND epoch = %(epoch)s AND lease_owner = %(worker_id)s
  AND status = 'running';

-- name: wake
UPDATE runs SET status = 'running', wake_at = NULL, updated_at = %(now)s
WHERE run_id = %(run_id)s AND status = 'waiting'
RETURNING run_id;

-- name: count_bad_token
UPDATE waits
SET bad_tokens = bad_tokens + 1,
    locked_at = CASE WHEN %(lock)s::boolean THEN %(now)s ELSE locked_at END
WHERE wait_id = %(wait_id)s;

-- name: unlock_wait
UPDATE waits SET bad_tokens = 0, locked_at = NULL
WHERE wait_id = %(wait_id)s AND state = 'open';

-- name: get_event
SELECT * FROM events WHERE run_id = %(run_id)s AND event_id = %(event_id)s;

-- name: insert_event
-- A redelivered event that was rejected is judged again: its row takes the new verdict.
INSERT INTO events (run_id, event_id, wait_id, kind, payload, bind, verdict, reason,
                    detail, received_at, delivered_by, delivered_why)
VALUES (%(run_id)s, %(event_id)s, %(wait_id)s, %(kind)s, %(payload)s, %(bind)s,
        %(verdict)s, %(reason)s, %(detail)s, %(received_at)s, %(delivered_by)s,
        %(delivered_why)s)
ON CONFLICT (run_id, event_id) DO UPDATE
SET wait_id = excluded.wait_id, kind = excluded.kind, payload = excluded.payload,
    bind = excluded.bind, verdict = excluded.verdict, reason = excluded.reason,
    detail = excluded.detail, received_at = excluded.received_at,
    delivered_by = excluded.delivered_by, delivered_why = excluded.delivered_why;

-- name: accept_event
-- An accepted event in one statement (one round trip): stored (as
-- insert_event), its wait consumed, its run woken if it was waiting, and
-- idle workers told (NOTIFY, sent at commit) when it was and `tell` is set.
WITH stored AS (
    INSERT INTO events (run_id, event_id, wait_id, kind, payload, bind, verdict, reason,
                        detail, received_at, delivered_by, delivered_why)
    VALUES (%(run_id)s, %(event_id)s, %(wait_id)s, %(kind)s, %(payload)s, %(bind)s,
            %(verdict)s, %(reason)s, %(detail)s, %(received_at)s, %(delivered_by)s,
            %(delivered_why)s)
    ON CONFLICT (run_id, event_id) DO UPDATE
    SET wait_id = excluded.wait_id, kind = excluded.kind, payload = excluded.payload,
        bind = excluded.bind, verdict = excluded.verdict, reason = excluded.reason,
        detail = excluded.detail, received_at = excluded.received_at,
        delivered_by = excluded.delivered_by, delivered_why = excluded.delivered_why
    RETURNING 1
), consumed AS (
    UPDATE waits SET state = 'consumed', event_id = %(event_id)s, closed_at = %(received_at)s
    WHERE wait_id = %(wait_id)s AND state = 'open'
    RETURNING 1
), woken AS (
    UPDATE runs SET status = 'running', wake_at = NULL, updated_at = %(received_at)s
    WHERE run_id = %(run_id)s AND status = 'waiting'
    RETURNING 1
)
SELECT pg_notify('stead_work', current_schema()) FROM woken WHERE %(tell)s;

-- name: lease_woken
-- A run an accepted event just woke, leased to an idle worker of the
-- delivering process in the delivery's transaction, as a claim leases it.
UPDATE runs
SET epoch = epoch + 1, lease_owner = %(worker_id)s, lease_expires_at =
    COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8 + %(lease_seconds)s,
    updated_at = %(now)s
WHERE run_id = %(run_id)s AND status = 'running' AND lease_owner IS NULL AND queue IS NULL
RETURNING *;

-- name: list_events
SELECT * FROM events WHERE run_id = %(run_id)s
ORDER BY received_at, event_id LIMIT %(limit)s;

-- name: lock_state
-- Serialises compare-and-set on one task key, also while it has no row yet.
SELECT pg_advisory_xact_lock(1937007973, hashtext(current_schema() || ':' || %(task_key)s));

-- name: read_state
SELECT * FROM task_state WHERE task_key = %(task_key)s;

-- name: upsert_state
INSERT INTO task_state (task_key, version, data, run_id, updated_at)
VALUES (%(task_key)s, %(version)s, %(data)s, %(run_id)s, %(now)s)
ON CONFLICT (task_key) DO UPDATE
SET version = excluded.version, data = excluded.data, run_id = excluded.run_id,
    updated_at = excluded.updated_at;

-- name: insert_state_history
INSERT INTO task_state_history (task_key, version, data, run_id, at)
VALUES (%(task_key)s, %(version)s, %(data)s, %(run_id)s, %(now)s);

-- name: insert_state_change
-- A change made from outside any run: who made it and why (its run_id is empty).
INSERT INTO task_state_history (task_key, version, data, run_id, at, author, why)
VALUES (%(task_key)s, %(version)s, %(data)s, '', %(now)s, %(author)s, %(why)s);

-- name: get_meta
SELECT value FROM stead_meta WHERE key = %(key)s;

-- name: insert_intent
INSERT INTO intents (run_id, version, intent, author, why, at)
VALUES (%(run_id)s, %(version)s, %(intent)s, %(author)s, %(why)s, %(at)s);

-- name: set_intent_version
UPDATE runs SET intent_version = %(version)s WHERE run_id = %(run_id)s;

-- name: latest_intent
SELECT * FROM intents WHERE run_id = %(run_id)s ORDER BY version DESC LIMIT 1;

-- name: list_intents
SELECT * FROM intents WHERE run_id = %(run_id)s ORDER BY version;

-- name: end_stopped
-- A human ends a run stopped for them (a terminal status, with why).
UPDATE runs
SET status = %(status)s, error = %(error)s, epoch = epoch + 1, lease_owner = NULL,
    lease_expires_at = NULL, updated_at = %(now)s
WHERE run_id = %(run_id)s AND status = %(expect)s
RETURNING *;

-- name: set_epoch
-- A fork is created with its journal: epoch 1 says a claim must load it.
UPDATE runs SET epoch = %(epoch)s WHERE run_id = %(run_id)s;

-- name: state_version
SELECT * FROM task_state_history
WHERE task_key = %(task_key)s AND version = %(version)s;

-- name: insert_lineage
INSERT INTO lineage (run_id, parent_id, kind, at_seq, created_at)
VALUES (%(run_id)s, %(parent_id)s, %(kind)s, %(at_seq)s, %(created_at)s);

-- name: get_lineage
SELECT * FROM lineage WHERE run_id = %(run_id)s;

-- name: list_descendants
SELECT * FROM lineage WHERE parent_id = %(run_id)s ORDER BY created_at, run_id;

-- name: search_runs
-- The dashboard's runs list: each filter applies when given. :prefix matches
-- the start of a run id, :pattern a piece of its task id or workflow (LIKE
-- patterns whose wildcards the caller escaped). The page after a cursor (:before_at,
-- :before_id) is the runs strictly older in (created_at, run_id) order.
SELECT runs.*, t.tenant FROM runs LEFT JOIN run_tenants t ON t.run_id = runs.run_id
WHERE (%(status)s::text IS NULL OR runs.status = %(status)s::text)
  AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s::text)
  AND (%(version)s::integer IS NULL OR version = %(version)s::integer)
  AND (%(task_id)s::text IS NULL OR task_id = %(task_id)s::text)
  AND (%(queue)s::text IS NULL OR runs.queue = %(queue)s::text)
  AND (%(tenant)s::text IS NULL OR t.tenant = %(tenant)s::text)
  AND (%(since)s::double precision IS NULL OR runs.created_at >= %(since)s::double precision)
  AND (%(until)s::double precision IS NULL OR runs.created_at < %(until)s::double precision)
  AND (%(prefix)s::text IS NULL OR runs.run_id LIKE %(prefix)s::text ESCAPE '\'
       OR runs.run_id LIKE %(shown)s::text ESCAPE '\'
       OR task_id LIKE %(pattern)s::text ESCAPE '\' OR workflow LIKE %(pattern)s::text ESCAPE '\')
  AND (%(before_at)s::double precision IS NULL OR runs.created_at < %(before_at)s::double precision
       OR (runs.created_at = %(before_at)s::double precision AND runs.run_id < %(before_id)s::text))
ORDER BY runs.created_at DESC, runs.run_id DESC
LIMIT %(limit)s;

-- name: search_runs_of_status
-- search_runs of one status, by the index on (status, created_at): in search_runs,
-- `status IS NULL OR ...` leaves the planner no index but the runs' order.
SELECT runs.*, t.tenant FROM runs LEFT JOIN run_tenants t ON t.run_id = runs.run_id
WHERE runs.status = %(status)s::text
  AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s::text)
  AND (%(version)s::integer IS NULL OR version = %(version)s::integer)
  AND (%(task_id)s::text IS NULL OR task_id = %(task_id)s::text)
  AND (%(queue)s::text IS NULL OR runs.queue = %(queue)s::text)
  AND (%(tenant)s::text IS NULL OR t.tenant = %(tenant)s::text)
  AND (%(since)s::double precision IS NULL OR runs.created_at >= %(since)s::double precision)
  AND (%(until)s::double precision IS NULL OR runs.created_at < %(until)s::double precision)
  AND (%(prefix)s::text IS NULL OR runs.run_id LIKE %(prefix)s::text ESCAPE '\'
       OR runs.run_id LIKE %(shown)s::text ESCAPE '\'
       OR task_id LIKE %(pattern)s::text ESCAPE '\' OR workflow LIKE %(pattern)s::text ESCAPE '\')
  AND (%(before_at)s::double precision IS NULL OR runs.created_at < %(before_at)s::double precision
       OR (runs.created_at = %(before_at)s::double precision AND runs.run_id < %(before_id)s::text))
ORDER BY runs.created_at DESC, runs.run_id DESC
LIMIT %(limit)s;

-- name: journal_page
-- A run's records from seq :start on, in seq order: one page of its timeline.
SELECT seq, addr, attempt, kind, name, digest, status, payload, epoch, at, arguments
FROM journal WHERE run_id = %(run_id)s AND seq >= %(start)s ORDER BY seq LIMIT %(limit)s;

-- name: journal_size
SELECT COUNT(*) AS records, COALESCE(MAX(seq), -1) AS last_seq
FROM journal WHERE run_id = %(run_id)s;

-- name: journal_summaries
-- The records a run page sums up over the whole run (its effects, model
-- calls and workspaces), without the rest of a long journal.
SELECT seq, addr, attempt, kind, name, digest, status, payload, epoch, at, arguments
FROM journal WHERE run_id = %(run_id)s AND kind IN ('effect', 'llm', 'workspace') ORDER BY seq;

-- name: journal_model_calls
-- The records a run's conversation is read from: its answered model calls,
-- and its steps, among which those holding an SDK's model calls.
SELECT seq, addr, attempt, kind, name, digest, status, payload, epoch, at, arguments
FROM journal WHERE run_id = %(run_id)s AND kind IN ('llm', 'step') AND status = 'ok' ORDER BY seq;

-- name: count_runs_by_status
SELECT status, COUNT(*) AS runs FROM runs GROUP BY status;

-- name: count_tenant_runs_by_status
-- One tenant's runs in each status (run_tenants keeps each run's status).
SELECT status, COUNT(*) AS runs FROM run_tenants WHERE tenant = %(tenant)s GROUP BY status;

-- name: state_since
-- A task's versions written after :version, oldest first: what changed the
-- world since a run last saw it, and who.
SELECT * FROM task_state_history WHERE task_key = %(task_key)s AND version > %(version)s
ORDER BY version LIMIT %(limit)s;

-- name: list_state_history
-- A task's facts, newest version first.
SELECT * FROM task_state_history WHERE task_key = %(task_key)s
ORDER BY version DESC LIMIT %(limit)s;

-- name: insert_operator_action
-- Twice is once: the id is the caller's.
INSERT INTO operator_actions (action_id, run_id, action, target, author, why, outcome,
                              detail, at)
VALUES (%(action_id)s, %(run_id)s, %(action)s, %(target)s, %(author)s, %(why)s,
        %(outcome)s, %(detail)s, %(at)s)
ON CONFLICT (action_id) DO NOTHING;

-- name: list_operator_actions
SELECT * FROM operator_actions WHERE run_id = %(run_id)s
ORDER BY at, action_id LIMIT %(limit)s;

-- name: heartbeat
-- A worker says it is alive and serves `code` (as `role`);
-- `stead_version` and `schema_version` say which release its code is.
INSERT INTO worker_hosts (worker_id, code, role, started_at, seen_at, policy_version,
                          live_until, stead_version, schema_version)
VALUES (%(worker_id)s, %(code)s, %(role)s, %(now)s, %(now)s, %(policy_version)s,
        %(live_until)s, %(stead_version)s, %(schema_version)s)
ON CONFLICT (worker_id, code, role) DO UPDATE
SET seen_at = excluded.seen_at, stopped_at = NULL, policy_version = excluded.policy_version,
    live_until = excluded.live_until, stead_version = excluded.stead_version,
    schema_version = excluded.schema_version;

-- name: live_policies
-- The policy versions (NULL: none) the live workers serving `code` run: not
-- stopped, and heard from recently enough that they count as alive.
SELECT DISTINCT policy_version FROM worker_hosts
WHERE code = %(code)s AND stopped_at IS NULL AND live_until > %(now)s;

-- name: host_stopped
-- A worker stopped cleanly: it serves nothing from now on.
UPDATE worker_hosts SET seen_at = %(now)s, stopped_at = %(now)s WHERE worker_id = %(worker_id)s;

-- name: worker_hosts
-- Every worker's last heartbeat per version it serves, the latest first.
SELECT * FROM worker_hosts ORDER BY seen_at DESC, worker_id, code LIMIT %(limit)s;

-- name: forget_hosts
-- Heartbeats older than %(before)s are history, not news: dropped.
DELETE FROM worker_hosts WHERE seen_at < %(before)s;

-- name: stranded_runs
-- Runnable runs no worker has served (hosted or migrated) since %(since)s, and
-- that have waited for one at least as long; `hosted_at` is the last time one did.
-- The workflow filter comes before the LIMIT: a filtered page is never short.
SELECT runs.*, h.seen_at AS hosted_at FROM runs
LEFT JOIN (SELECT code, MAX(seen_at) AS seen_at FROM worker_hosts GROUP BY code) AS h
  ON h.code = runs.workflow || '@' || runs.version::text
WHERE (runs.status = 'pending'
       OR (runs.status = 'running' AND (runs.lease_expires_at IS NULL OR runs.lease_expires_at <=
           COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8))
       OR (runs.status = 'waiting' AND runs.wake_at <= %(now)s))
  AND (h.seen_at IS NULL OR h.seen_at <= %(since)s)
  AND runs.updated_at <= %(since)s
  AND (%(workflow)s::text IS NULL OR runs.workflow = %(workflow)s::text)
ORDER BY runs.created_at
LIMIT %(limit)s;

-- name: list_migrations
SELECT * FROM migrations WHERE run_id = %(run_id)s ORDER BY number;

-- name: insert_migration
INSERT INTO migrations (run_id, number, from_version, to_version, old_input, new_input,
                        records_before, records_after, author, at, epoch)
VALUES (%(run_id)s, %(number)s, %(from_version)s, %(to_version)s, %(old_input)s, %(new_input)s,
        %(records_before)s, %(records_after)s, %(author)s, %(at)s, %(epoch)s);

-- name: archive_journal
INSERT INTO journal_archive (run_id, migration, seq, addr, attempt, kind, name, digest,
                             status, payload, epoch, at, arguments)
SELECT run_id, %(migration)s, seq, addr, attempt, kind, name, digest, status, payload, epoch, at,
       arguments
FROM journal WHERE run_id = %(run_id)s;

-- name: delete_journal
-- Only ever after archive_journal (a migration) or of a migrated journal (a
-- rollback, which puts the archived one back).
DELETE FROM journal WHERE run_id = %(run_id)s;

-- name: restore_journal
INSERT INTO journal (run_id, seq, addr, attempt, kind, name, digest, status, payload,
                     epoch, at, arguments)
SELECT run_id, seq, addr, attempt, kind, name, digest, status, payload, epoch, at,
       arguments
FROM journal_archive WHERE run_id = %(run_id)s AND migration = %(migration)s;

-- name: set_code
-- The run goes on under another version and input (a migration or its rollback):
-- a new epoch fences out any former holder; a run stopped as incompatible
-- becomes claimable.
UPDATE runs
SET version = %(version)s, input = %(input)s, epoch = epoch + 1, lease_owner = NULL,
    lease_expires_at = NULL, error = CASE WHEN status = 'incompatible_checkpoint'
                                          THEN NULL ELSE error END,
    status = CASE WHEN status = 'incompatible_checkpoint' THEN 'running' ELSE status END,
    updated_at = %(now)s
WHERE run_id = %(run_id)s
RETURNING *;

-- name: set_code_fenced
-- The holder migrates the run it claimed: it keeps its lease and epoch.
UPDATE runs SET version = %(version)s, input = %(input)s, updated_at = %(now)s
WHERE run_id = %(run_id)s AND epoch = %(epoch)s AND lease_owner = %(worker_id)s
  AND status = 'running'
RETURNING *;

-- name: mark_rolled_back
UPDATE migrations SET rolled_back_at = %(now)s, rolled_back_by = %(author)s
WHERE run_id = %(run_id)s AND number = %(number)s;

-- name: import_run
INSERT INTO runs (run_id, workflow, version, task_id, status, input, result, error, epoch,
                  created_at, updated_at, wake_at)
VALUES (%(run_id)s, %(workflow)s, %(version)s, %(task_id)s, %(status)s, %(input)s, %(result)s, %(error)s, %(epoch)s,
        %(created_at)s, %(updated_at)s, %(wake_at)s)
ON CONFLICT DO NOTHING
RETURNING *;

-- name: import_wait
INSERT INTO waits (wait_id, run_id, addr, kind, bind, schema, token_hash, task_key,
                   expires_at, state, event_id, created_at, closed_at)
VALUES (%(wait_id)s, %(run_id)s, %(addr)s, %(kind)s, %(bind)s, %(schema)s, %(token_hash)s, %(task_key)s,
        %(expires_at)s, %(state)s, %(event_id)s, %(created_at)s, %(closed_at)s);

-- name: insert_resume
-- One resume record on its own (a person's migration or rollback).
INSERT INTO resumes (run_id, epoch, worker_id, at, from_seq, code_version, reused, detail)
VALUES (%(run_id)s, %(epoch)s, %(worker_id)s, %(at)s, %(from_seq)s, %(code_version)s,
        %(reused)s, %(detail)s)
ON CONFLICT (run_id, epoch) DO UPDATE SET detail = EXCLUDED.detail;

-- name: load_archive
-- A run's journal as it was before migration %(migration)s.
SELECT seq, addr, attempt, kind, name, digest, status, payload, epoch, at, arguments
FROM journal_archive WHERE run_id = %(run_id)s AND migration = %(migration)s ORDER BY seq;

-- name: blobs_present
SELECT sha256 FROM workspace_blobs WHERE sha256 = ANY(%(hashes)s);

-- name: insert_blob
INSERT INTO workspace_blobs (sha256, size, data) VALUES (%(sha256)s, %(size)s, %(data)s)
ON CONFLICT (sha256) DO NOTHING;

-- name: get_blobs
SELECT sha256, data FROM workspace_blobs WHERE sha256 = ANY(%(hashes)s);

-- name: insert_snapshot
INSERT INTO workspace_snapshots (run_id, name, seq, epoch, worker_id, tree, manifest, git,
                                 files, bytes, stored_bytes, blobs, source, at)
VALUES (%(run_id)s, %(name)s, %(seq)s, %(epoch)s, %(worker_id)s, %(tree)s, %(manifest)s,
        %(git)s, %(files)s, %(bytes)s, %(stored_bytes)s, %(blobs)s, %(source)s, %(at)s);

-- name: list_snapshots
SELECT * FROM workspace_snapshots WHERE run_id = %(run_id)s ORDER BY seq;

-- name: get_snapshot
SELECT * FROM workspace_snapshots WHERE run_id = %(run_id)s AND seq = %(seq)s;

-- name: set_run_links
-- A child run's parent and a run's deadline (schema 13), set as it is created.
UPDATE runs SET parent_id = %(parent_id)s, deadline = %(deadline)s WHERE run_id = %(run_id)s;

-- name: children
-- Every run `run.child` started from this one, live or ended, oldest first.
SELECT * FROM runs WHERE parent_id = %(run_id)s ORDER BY created_at, run_id LIMIT %(limit)s;

-- name: live_children
SELECT * FROM runs
WHERE parent_id = %(run_id)s
  AND status NOT IN ('completed', 'failed', 'cancelled', 'revalidation_failed')
ORDER BY created_at, run_id;

-- name: request_cancel
-- The holder ends the run as cancelled at its next call boundary.
UPDATE runs SET cancel_requested = %(now)s
WHERE run_id = %(run_id)s AND status = 'running' AND cancel_requested IS NULL;

-- name: cancel_requests
-- Of these runs, those someone asked to cancel.
SELECT run_id FROM runs
WHERE run_id = ANY(%(run_ids)s::text[])
  AND status = 'running' AND cancel_requested IS NOT NULL;

-- name: get_schedule
SELECT * FROM schedules WHERE name = %(name)s;

-- name: insert_schedule
INSERT INTO schedules (name, cron, next_tick, updated_at)
VALUES (%(name)s, %(cron)s, %(next_tick)s, %(now)s)
ON CONFLICT DO NOTHING;

-- name: advance_schedule
-- Compare-and-set: a concurrent firing waits for the row lock, then finds
-- next_tick moved and changes nothing.
UPDATE schedules SET cron = %(cron)s, next_tick = %(next_tick)s, updated_at = %(now)s
WHERE name = %(name)s AND next_tick = %(expect)s;

-- name: list_schedules
SELECT * FROM schedules ORDER BY name;

-- name: prunable_runs
-- Finished runs last changed before :cutoff (of :run_ids, if given), oldest
-- first: never a live run, never one whose parent is live (it has still to
-- read the result), never one with an effect whose outcome is unknown (its
-- last phase intent, accepted or unknown, with no outcome after it). Locked,
-- so a retry cannot revive one while it is deleted.
SELECT run_id FROM runs
WHERE status IN ('completed', 'failed', 'cancelled', 'revalidation_failed')
  AND updated_at < %(cutoff)s
  AND (%(run_ids)s::text[] IS NULL OR run_id = ANY(%(run_ids)s::text[]))
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
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: prunable_runs_of
-- prunable_runs of the :run_ids given, found by their key: in prunable_runs,
-- `run_ids IS NULL OR ...` leaves the planner nothing but a scan of the
-- runs, made again by each batch a prune deletes, under its write lock.
-- The journal is read between the least and the greatest of the ids too
-- (:id_min, :id_max), which the planner prunes the day partitions by: under
-- `runs.run_id` alone each check plans or opens every day's (with a year of
-- days kept, 30 to 70 ms a plan, and 3.5 ms a batch of 100 planned once,
-- against 1.3 ms). A range, not the ids: `= ANY(ids)` would be an index
-- condition, one descent per id for each run checked.
SELECT run_id FROM runs
WHERE status IN ('completed', 'failed', 'cancelled', 'revalidation_failed')
  AND updated_at < %(cutoff)s
  AND run_id = ANY(%(run_ids)s::text[])
  AND (parent_id IS NULL OR NOT EXISTS (
        SELECT 1 FROM runs AS p WHERE p.run_id = runs.parent_id
          AND p.status NOT IN ('completed', 'failed', 'cancelled', 'revalidation_failed')))
  AND NOT EXISTS (
        SELECT 1 FROM journal AS j
        WHERE j.run_id = runs.run_id AND j.run_id BETWEEN %(id_min)s AND %(id_max)s
          AND j.kind = 'effect' AND j.status IN ('intent', 'accepted', 'unknown')
          AND NOT EXISTS (
                SELECT 1 FROM journal AS k
                WHERE k.run_id = j.run_id AND k.run_id BETWEEN %(id_min)s AND %(id_max)s
                  AND k.addr = j.addr AND k.kind = 'effect'
                  AND k.seq > j.seq AND k.status IN ('ok', 'error', 'reconciled')))
ORDER BY updated_at, run_id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: delete_journals
DELETE FROM journal WHERE run_id = ANY(%(run_ids)s::text[]);

-- name: delete_resumes
DELETE FROM resumes WHERE run_id = ANY(%(run_ids)s::text[]);

-- name: delete_wait_requests
DELETE FROM wait_requests WHERE wait_id IN (
    SELECT wait_id FROM waits WHERE run_id = ANY(%(run_ids)s::text[]));

-- name: delete_waits
DELETE FROM waits WHERE run_id = ANY(%(run_ids)s::text[]);

-- name: delete_events
DELETE FROM events WHERE run_id = ANY(%(run_ids)s::text[]);

-- name: delete_intents
DELETE FROM intents WHERE run_id = ANY(%(run_ids)s::text[]);

-- name: delete_runs
DELETE FROM runs WHERE run_id = ANY(%(run_ids)s::text[]);

-- name: child_status
-- A child's status as a parent suspends, share-locked until the commit: a
-- child ending meanwhile either committed first (read here: the parent does
-- not suspend) or waits for the suspension and then its trigger finds the
-- parent waiting and wakes it. Without the lock its trigger could run
-- before the suspension, find the parent running, and the wake be lost.
SELECT status FROM runs WHERE run_id = %(run_id)s FOR SHARE;

-- name: delete_migrations
DELETE FROM migrations WHERE run_id = ANY(%(run_ids)s::text[]);

-- name: delete_journal_archive
DELETE FROM journal_archive WHERE run_id = ANY(%(run_ids)s::text[]);

-- name: delete_lineage
-- A pruned run's links go with it, also those to a fork of it that lives on.
DELETE FROM lineage
WHERE run_id = ANY(%(run_ids)s::text[]) OR parent_id = ANY(%(run_ids)s::text[]);

-- name: delete_snapshots
-- The snapshots' blobs stay: other snapshots may share them.
DELETE FROM workspace_snapshots WHERE run_id = ANY(%(run_ids)s::text[]);

-- name: delete_operator_actions
DELETE FROM operator_actions WHERE run_id = ANY(%(run_ids)s::text[]);

-- name: find_live_dedup
SELECT * FROM runs
WHERE queue = %(queue)s AND dedup_key = %(dedup_key)s
  AND status NOT IN ('completed', 'failed', 'cancelled', 'revalidation_failed');

-- name: insert_runs
-- A batch of new runs, runs a JSON array of objects. A run that conflicts (a
-- live run owns its task id or its queue's dedup key, also one earlier in the
-- batch) is neither inserted nor returned: the flow then reads the one that won.
INSERT INTO runs (run_id, workflow, version, task_id, status, input, epoch,
                  created_at, updated_at, queue, priority, dedup_key)
SELECT r.run_id, r.workflow, r.version, r.task_id, 'pending', r.input, 0, r.created_at,
       r.created_at, r.queue, r.priority, r.dedup_key
FROM json_to_recordset(%(runs)s::json)
    AS r (run_id text, workflow text, version int, task_id text, input text,
          created_at float8, queue text, priority int, dedup_key text)
ON CONFLICT DO NOTHING
RETURNING *;

-- name: lock_queue
-- Claims of one queue take turns (held until commit), so the counts a claim
-- reads after it stay true until its leases commit: no two workers fill the
-- same room.
SELECT pg_advisory_xact_lock(1937007974, hashtext(current_schema() || ':' || %(queue)s));

-- name: ready_queues
-- Which of the queues named (%(queues)s) have a run a claim could take:
-- not leased, of hosted code, not excluded, runnable or a due sleeper. In
-- one read however many queues an app declares: the queues with live
-- runs found by a skip scan of runs_queued and runs_queue_waking (one index
-- probe per queue that has runs), each named one then checked. A queue
-- with no run costs nothing here, where a read of each would cost a round
-- trip each, at every claim.
WITH RECURSIVE live (queue) AS (
    SELECT MIN(queue) FROM runs WHERE queue IS NOT NULL AND status IN ('pending', 'running')
    UNION ALL
    SELECT (SELECT MIN(r.queue) FROM runs AS r
            WHERE r.queue > live.queue AND r.status IN ('pending', 'running'))
    FROM live WHERE live.queue IS NOT NULL
), asleep (queue) AS (
    SELECT MIN(queue) FROM runs WHERE queue IS NOT NULL AND status = 'waiting'
    UNION ALL
    SELECT (SELECT MIN(r.queue) FROM runs AS r
            WHERE r.queue > asleep.queue AND r.status = 'waiting')
    FROM asleep WHERE asleep.queue IS NOT NULL
)
SELECT q.queue FROM (SELECT queue FROM live UNION SELECT queue FROM asleep) AS q
WHERE q.queue = ANY(%(queues)s::text[])
  AND (EXISTS (
        SELECT 1 FROM runs
        WHERE queue = q.queue AND status IN ('pending', 'running')
          AND (lease_expires_at IS NULL OR lease_expires_at <=
              COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8)
          AND (workflow || '@' || version) = ANY(%(hosted)s::text[])
          AND NOT (run_id = ANY(%(exclude)s::text[])))
       OR EXISTS (
        SELECT 1 FROM runs
        WHERE queue = q.queue AND status = 'waiting' AND wake_at <= %(now)s
          AND (workflow || '@' || version) = ANY(%(hosted)s::text[])
          AND NOT (run_id = ANY(%(exclude)s::text[]))));

-- name: queue_load
-- What a queue's limits are measured against: its runs leased now (all, and
-- this worker's), and its runs first claimed since since (its rate window).
SELECT
    (SELECT count(*) FROM runs
     WHERE queue = %(queue)s AND lease_owner IS NOT NULL AND lease_expires_at >
         COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8
       AND status = 'running') AS active,
    (SELECT count(*) FROM runs
     WHERE queue = %(queue)s AND lease_owner = %(worker_id)s AND lease_expires_at >
         COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8
       AND status = 'running') AS mine,
    (SELECT count(*) FROM runs
     WHERE queue = %(queue)s AND started_at IS NOT NULL AND started_at > %(since)s) AS recent;

-- name: claim_queue
-- Lease up to limit runs of the queue (the room its limits leave), lowest
-- priority number first, then oldest (each with the end of a lease ended
-- early under the epoch before, as in claim); due sleepers of the queue come from
-- runs_queue_waking. A run's first claim sets started_at, which the rate
-- counts. SKIP LOCKED as in claim: a run a fenced write holds is not waited on.
WITH runnable AS (
    SELECT run_id, priority, created_at FROM runs
    WHERE queue = %(queue)s AND status IN ('pending', 'running')
      AND (lease_expires_at IS NULL OR lease_expires_at <=
          COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8)
      AND (workflow || '@' || version) = ANY(%(hosted)s::text[])
      AND NOT (run_id = ANY(%(exclude)s::text[]))
    ORDER BY priority, created_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), due AS (
    SELECT run_id, priority, created_at FROM runs
    WHERE queue = %(queue)s AND status = 'waiting' AND wake_at <= %(now)s
      AND (workflow || '@' || version) = ANY(%(hosted)s::text[])
      AND NOT (run_id = ANY(%(exclude)s::text[]))
    ORDER BY wake_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT run_id FROM (SELECT * FROM runnable UNION ALL SELECT * FROM due) AS candidates
    ORDER BY priority, created_at
    LIMIT %(limit)s
)
UPDATE runs
SET epoch = runs.epoch + 1, lease_owner = %(worker_id)s, lease_expires_at =
    COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8 + %(lease_seconds)s,
    status = 'running', wake_at = NULL, updated_at = %(now)s,
    started_at = COALESCE(runs.started_at, %(now)s)
FROM picked
WHERE runs.run_id = picked.run_id
RETURNING runs.*,
    (SELECT e.until FROM lease_ends AS e
     WHERE e.run_id = runs.run_id AND e.epoch = runs.epoch - 1) AS prior_lease_until;

-- == rejected events: how many are kept (store/_rejections.py) ==
-- name: trim_rejected
-- The run's rejected events past its newest `keep` (accepted ones are never
-- touched). The delivery holds the run's lock.
DELETE FROM events
WHERE run_id = %(run_id)s AND event_id IN (
    SELECT event_id FROM events WHERE run_id = %(run_id)s AND verdict = 'rejected'
    ORDER BY received_at DESC, event_id DESC OFFSET %(keep)s);

-- name: lock_rejected_unknown
-- Deliveries to runs that do not exist have no run to lock: their trims take
-- turns (held until commit), so two never delete the same rows at once.
SELECT pg_advisory_xact_lock(1937007975, hashtext(current_schema()));

-- name: trim_rejected_unknown
-- Events to runs that do not exist past the newest 1000 of them all
-- (`_rejections.UNKNOWN_RUNS`). The count is written here, not passed: a
-- statement with no parameters is planned once per connection, while with
-- the OFFSET a parameter the planner chose a plan of its own for each run,
-- planning every day's partition (50 ms a rejected delivery with a year of
-- days kept, against 3.5 ms to run it).
DELETE FROM events
WHERE (run_id, event_id) IN (
    SELECT run_id, event_id FROM events WHERE reason = 'unknown_run'
    ORDER BY received_at DESC, run_id DESC, event_id DESC OFFSET 1000);

-- name: tally_rejected
INSERT INTO rejected_tally (run_id, dropped, last_at) VALUES (%(run_id)s, %(dropped)s, %(now)s)
ON CONFLICT (run_id) DO UPDATE
SET dropped = rejected_tally.dropped + excluded.dropped, last_at = excluded.last_at;

-- name: get_rejected_tally
SELECT dropped FROM rejected_tally WHERE run_id = %(run_id)s;

-- name: prune_rejected
-- Up to `limit` rejected events received before `cutoff`, of any run.
DELETE FROM events
WHERE (run_id, event_id) IN (
    SELECT run_id, event_id FROM events
    WHERE verdict = 'rejected' AND received_at < %(cutoff)s
    LIMIT %(limit)s);

-- name: count_old_rejected
SELECT COUNT(*) AS n FROM events WHERE verdict = 'rejected' AND received_at < %(cutoff)s;

-- name: prune_rejected_tally
DELETE FROM rejected_tally WHERE last_at < %(cutoff)s;

-- name: delete_rejected_tally
DELETE FROM rejected_tally WHERE run_id = ANY(%(run_ids)s::text[]);

-- durable streams (see store/_streams.py) ------------------------------------
-- name: append_stream_entry
-- The common append in one statement that commits on its own: only while
-- the fence holds (the run row locked, as the fence query does), not after
-- the stream's closed entry, not twice with one key. No row: one of those
-- (the flow then finds out which).
WITH fenced AS (
    SELECT 1 FROM runs
    WHERE run_id = %(run_id)s AND epoch = %(epoch)s AND lease_owner = %(worker_id)s
      AND status = 'running'
    FOR NO KEY UPDATE
), last AS (
    SELECT pos, kind FROM stream_entries WHERE run_id = %(run_id)s AND name = %(name)s
    ORDER BY pos DESC LIMIT 1
)
INSERT INTO stream_entries (run_id, name, pos, entry_key, kind, value, call_addr, call_try,
                            epoch, at)
SELECT %(run_id)s, %(name)s, COALESCE((SELECT pos FROM last), 0) + 1, %(entry_key)s,
       %(kind)s, %(value)s, %(call_addr)s, %(call_try)s, %(epoch)s, %(at)s
FROM fenced
WHERE COALESCE((SELECT kind FROM last), '') <> 'closed'
  AND NOT EXISTS (SELECT 1 FROM stream_entries WHERE run_id = %(run_id)s
                  AND name = %(name)s AND entry_key = %(entry_key)s)
RETURNING pos;

-- name: stream_entry_by_key
SELECT pos FROM stream_entries
WHERE run_id = %(run_id)s AND name = %(name)s AND entry_key = %(entry_key)s;

-- name: last_stream_entry
SELECT pos, kind FROM stream_entries
WHERE run_id = %(run_id)s AND name = %(name)s
ORDER BY pos DESC LIMIT 1;

-- name: supersede_stream_call
-- The entries of a call's earlier tries, not yet superseded, marked so.
UPDATE stream_entries SET superseded = 1
WHERE run_id = %(run_id)s AND name = %(name)s AND call_addr = %(call_addr)s
  AND call_try <> %(call_try)s AND superseded = 0
RETURNING pos;

-- name: insert_stream_entry
INSERT INTO stream_entries (run_id, name, pos, entry_key, kind, value, call_addr, call_try,
                            epoch, at)
VALUES (%(run_id)s, %(name)s, %(pos)s, %(entry_key)s, %(kind)s, %(value)s,
        %(call_addr)s, %(call_try)s, %(epoch)s, %(at)s);

-- name: read_stream
SELECT run_id, name, pos, kind, value, superseded, at FROM stream_entries
WHERE run_id = %(run_id)s AND name = %(name)s AND pos > %(after)s
ORDER BY pos LIMIT %(limit)s;

-- name: delete_streams
DELETE FROM stream_entries WHERE run_id = ANY(%(run_ids)s::text[]);

-- name: delete_payload_keys
DELETE FROM payload_keys WHERE scope = ANY(%(run_ids)s::text[]);

-- == dead lease holders: leases whose holder is surely gone (store/_holders.py) ==
-- name: record_process
INSERT INTO worker_processes (worker_id, machine, pid, started, at)
VALUES (%(worker_id)s, %(machine)s, %(pid)s, %(started)s, %(now)s)
ON CONFLICT (worker_id) DO UPDATE
SET machine = excluded.machine, pid = excluded.pid, started = excluded.started, at = excluded.at,
    locks = FALSE;

-- name: present
-- The worker took its presence lock (again): one take more. Its row is
-- written whole, in case it was forgotten meanwhile.
INSERT INTO worker_processes (worker_id, machine, pid, started, at, locks, presence_taken)
VALUES (%(worker_id)s, %(machine)s, %(pid)s, %(started)s, %(now)s, TRUE, 1)
ON CONFLICT (worker_id) DO UPDATE
SET machine = excluded.machine, pid = excluded.pid, started = excluded.started, at = excluded.at,
    locks = TRUE, presence_taken = worker_processes.presence_taken + 1;

-- name: forget_process
DELETE FROM worker_processes WHERE worker_id = %(worker_id)s;

-- name: lease_holders
-- The processes of the other workers that hold leases not ended yet (from
-- the few process rows, each looked up in runs_lease_owner); lock_free: the
-- holder took its presence lock (present) and no session holds it now: it is
-- gone, or its session dropped (a claimer waits for a grace period to tell).
SELECT p.worker_id, p.machine, p.pid, p.started, p.presence_taken,
    (p.locks AND NOT EXISTS (
        SELECT 1 FROM pg_locks AS l
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND l.classid = 1937007980
          AND l.objid = hashtext(current_schema() || '/' || p.worker_id)::oid)) AS lock_free
FROM worker_processes AS p
WHERE p.worker_id <> %(worker_id)s AND EXISTS (
    SELECT 1 FROM runs
    WHERE runs.lease_owner = p.worker_id AND runs.status = 'running'
      AND runs.lease_expires_at >
          COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8)
LIMIT %(limit)s;

-- name: worker_liveness
-- Every recorded worker process, for `Store.worker_liveness` (doctor), with
-- its count of presence takes, whether it took the lock since it recorded its
-- process, and whether the lock is free now: the lock_free of lease_holders,
-- which claimers act on (change the two together). Then the workers whose
-- heartbeats say they did not stop cleanly but whose process is not recorded
-- (machine NULL): end_leases_of_gone forgets the process of a holder gone.
SELECT p.worker_id, p.machine, p.pid, p.started, p.presence_taken, p.locks,
    (p.locks AND NOT EXISTS (
        SELECT 1 FROM pg_locks AS l
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND l.classid = 1937007980
          AND l.objid = hashtext(current_schema() || '/' || p.worker_id)::oid)) AS lock_free
FROM worker_processes AS p
UNION ALL
SELECT h.worker_id, NULL, NULL, NULL, 0, FALSE, FALSE FROM (
    SELECT DISTINCT worker_id FROM worker_hosts WHERE stopped_at IS NULL) AS h
WHERE NOT EXISTS (SELECT 1 FROM worker_processes AS p WHERE p.worker_id = h.worker_id)
ORDER BY 1;

-- name: forget_gone_processes
-- Process rows of workers whose heartbeats were forgotten (forget_hosts) are
-- history too. Only rows recorded before %(before)s (a day ago): a worker records
-- its process just before its first heartbeat, and must not lose it meanwhile.
DELETE FROM worker_processes
WHERE at < %(before)s AND worker_id NOT IN (SELECT worker_id FROM worker_hosts);

-- name: end_leases_of_gone
-- The holder's process has ended (told on its machine): its leases end now,
-- so the next claim takes its runs (the epoch the claim bumps fences anything
-- it might have left to write); idle workers are woken as by a release. Only
-- if its process row is still the one judged: a worker that recorded another
-- process since is another life. One row if any lease ended.
WITH ended AS (
    UPDATE runs SET lease_expires_at =
        COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8
    WHERE status = 'running' AND lease_owner = %(worker_id)s AND lease_expires_at >
        COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8
      AND EXISTS (
        SELECT 1 FROM worker_processes AS p
        WHERE p.worker_id = %(worker_id)s AND p.machine = %(machine)s AND p.pid = %(pid)s
          AND p.started = %(started)s)
    RETURNING run_id
)
SELECT pg_notify('stead_work', current_schema()) FROM (SELECT 1 FROM ended LIMIT 1) AS any_ended;

-- name: end_leases_of_absent
-- The holder's presence lock stayed free, not taken again, for the grace
-- period: it is taken for dead, its leases end now. Judged again here: only if
-- the lock is still free and its takes still number %(taken)s. Each lease ended
-- is kept in lease_ends with when it would have run out: the holder may be
-- alive and cut off, still sending. One row if any lease ended.
WITH old AS (
    SELECT run_id, lease_expires_at FROM runs
    WHERE status = 'running' AND lease_owner = %(worker_id)s AND lease_expires_at >
        COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8
      AND EXISTS (
        SELECT 1 FROM worker_processes AS p
        WHERE p.worker_id = %(worker_id)s AND p.locks AND p.presence_taken = %(taken)s
          AND NOT EXISTS (
            SELECT 1 FROM pg_locks AS l
            WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
              AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
              AND l.classid = 1937007980
              AND l.objid = hashtext(current_schema() || '/' || p.worker_id)::oid))
    FOR UPDATE
), ended AS (
    UPDATE runs SET lease_expires_at =
        COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8
    FROM old WHERE runs.run_id = old.run_id
    RETURNING runs.run_id, runs.epoch, old.lease_expires_at AS until
), kept AS (
    INSERT INTO lease_ends (run_id, epoch, until) SELECT run_id, epoch, until FROM ended
    ON CONFLICT (run_id) DO UPDATE SET epoch = excluded.epoch, until = excluded.until
)
SELECT pg_notify('stead_work', current_schema()) FROM (SELECT 1 FROM ended LIMIT 1) AS any_ended;

-- name: presence_lock
-- Held by a worker for as long as its session lives (on a connection of its
-- own, see postgres/presence.py): key (1937007980, the schema and worker id).
SELECT pg_try_advisory_lock(1937007980, hashtext(current_schema() || '/' || %(worker_id)s))
    AS held;

-- name: presence_held
-- Whether this session still holds its presence lock: a round trip, which
-- fails once the connection dropped. The lock is only ever kept on a session
-- that took it (postgres/presence.py) and never unlocked there, and a session
-- lock lives as long as its session, so a live session holds it. Not read
-- from pg_locks: every worker asks four times a second, and pg_locks visits
-- every backend and every lock of the server, a cost growing with the fleet.
SELECT TRUE AS held;

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
   OR (status = 'running' AND (lease_expires_at IS NULL OR lease_expires_at <= COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8))
   OR (status = 'waiting' AND wake_at <= %(now)s)
GROUP BY COALESCE(queue, '');

-- name: gauge_waits
-- Open waits, and those of them that expire before the given time (off waits_open).
SELECT COUNT(*) AS open_waits,
       COALESCE(SUM(CASE WHEN expires_at <= %(soon)s THEN 1 ELSE 0 END), 0) AS expiring
FROM waits WHERE state = 'open';

-- name: gauge_days
-- The first days (UTC) from :today on whose journal partitions are made (one
-- row; an empty array when there is none).
SELECT ARRAY(
    SELECT to_date(substr(c.relname, 10), 'YYYYMMDD') AS day
    FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
    WHERE i.inhparent = to_regclass('journal_dated') AND c.relname ~ '^journal_d[0-9]{8}$'
      AND to_date(substr(c.relname, 10), 'YYYYMMDD') >= %(today)s::date
    ORDER BY 1 LIMIT 31) AS days;

-- name: count_resumes_since
-- Takeovers recorded since :since (`stead status`; a scan of resumes, one row a takeover).
SELECT COUNT(*) AS takeovers FROM resumes WHERE at >= %(since)s;

-- name: put_meta
INSERT INTO stead_meta (key, value) VALUES (%(key)s, %(value)s)
ON CONFLICT (key) DO UPDATE SET value = excluded.value;

-- name: delete_meta
DELETE FROM stead_meta WHERE key = %(key)s;

-- == the requests model calls sent (0034; store/transactions/conversations.py) ==
-- name: insert_conversation_part
INSERT INTO conversation_parts (run_id, name, parent, body)
VALUES (%(run_id)s, %(name)s, %(parent)s, %(body)s)
ON CONFLICT (run_id, name) DO NOTHING;

-- name: conversation_parts
SELECT name, parent, body FROM conversation_parts WHERE run_id = %(run_id)s;

-- name: delete_conversation_parts
DELETE FROM conversation_parts WHERE run_id = ANY(%(run_ids)s::text[]);

-- Payload data keys (see stead.payloads and store/_sealing.py).
-- name: get_payload_key
SELECT scope, key_id, wrapped, forgotten_at FROM payload_keys WHERE scope = %(scope)s;

-- name: insert_payload_key
INSERT INTO payload_keys (scope, key_id, wrapped, created_at)
VALUES (%(scope)s, %(key_id)s, %(wrapped)s, extract(epoch FROM statement_timestamp()))
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
    SELECT run_id FROM runs WHERE task_id = %(task_id)s
    UNION
    SELECT e.child FROM edges e JOIN family f ON e.parent = f.run_id
)
SELECT r.run_id, r.status, r.task_id FROM runs r JOIN family f ON f.run_id = r.run_id
ORDER BY r.created_at;

-- name: forget_end_runs
UPDATE runs SET status = 'failed', error = %(error)s, lease_owner = NULL,
       lease_expires_at = NULL, wake_at = NULL, epoch = epoch + 1, updated_at = %(now)s
WHERE run_id = ANY(%(run_ids)s::text[]) AND status NOT IN ('completed', 'failed', 'cancelled', 'revalidation_failed');

-- name: forget_runs
UPDATE runs SET input = %(marker)s,
       result = CASE WHEN result IS NULL THEN NULL ELSE %(marker)s END,
       error = CASE WHEN error IS NULL THEN NULL ELSE %(error)s END
WHERE run_id = ANY(%(run_ids)s::text[]);

-- name: forget_journal
UPDATE journal SET payload = %(marker)s WHERE run_id = ANY(%(run_ids)s::text[]);

-- name: forget_archive
UPDATE journal_archive SET payload = %(marker)s WHERE run_id = ANY(%(run_ids)s::text[]);

-- name: forget_events
UPDATE events SET payload = %(marker)s, detail = CASE WHEN detail IS NULL THEN NULL ELSE %(marker)s END
WHERE run_id = ANY(%(run_ids)s::text[]);

-- name: forget_actions
UPDATE operator_actions SET detail = %(marker)s WHERE run_id = ANY(%(run_ids)s::text[]);

-- name: forget_streams
UPDATE stream_entries SET value = %(marker)s WHERE run_id = ANY(%(run_ids)s::text[]);

-- name: forget_intents
UPDATE intents SET intent = %(marker)s WHERE run_id = ANY(%(run_ids)s::text[]);

-- name: forget_migrations
UPDATE migrations SET old_input = %(marker)s, new_input = %(marker)s WHERE run_id = ANY(%(run_ids)s::text[]);

-- name: forget_requests
UPDATE wait_requests SET request = %(marker)s
WHERE wait_id IN (SELECT wait_id FROM waits WHERE run_id = ANY(%(run_ids)s::text[]));

-- The state in force knows nothing any more; its version stays, so the
-- task's next change goes on from it.
-- name: forget_state
UPDATE task_state SET data = '{}' WHERE task_key = %(task_key)s;

-- name: forget_state_history
UPDATE task_state_history SET data = %(marker)s WHERE task_key = %(task_key)s;

-- name: forget_key
INSERT INTO payload_keys (scope, key_id, wrapped, created_at, task_id, forgotten_at,
                          forgotten_by, forgotten_why)
VALUES (%(scope)s, NULL, NULL, %(now)s, %(task_id)s, %(now)s, %(by)s, %(why)s)
ON CONFLICT (scope) DO UPDATE SET key_id = NULL, wrapped = NULL, task_id = excluded.task_id,
    forgotten_at = excluded.forgotten_at, forgotten_by = excluded.forgotten_by,
    forgotten_why = excluded.forgotten_why;

-- A task state's key goes: its history is overwritten, and the task may
-- come back (a new run of the same task id) with a new key.
-- name: drop_payload_key
DELETE FROM payload_keys WHERE scope = %(scope)s;

-- name: forgotten_run
SELECT scope, task_id, forgotten_at, forgotten_by, forgotten_why FROM payload_keys
WHERE scope = %(scope)s AND forgotten_at IS NOT NULL;

-- Rewrapping data keys under the newest key (`stead keys reencrypt`): a
-- batch of keys wrapped by another and made by the time the pass began
-- (those made during it by writers still wrapping with an older key are left
-- to the next pass, so that a pass ends whatever they do), then each
-- rewrapped only if it was not changed meanwhile. The pass's start is read
-- with lease_now (no fake lease clock): the clock that stamps created_at.
-- name: keys_to_rewrap
SELECT scope, key_id, wrapped FROM payload_keys
WHERE key_id IS NOT NULL AND key_id <> %(newest)s AND scope > %(after)s
  AND created_at <= %(until)s
ORDER BY scope LIMIT %(limit)s;

-- name: rewrap_key
UPDATE payload_keys SET key_id = %(key_id)s, wrapped = %(wrapped)s
WHERE scope = %(scope)s AND key_id = %(old_key_id)s AND wrapped = %(old_wrapped)s;

-- name: payload_key_counts
SELECT key_id, count(*) AS n FROM payload_keys GROUP BY key_id ORDER BY key_id;

-- name: revoke_stream_token
-- A token (or, as 'run:<id>', every token of a run issued until now) is
-- refused from now on; revoking again moves the time forward.
INSERT INTO stream_token_revocations (revoked, revoked_at, expires_at)
    VALUES (%(revoked)s, %(now)s, %(expires_at)s)
    ON CONFLICT (revoked) DO UPDATE SET revoked_at = EXCLUDED.revoked_at,
        expires_at = GREATEST(stream_token_revocations.expires_at, EXCLUDED.expires_at);

-- name: forget_stream_revocations
DELETE FROM stream_token_revocations WHERE expires_at < %(now)s;

-- name: stream_token_revoked
SELECT 1 AS revoked FROM stream_token_revocations
WHERE revoked = %(token_id)s OR (revoked = %(run_key)s AND revoked_at >= %(issued_at)s)
LIMIT 1;

-- name: set_run_tenant
-- The tenant of a run just inserted (its insert's trigger made the row, saying none).
UPDATE run_tenants SET tenant = %(tenant)s WHERE run_id = %(run_id)s;

-- name: inherit_tenant
-- A run just inserted serves the tenant of the run it came from (a child's
-- parent, a fork's, a successor's predecessor).
UPDATE run_tenants
SET tenant = COALESCE((SELECT p.tenant FROM run_tenants p WHERE p.run_id = %(from_id)s), '')
WHERE run_id = %(run_id)s;

-- name: set_run_tenants
-- The tenants of a batch just inserted, runs a JSON array of {run_id, tenant}.
UPDATE run_tenants SET tenant = j.tenant
FROM json_to_recordset(%(runs)s::json) AS j (run_id text, tenant text)
WHERE run_tenants.run_id = j.run_id;

-- name: ready_tenants
-- The tenants with runs a claim could take (runnable, or asleep until a
-- time), at most %(most)s, by a skip scan of run_tenants_live: one index
-- probe per tenant, however many runs each has.
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
SELECT tenant FROM t WHERE tenant IS NOT NULL LIMIT %(most)s;

-- name: lock_tenants
-- The claims that count a limited tenant's runs take turns (held until
-- commit), so the counts a claim reads after it stay true until its leases
-- commit. Taken in the order of the names, so two claims never wait on each
-- other in a cycle.
SELECT count(pg_advisory_xact_lock(1953391988, hashtext(current_schema() || ':' || t.tenant)))
FROM (SELECT tenant FROM unnest(%(tenants)s::text[]) AS u (tenant) ORDER BY tenant) AS t;

-- name: tenant_loads
-- For each tenant with runs a claim could take (the skip scan of
-- ready_tenants, at most %(most)s): its runs leased now (active), whether it
-- has one a claim of this worker could take (ready: runnable outside a queue,
-- or due), and its runs first claimed after its since (recent; 0 without
-- one): the tenants in %(named)s take theirs from %(sinces)s (a JSON object),
-- the others %(since)s. Each is a bounded read of run_tenants' indexes for
-- that tenant alone.
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
        CASE WHEN t.tenant = ANY(%(named)s::text[])
             THEN (%(sinces)s::json ->> t.tenant)::float8
             ELSE %(since)s::float8 END AS since
    FROM t WHERE t.tenant IS NOT NULL LIMIT %(most)s
)
SELECT t.tenant,
    (SELECT count(*) FROM run_tenants AS rt JOIN runs AS r ON r.run_id = rt.run_id
     WHERE rt.tenant = t.tenant AND rt.status = 'running' AND r.lease_owner IS NOT NULL
       AND r.lease_expires_at >
           COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8
    ) AS active,
    (SELECT rt.run_id FROM run_tenants AS rt JOIN runs AS r ON r.run_id = rt.run_id
     WHERE rt.tenant = t.tenant AND rt.status IN ('pending', 'running') AND rt.queue IS NULL
       AND (r.lease_expires_at IS NULL OR r.lease_expires_at <=
           COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8)
       AND (r.workflow || '@' || r.version) = ANY(%(hosted)s::text[])
       AND NOT (r.run_id = ANY(%(exclude)s::text[]))
     ORDER BY rt.created_at LIMIT 1) IS NOT NULL
    OR (SELECT rt.run_id FROM run_tenants AS rt JOIN runs AS r ON r.run_id = rt.run_id
        WHERE rt.tenant = t.tenant AND rt.status = 'waiting'
          AND rt.wake_at <= %(now)s AND rt.queue IS NULL
          AND (r.workflow || '@' || r.version) = ANY(%(hosted)s::text[])
          AND NOT (r.run_id = ANY(%(exclude)s::text[]))
        ORDER BY rt.wake_at LIMIT 1) IS NOT NULL AS ready,
    CASE WHEN t.since IS NULL THEN 0 ELSE
        (SELECT count(*) FROM run_tenants AS rt
         WHERE rt.tenant = t.tenant AND rt.started_at > t.since) END AS recent
FROM n AS t;

-- name: claim_tenant
-- Lease up to %(limit)s runs of one tenant outside any queue, oldest first
-- (due sleepers too, as in claim), read through run_tenants' indexes for that
-- tenant alone. SKIP LOCKED as in claim. A run's first claim sets started_at.
-- Each row returned names its tenant (the claim's).
WITH runnable AS (
    SELECT rt.run_id, rt.created_at FROM run_tenants AS rt
    JOIN runs AS r ON r.run_id = rt.run_id
    WHERE rt.tenant = %(tenant)s AND rt.status IN ('pending', 'running') AND rt.queue IS NULL
      AND r.status IN ('pending', 'running')
      AND (r.lease_expires_at IS NULL OR r.lease_expires_at <=
          COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8)
      AND (r.workflow || '@' || r.version) = ANY(%(hosted)s::text[])
      AND NOT (r.run_id = ANY(%(exclude)s::text[]))
    ORDER BY rt.created_at
    LIMIT %(limit)s
    FOR UPDATE OF r SKIP LOCKED
), due AS (
    SELECT rt.run_id, rt.created_at FROM run_tenants AS rt
    JOIN runs AS r ON r.run_id = rt.run_id
    WHERE rt.tenant = %(tenant)s AND rt.status = 'waiting' AND rt.wake_at <= %(now)s
      AND rt.queue IS NULL AND r.status = 'waiting' AND r.wake_at <= %(now)s
      AND (r.workflow || '@' || r.version) = ANY(%(hosted)s::text[])
      AND NOT (r.run_id = ANY(%(exclude)s::text[]))
    ORDER BY rt.wake_at
    LIMIT %(limit)s
    FOR UPDATE OF r SKIP LOCKED
), picked AS (
    SELECT run_id FROM (SELECT * FROM runnable UNION ALL SELECT * FROM due) AS candidates
    ORDER BY created_at
    LIMIT %(limit)s
)
UPDATE runs
SET epoch = runs.epoch + 1, lease_owner = %(worker_id)s, lease_expires_at =
    COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8 + %(lease_seconds)s,
    status = 'running', wake_at = NULL, updated_at = %(now)s,
    started_at = COALESCE(runs.started_at, %(now)s)
FROM picked
WHERE runs.run_id = picked.run_id
RETURNING runs.*, %(tenant)s::text AS tenant,
    (SELECT e.until FROM lease_ends AS e
     WHERE e.run_id = runs.run_id AND e.epoch = runs.epoch - 1) AS prior_lease_until;

-- name: claim_tenants
-- claim_tenant for several tenants in one statement: up to %(limits)s[i]
-- runs of %(tenants)s[i] (arrays of one length, the tenants distinct), each
-- tenant's read through its own index range as in claim_tenant (LATERAL:
-- one bounded probe per tenant, however many runs a tenant has). Each row
-- names the tenant it was claimed for (tenant, as claim_tenant's do).
WITH plan AS (
    SELECT p.tenant, p.most FROM unnest(%(tenants)s::text[], %(limits)s::int[]) AS p (tenant, most)
), runnable AS (
    SELECT c.run_id, c.created_at, plan.tenant FROM plan CROSS JOIN LATERAL (
        SELECT rt.run_id, rt.created_at FROM run_tenants AS rt
        JOIN runs AS r ON r.run_id = rt.run_id
        WHERE rt.tenant = plan.tenant AND rt.status IN ('pending', 'running')
          AND rt.queue IS NULL AND r.status IN ('pending', 'running')
          AND (r.lease_expires_at IS NULL OR r.lease_expires_at <=
              COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8)
          AND (r.workflow || '@' || r.version) = ANY(%(hosted)s::text[])
          AND NOT (r.run_id = ANY(%(exclude)s::text[]))
        ORDER BY rt.created_at
        LIMIT plan.most
        FOR UPDATE OF r SKIP LOCKED) AS c
), due AS (
    SELECT c.run_id, c.created_at, plan.tenant FROM plan CROSS JOIN LATERAL (
        SELECT rt.run_id, rt.created_at FROM run_tenants AS rt
        JOIN runs AS r ON r.run_id = rt.run_id
        WHERE rt.tenant = plan.tenant AND rt.status = 'waiting' AND rt.wake_at <= %(now)s
          AND rt.queue IS NULL AND r.status = 'waiting' AND r.wake_at <= %(now)s
          AND (r.workflow || '@' || r.version) = ANY(%(hosted)s::text[])
          AND NOT (r.run_id = ANY(%(exclude)s::text[]))
        ORDER BY rt.wake_at
        LIMIT plan.most
        FOR UPDATE OF r SKIP LOCKED) AS c
), picked AS (
    SELECT ranked.run_id, ranked.tenant FROM (
        SELECT u.run_id, u.tenant,
            row_number() OVER (PARTITION BY u.tenant ORDER BY u.created_at) AS n
        FROM (SELECT * FROM runnable UNION ALL SELECT * FROM due) AS u) AS ranked
    JOIN plan ON plan.tenant = ranked.tenant
    WHERE ranked.n <= plan.most
)
UPDATE runs
SET epoch = runs.epoch + 1, lease_owner = %(worker_id)s, lease_expires_at =
    COALESCE(%(lease_now)s, EXTRACT(EPOCH FROM statement_timestamp()))::float8 + %(lease_seconds)s,
    status = 'running', wake_at = NULL, updated_at = %(now)s,
    started_at = COALESCE(runs.started_at, %(now)s)
FROM picked
WHERE runs.run_id = picked.run_id
RETURNING runs.*, picked.tenant AS tenant,
    (SELECT e.until FROM lease_ends AS e
     WHERE e.run_id = runs.run_id AND e.epoch = runs.epoch - 1) AS prior_lease_until;

-- Spend and quotas (schema 36, see `stead.spend`).

-- name: reserve_context
-- What a reservation is judged on, in one read: the run's tenant ('' none),
-- the model's price (null: unpriced), what the run's model calls hold, and
-- the tenant's limits (JSON; null: none).
SELECT (SELECT t.tenant FROM run_tenants t WHERE t.run_id = %(run_id)s) AS tenant,
       p.input_per_million, p.output_per_million,
       (SELECT COALESCE(SUM(r.tokens), 0)::bigint FROM spend_reservations r
        WHERE r.run_id = %(run_id)s AND r.state <> 'released') AS run_tokens,
       (SELECT COALESCE(SUM(r.cost), 0) FROM spend_reservations r
        WHERE r.run_id = %(run_id)s AND r.state <> 'released') AS run_cost,
       (SELECT l.limits FROM tenant_limits l JOIN run_tenants t ON t.tenant = l.tenant
        WHERE t.run_id = %(run_id)s) AS limits
FROM (SELECT 1 AS one) AS o LEFT JOIN model_prices p ON p.model = %(model)s;

-- name: run_tenant
-- The tenant a run serves ('' or no row: none).
SELECT tenant FROM run_tenants WHERE run_id = %(run_id)s;


-- name: set_price
INSERT INTO model_prices (model, input_per_million, output_per_million, updated_at)
VALUES (%(model)s, %(input)s, %(output)s, %(now)s)
ON CONFLICT (model) DO UPDATE
SET input_per_million = excluded.input_per_million,
    output_per_million = excluded.output_per_million, updated_at = excluded.updated_at;

-- name: list_prices
SELECT model, input_per_million, output_per_million, updated_at FROM model_prices
ORDER BY model;

-- name: get_tenant_limits
SELECT tenant, limits, updated_at, updated_by, why FROM tenant_limits
WHERE tenant = %(tenant)s;

-- name: set_tenant_limits
INSERT INTO tenant_limits (tenant, limits, updated_at, updated_by, why)
VALUES (%(tenant)s, %(limits)s, %(now)s, %(by)s, %(why)s)
ON CONFLICT (tenant) DO UPDATE
SET limits = excluded.limits, updated_at = excluded.updated_at,
    updated_by = excluded.updated_by, why = excluded.why;

-- name: list_tenant_limits
SELECT tenant, limits, updated_at, updated_by, why FROM tenant_limits
ORDER BY tenant;

-- name: lock_tenant_spend
-- The row every reservation and quota check of the tenant reads and changes,
-- made if missing: the upsert holds its lock until commit, so
-- two workers reserving at once are judged one after the other.
INSERT INTO tenant_spend (tenant) VALUES (%(tenant)s)
ON CONFLICT (tenant) DO UPDATE SET tenant = excluded.tenant
RETURNING tokens, cost, reserved_tokens, reserved_cost;

-- name: get_tenant_spend
SELECT tenant, tokens, cost, reserved_tokens, reserved_cost FROM tenant_spend
WHERE tenant = %(tenant)s;


-- name: reset_tenant_spend
-- A new budget period: what was settled is forgotten, what is reserved stays.
UPDATE tenant_spend SET tokens = 0, cost = 0 WHERE tenant = %(tenant)s;


-- name: reserved_at
-- The reservations of one call still open (its attempts in flight, or whose
-- worker died).
SELECT run_id, addr, attempt, tenant, model, input_price, output_price, tokens, cost,
       state, at
FROM spend_reservations
WHERE run_id = %(run_id)s AND addr = %(addr)s AND state = 'reserved'
ORDER BY attempt;

-- name: open_reservation
-- A reservation, and its estimate held by its tenant (if it has one): one
-- statement (a writable CTE).
WITH r AS (
    INSERT INTO spend_reservations (run_id, addr, attempt, tenant, model, input_price,
                                    output_price, tokens, cost, state, at)
    VALUES (%(run_id)s, %(addr)s, %(attempt)s, %(tenant)s, %(model)s, %(input_price)s,
            %(output_price)s, %(tokens)s, %(cost)s, 'reserved', %(now)s)
    RETURNING tenant
)
UPDATE tenant_spend
SET reserved_tokens = reserved_tokens + %(tokens)s, reserved_cost = reserved_cost + %(cost)s
WHERE tenant = (SELECT tenant FROM r);

-- name: close_reservation
-- A reservation resolved (`state`: settled, released, died), now holding
-- `tokens` and `cost`; its tenant's counts move from reserved (`held_tokens`,
-- `held_cost`: its estimate) to settled: one statement (a writable CTE).
WITH r AS (
    UPDATE spend_reservations SET state = %(state)s, tokens = %(tokens)s, cost = %(cost)s,
                                  at = %(now)s
    WHERE run_id = %(run_id)s AND addr = %(addr)s AND attempt = %(attempt)s
      AND state = 'reserved'
    RETURNING tenant
)
UPDATE tenant_spend
SET tokens = tokens + %(tokens)s, cost = cost + %(cost)s,
    reserved_tokens = reserved_tokens - %(held_tokens)s,
    reserved_cost = reserved_cost - %(held_cost)s
WHERE tenant = (SELECT tenant FROM r);

-- name: settle_reservation
-- A reservation settled to the tokens its attempt used (`input_tokens`,
-- `output_tokens`, costed at the prices it was reserved at), or released (no
-- tokens); its tenant's counts move from reserved to settled: one statement.
WITH old AS (
    SELECT tenant, tokens, cost, input_price, output_price FROM spend_reservations
    WHERE run_id = %(run_id)s AND addr = %(addr)s AND attempt = %(attempt)s
      AND state = 'reserved'
    FOR UPDATE
), r AS (
    UPDATE spend_reservations s
    SET state = %(state)s, tokens = %(input_tokens)s::bigint + %(output_tokens)s::bigint,
        cost = (%(input_tokens)s::bigint * COALESCE(old.input_price, 0)
                + %(output_tokens)s::bigint * COALESCE(old.output_price, 0))
               / 1000000.0::double precision,
        at = %(now)s
    FROM old
    WHERE s.run_id = %(run_id)s AND s.addr = %(addr)s AND s.attempt = %(attempt)s
      AND s.state = 'reserved'
    RETURNING s.tenant, s.tokens, s.cost, old.tokens AS held_tokens, old.cost AS held_cost
)
UPDATE tenant_spend t
SET tokens = t.tokens + r.tokens, cost = t.cost + r.cost,
    reserved_tokens = t.reserved_tokens - r.held_tokens,
    reserved_cost = t.reserved_cost - r.held_cost
FROM r WHERE t.tenant = r.tenant;

-- name: list_reservations
SELECT run_id, addr, attempt, tenant, model, input_price, output_price, tokens, cost,
       state, at
FROM spend_reservations WHERE run_id = %(run_id)s
ORDER BY at, addr, attempt;

-- name: tenant_recent_starts
-- The tenant's runs created since `since` (its runs-per-minute quota).
SELECT COUNT(*) AS n FROM run_tenants WHERE tenant = %(tenant)s AND created_at >= %(since)s;

-- name: count_children
-- How many children a run has started (its tenant's children-per-run quota).
SELECT COUNT(*) AS n FROM runs WHERE parent_id = %(run_id)s;

-- name: tenant_open_waits
-- The waits open over all of a tenant's runs (its open-waits quota).
SELECT COUNT(*) AS n FROM waits w JOIN run_tenants t ON t.run_id = w.run_id
WHERE t.tenant = %(tenant)s AND w.state = 'open';

-- name: tenant_stored_bytes
-- The bytes a tenant's runs hold (its stored-bytes quota; see run_bytes).
SELECT COALESCE(SUM(b.bytes), 0)::bigint AS n
FROM run_tenants t JOIN run_bytes b ON b.run_id = t.run_id WHERE t.tenant = %(tenant)s;

-- large values (see stead/payloads/references.py) -----------------------------
-- name: own_blob
-- The run owns the blob its reference names (in the reference's transaction).
-- A run_id of `task:<task key>` is a task's state (store/_large_state.py).
INSERT INTO run_blobs (run_id, sha256, size, at) VALUES (%(run_id)s, %(sha256)s, %(size)s, %(at)s)
ON CONFLICT (run_id, sha256) DO NOTHING;

-- name: blobs_of_runs
SELECT DISTINCT sha256 FROM run_blobs WHERE run_id = ANY(%(run_ids)s::text[]);

-- name: delete_run_blobs
DELETE FROM run_blobs WHERE run_id = ANY(%(run_ids)s::text[]);

-- name: owned_blobs
-- Which of `hashes` some run owns.
SELECT DISTINCT sha256 FROM run_blobs WHERE sha256 = ANY(%(hashes)s::text[]);

-- == day partitions of the journal and the events (0041_day_partitions.sql) ==
-- name: add_day
-- Make one day's partitions if missing (false: another process is making
-- them), waiting at most lock_timeout for the locks: a maker queued behind a
-- long transaction would hold the queries queued behind it.
SELECT set_config('lock_timeout', %(lock_timeout)s, true), stead_add_day(%(day)s::date) AS made;

-- name: partition_days
-- The days with partitions that ended before :before (seconds), oldest first.
SELECT day, lo, hi FROM stead_days()
WHERE extract(epoch FROM day + 1) <= %(before)s
ORDER BY day;

-- name: day_runs
-- The runs of one day's range, locked: none is revived (a retry, a resume)
-- while the day is judged and emptied.
SELECT run_id FROM runs WHERE run_id >= %(lo)s AND run_id < %(hi)s
ORDER BY run_id
FOR UPDATE;

-- name: empty_day
-- TRUNCATE takes each of the day's partitions whole: given up after
-- lock_timeout (for the rest of its transaction too) if a long transaction
-- reads them.
SELECT set_config('lock_timeout', %(lock_timeout)s, true), stead_empty_day(%(day)s::date);

-- name: drop_day
-- A moment's lock on journal and events, given up after lock_timeout.
SELECT set_config('lock_timeout', %(lock_timeout)s, true), stead_drop_day(%(day)s::date) AS dropped;

-- name: day_run_ids
SELECT run_id FROM runs WHERE run_id >= %(lo)s AND run_id < %(hi)s;
