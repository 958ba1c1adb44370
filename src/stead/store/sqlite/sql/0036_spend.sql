-- upgrade: compatible online
-- stead schema 36 (SQLite): spend and quotas per tenant (see `stead.spend`).
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
    updated_at REAL NOT NULL,
    updated_by TEXT NOT NULL,
    why        TEXT NOT NULL
);
CREATE TABLE model_prices (
    model              TEXT PRIMARY KEY,
    input_per_million  REAL NOT NULL,
    output_per_million REAL NOT NULL,
    updated_at         REAL NOT NULL
);
CREATE TABLE tenant_spend (
    tenant          TEXT PRIMARY KEY,
    tokens          INTEGER NOT NULL DEFAULT 0,
    cost            REAL NOT NULL DEFAULT 0,
    reserved_tokens INTEGER NOT NULL DEFAULT 0,
    reserved_cost   REAL NOT NULL DEFAULT 0
);
CREATE TABLE spend_reservations (
    run_id        TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    addr          TEXT NOT NULL,
    attempt       INTEGER NOT NULL,
    tenant        TEXT,
    model         TEXT NOT NULL,
    input_price   REAL,
    output_price  REAL,
    tokens        INTEGER NOT NULL,
    cost          REAL NOT NULL,
    state         TEXT NOT NULL,
    at            REAL NOT NULL,
    PRIMARY KEY (run_id, addr, attempt)
);
-- run_bytes: the bytes a tenant's run holds in its journal payloads, its
-- stream values and the large values it keeps in the blob store (run_blobs),
-- kept by triggers as they are inserted (a tenant's stored-bytes quota sums
-- its runs' rows); runs of no tenant are not counted.
CREATE TABLE run_bytes (
    run_id TEXT PRIMARY KEY REFERENCES runs (run_id) ON DELETE CASCADE,
    bytes  INTEGER NOT NULL
);
CREATE TRIGGER run_bytes_of_journal AFTER INSERT ON journal
WHEN EXISTS (SELECT 1 FROM run_tenants t WHERE t.run_id = NEW.run_id AND t.tenant <> '')
BEGIN
    INSERT INTO run_bytes (run_id, bytes) VALUES (NEW.run_id, length(CAST(NEW.payload AS BLOB)))
    ON CONFLICT (run_id) DO UPDATE SET bytes = run_bytes.bytes + excluded.bytes;
END;
CREATE TRIGGER run_bytes_of_streams AFTER INSERT ON stream_entries
WHEN EXISTS (SELECT 1 FROM run_tenants t WHERE t.run_id = NEW.run_id AND t.tenant <> '')
BEGIN
    INSERT INTO run_bytes (run_id, bytes) VALUES (NEW.run_id, length(CAST(NEW.value AS BLOB)))
    ON CONFLICT (run_id) DO UPDATE SET bytes = run_bytes.bytes + excluded.bytes;
END;
CREATE TRIGGER run_bytes_of_blobs AFTER INSERT ON run_blobs
WHEN EXISTS (SELECT 1 FROM run_tenants t WHERE t.run_id = NEW.run_id AND t.tenant <> '')
BEGIN
    INSERT INTO run_bytes (run_id, bytes) VALUES (NEW.run_id, NEW.size)
    ON CONFLICT (run_id) DO UPDATE SET bytes = run_bytes.bytes + excluded.bytes;
END;
