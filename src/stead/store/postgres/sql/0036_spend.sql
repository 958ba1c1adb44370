-- upgrade: compatible online
-- stead schema 36 (PostgreSQL): spend and quotas per tenant (see `stead.spend`).
-- tenant_limits: a tenant's spend budget and quotas (JSON: `stead.spend.Limits`),
-- who set them last and why.
-- model_prices: the price table, per model: per million input and output tokens.
-- tenant_spend: what a tenant's model calls hold, settled and reserved; its
-- row is what concurrent reservations of the tenant lock.
-- spend_reservations: one per live attempt of a model call that reserved:
-- its estimate while `reserved`, its usage once `settled`, nothing once
-- `released`; `died`: its worker died mid-call, counted at its estimate.
-- Tables of their own, not columns of runs: older workers read runs with
-- prepared `SELECT *` statements.
CREATE TABLE tenant_limits (
    tenant     TEXT PRIMARY KEY,
    limits     TEXT NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    updated_by TEXT NOT NULL,
    why        TEXT NOT NULL
);
CREATE TABLE model_prices (
    model              TEXT PRIMARY KEY,
    input_per_million  DOUBLE PRECISION NOT NULL,
    output_per_million DOUBLE PRECISION NOT NULL,
    updated_at         DOUBLE PRECISION NOT NULL
);
CREATE TABLE tenant_spend (
    tenant          TEXT PRIMARY KEY,
    tokens          BIGINT NOT NULL DEFAULT 0,
    cost            DOUBLE PRECISION NOT NULL DEFAULT 0,
    reserved_tokens BIGINT NOT NULL DEFAULT 0,
    reserved_cost   DOUBLE PRECISION NOT NULL DEFAULT 0
);
CREATE TABLE spend_reservations (
    run_id        TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    addr          TEXT NOT NULL,
    attempt       BIGINT NOT NULL,
    tenant        TEXT,
    model         TEXT NOT NULL,
    input_price   DOUBLE PRECISION,
    output_price  DOUBLE PRECISION,
    tokens        BIGINT NOT NULL,
    cost          DOUBLE PRECISION NOT NULL,
    state         TEXT NOT NULL,
    at            DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (run_id, addr, attempt)
);
-- run_bytes: the bytes a tenant's run holds in its journal payloads, its
-- stream values and the large values it keeps in the blob store (run_blobs),
-- kept by triggers as they are inserted (a tenant's stored-bytes quota sums
-- its runs' rows); runs of no tenant are not counted.
CREATE TABLE run_bytes (
    run_id TEXT PRIMARY KEY REFERENCES runs (run_id) ON DELETE CASCADE,
    bytes  BIGINT NOT NULL
);
CREATE FUNCTION stead_run_bytes_journal() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM run_tenants t WHERE t.run_id = NEW.run_id AND t.tenant <> '') THEN
        INSERT INTO run_bytes (run_id, bytes) VALUES (NEW.run_id, octet_length(NEW.payload))
        ON CONFLICT (run_id) DO UPDATE SET bytes = run_bytes.bytes + excluded.bytes;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER run_bytes_of_journal AFTER INSERT ON journal
FOR EACH ROW EXECUTE FUNCTION stead_run_bytes_journal();
CREATE FUNCTION stead_run_bytes_streams() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM run_tenants t WHERE t.run_id = NEW.run_id AND t.tenant <> '') THEN
        INSERT INTO run_bytes (run_id, bytes) VALUES (NEW.run_id, octet_length(NEW.value))
        ON CONFLICT (run_id) DO UPDATE SET bytes = run_bytes.bytes + excluded.bytes;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER run_bytes_of_streams AFTER INSERT ON stream_entries
FOR EACH ROW EXECUTE FUNCTION stead_run_bytes_streams();
CREATE FUNCTION stead_run_bytes_blobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM run_tenants t WHERE t.run_id = NEW.run_id AND t.tenant <> '') THEN
        INSERT INTO run_bytes (run_id, bytes) VALUES (NEW.run_id, NEW.size)
        ON CONFLICT (run_id) DO UPDATE SET bytes = run_bytes.bytes + excluded.bytes;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER run_bytes_of_blobs AFTER INSERT ON run_blobs
FOR EACH ROW EXECUTE FUNCTION stead_run_bytes_blobs();
