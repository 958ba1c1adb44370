-- upgrade: compatible online
-- stead schema 35 (SQLite): tenants. A run belongs to one tenant (the
-- customer it serves; '' for none), given at start and inherited by its
-- children. run_tenants holds it, one row per run, in a table of its own
-- rather than a column of runs: older workers read runs with `SELECT *`
-- (PostgreSQL's prepared statements fail once runs has another column).
-- Triggers keep the row true whatever code writes runs: every run inserted
-- gets a row ('' until its starter names the tenant, in the same
-- transaction), and its status, first claim (started_at) and wake-up
-- (wake_at) are copied as
-- they change, so a claim fair across tenants walks each tenant's runnable
-- runs by index (run_tenants_runnable) and counts each tenant's leased runs
-- and recent starts without reading the runs of any other tenant.
-- Runs that ended before this migration have no row (no tenant).
CREATE TABLE run_tenants (
    run_id     TEXT PRIMARY KEY REFERENCES runs (run_id) ON DELETE CASCADE,
    tenant     TEXT NOT NULL,
    status     TEXT NOT NULL,
    queue      TEXT,
    started_at REAL,
    wake_at    REAL,
    created_at REAL NOT NULL
);
CREATE TRIGGER run_tenant_of_new_run AFTER INSERT ON runs
BEGIN
    INSERT INTO run_tenants (run_id, tenant, status, queue, started_at, wake_at, created_at)
    VALUES (NEW.run_id, '', NEW.status, NEW.queue, NEW.started_at, NEW.wake_at, NEW.created_at)
    ON CONFLICT (run_id) DO NOTHING;
END;
CREATE TRIGGER run_tenant_follows_run AFTER UPDATE OF status, started_at, wake_at ON runs
WHEN NEW.status IS NOT OLD.status OR NEW.started_at IS NOT OLD.started_at
  OR NEW.wake_at IS NOT OLD.wake_at
BEGIN
    UPDATE run_tenants
    SET status = NEW.status, started_at = NEW.started_at, wake_at = NEW.wake_at
    WHERE run_id = NEW.run_id;
    -- A run that ended before schema 35, live again, has no row yet.
    INSERT INTO run_tenants (run_id, tenant, status, queue, started_at, wake_at, created_at)
    SELECT NEW.run_id, '', NEW.status, NEW.queue, NEW.started_at, NEW.wake_at, NEW.created_at
    WHERE changes() = 0;
END;
INSERT INTO run_tenants (run_id, tenant, status, queue, started_at, wake_at, created_at)
SELECT run_id, '', status, queue, started_at, wake_at, created_at FROM runs
WHERE status NOT IN ('completed', 'failed', 'cancelled', 'revalidation_failed');
CREATE INDEX run_tenants_by_tenant ON run_tenants (tenant, created_at, run_id);
CREATE INDEX run_tenants_live ON run_tenants (tenant)
    WHERE status IN ('pending', 'running') OR (status = 'waiting' AND wake_at IS NOT NULL);
CREATE INDEX run_tenants_runnable ON run_tenants (tenant, created_at)
    WHERE status IN ('pending', 'running');
CREATE INDEX run_tenants_running ON run_tenants (tenant) WHERE status = 'running';
CREATE INDEX run_tenants_waking ON run_tenants (tenant, wake_at)
    WHERE status = 'waiting' AND wake_at IS NOT NULL;
CREATE INDEX run_tenants_started ON run_tenants (tenant, started_at)
    WHERE started_at IS NOT NULL;
