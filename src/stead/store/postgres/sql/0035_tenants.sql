-- upgrade: compatible online
-- stead schema 35 (PostgreSQL): tenants (see ../sqlite/0035_tenants.sql). A
-- run's tenant ('' for none) lives in run_tenants, not in a column of runs:
-- older workers' prepared `SELECT * FROM runs` fail once runs has another
-- column. Triggers keep each row true whatever code writes runs: a row for
-- every run inserted, its status, first claim and wake-up copied as they change.
-- Creating the triggers takes a lock that holds writes to runs off until the
-- commit, so the rows copied for the live runs miss none; runs that ended
-- before this migration have no row (no tenant).
CREATE TABLE run_tenants (
    run_id     TEXT PRIMARY KEY REFERENCES runs (run_id) ON DELETE CASCADE,
    tenant     TEXT NOT NULL,
    status     TEXT NOT NULL,
    queue      TEXT,
    started_at DOUBLE PRECISION,
    wake_at    DOUBLE PRECISION,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE FUNCTION stead_run_tenant_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_tenants (run_id, tenant, status, queue, started_at, wake_at, created_at)
    VALUES (NEW.run_id, '', NEW.status, NEW.queue, NEW.started_at, NEW.wake_at, NEW.created_at)
    ON CONFLICT (run_id) DO NOTHING;
    RETURN NULL;
END
$$;
CREATE TRIGGER run_tenant_of_new_run AFTER INSERT ON runs
FOR EACH ROW EXECUTE FUNCTION stead_run_tenant_insert();
CREATE FUNCTION stead_run_tenant_follow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE run_tenants
    SET status = NEW.status, started_at = NEW.started_at, wake_at = NEW.wake_at
    WHERE run_id = NEW.run_id;
    IF NOT FOUND THEN  -- a run that ended before schema 35, live again
        INSERT INTO run_tenants (run_id, tenant, status, queue, started_at, wake_at, created_at)
        VALUES (NEW.run_id, '', NEW.status, NEW.queue, NEW.started_at, NEW.wake_at,
                NEW.created_at)
        ON CONFLICT (run_id) DO NOTHING;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER run_tenant_follows_run AFTER UPDATE OF status, started_at, wake_at ON runs
FOR EACH ROW
WHEN (NEW.status IS DISTINCT FROM OLD.status OR NEW.started_at IS DISTINCT FROM OLD.started_at
      OR NEW.wake_at IS DISTINCT FROM OLD.wake_at)
EXECUTE FUNCTION stead_run_tenant_follow();
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
