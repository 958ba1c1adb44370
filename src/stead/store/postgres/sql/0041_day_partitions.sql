-- upgrade: compatible online no-transaction
-- stead schema 41 (PostgreSQL): the journal and the events, partitioned by day.
-- Run ids are time-ordered (stead/run_ids.py): '0000000000007', then the start
-- in ms (12 hex digits), then randomness. `journal` and `events` become tables
-- partitioned by range of run_id, their keys unchanged (they begin with
-- run_id):
--   journal_legacy / events_legacy  the tables as they were, the DEFAULT
--       partition: runs with ids of the old shape (uuid4/uuid5 hex, whose 13th
--       character is 4 or 5), which older releases go on making. A valid CHECK
--       says they hold no dated id, so no partition added later scans them.
--   journal_dated / events_dated  ids from '0000000000007' to '0000000000008',
--       partitioned in turn by day: journal_dYYYYMMDD (stead_add_day, made
--       ahead by stead), and a DEFAULT journal_dated_other for dated ids of a
--       day with no partition (yet).
-- Retention empties a day whose runs may all be pruned (TRUNCATE), then drops
-- its tables (stead_drop_day): no row deleted one by one, nothing to vacuum.
-- Online: the CHECK is added NOT VALID, then validated (a scan that blocks no
-- write), and the swap is a moment's catalog change: attaching the old
-- tables, whose indexes, foreign key and CHECK already fit, copies no row.
-- Older code reads and writes the same names and columns in the same order;
-- its prepared statements are planned again against the new tables.
-- Each statement can run again after a failure.

DO $$
BEGIN
    PERFORM set_config('lock_timeout', '2s', true);
    IF (SELECT relkind FROM pg_class WHERE oid = 'journal'::regclass) = 'r'
       AND NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'journal_legacy_ids'
                       AND conrelid = 'journal'::regclass) THEN
        ALTER TABLE journal ADD CONSTRAINT journal_legacy_ids
            CHECK (run_id < '0000000000007' OR run_id >= '0000000000008') NOT VALID;
    END IF;
    IF (SELECT relkind FROM pg_class WHERE oid = 'events'::regclass) = 'r'
       AND NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'events_legacy_ids'
                       AND conrelid = 'events'::regclass) THEN
        -- Events can name runs that do not exist; none of stead's runs has an
        -- id in that range yet, so such events are rejected ones, kept only
        -- to be counted: they go.
        DELETE FROM events WHERE run_id >= '0000000000007' AND run_id < '0000000000008';
        ALTER TABLE events ADD CONSTRAINT events_legacy_ids
            CHECK (run_id < '0000000000007' OR run_id >= '0000000000008') NOT VALID;
    END IF;
END
$$;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'journal_legacy_ids'
               AND conrelid = 'journal'::regclass AND NOT convalidated) THEN
        ALTER TABLE journal VALIDATE CONSTRAINT journal_legacy_ids;
    END IF;
END
$$;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'events_legacy_ids'
               AND conrelid = 'events'::regclass AND NOT convalidated) THEN
        ALTER TABLE events VALIDATE CONSTRAINT events_legacy_ids;
    END IF;
END
$$;

DO $$
BEGIN
    PERFORM set_config('lock_timeout', '2s', true);
    IF (SELECT relkind FROM pg_class WHERE oid = 'journal'::regclass) = 'r' THEN
        CREATE TABLE journal_parted (LIKE journal INCLUDING DEFAULTS)
            PARTITION BY RANGE (run_id);
        ALTER TABLE journal_parted ADD CONSTRAINT journal_parted_pkey
            PRIMARY KEY (run_id, seq);
        ALTER TABLE journal_parted ADD CONSTRAINT journal_run_id_fkey
            FOREIGN KEY (run_id) REFERENCES runs (run_id);
        CREATE TABLE journal_dated PARTITION OF journal_parted
            FOR VALUES FROM ('0000000000007') TO ('0000000000008') PARTITION BY RANGE (run_id);
        CREATE TABLE journal_dated_other PARTITION OF journal_dated DEFAULT;
        -- The parent's trigger is cloned onto each partition, the old table too.
        DROP TRIGGER run_bytes_of_journal ON journal;
        CREATE TRIGGER run_bytes_of_journal AFTER INSERT ON journal_parted
        FOR EACH ROW EXECUTE FUNCTION stead_run_bytes_journal();
        ALTER TABLE journal RENAME TO journal_legacy;
        ALTER INDEX journal_pkey RENAME TO journal_legacy_pkey;
        ALTER TABLE journal_parted RENAME TO journal;
        ALTER INDEX journal_parted_pkey RENAME TO journal_pkey;
        ALTER TABLE journal ATTACH PARTITION journal_legacy DEFAULT;
    END IF;
    IF (SELECT relkind FROM pg_class WHERE oid = 'events'::regclass) = 'r' THEN
        CREATE TABLE events_parted (LIKE events INCLUDING DEFAULTS)
            PARTITION BY RANGE (run_id);
        ALTER TABLE events_parted ADD CONSTRAINT events_parted_pkey
            PRIMARY KEY (run_id, event_id);
        CREATE TABLE events_dated PARTITION OF events_parted
            FOR VALUES FROM ('0000000000007') TO ('0000000000008') PARTITION BY RANGE (run_id);
        CREATE TABLE events_dated_other PARTITION OF events_dated DEFAULT;
        ALTER TABLE events RENAME TO events_legacy;
        ALTER INDEX events_pkey RENAME TO events_legacy_pkey;
        ALTER INDEX events_rejected RENAME TO events_legacy_rejected;
        ALTER INDEX events_unknown_run RENAME TO events_legacy_unknown_run;
        ALTER TABLE events_parted RENAME TO events;
        ALTER INDEX events_parted_pkey RENAME TO events_pkey;
        -- Made on the parent, each is attached to the old table's own.
        CREATE INDEX events_rejected ON events (received_at) WHERE verdict = 'rejected';
        CREATE INDEX events_unknown_run ON events (received_at, run_id, event_id)
            WHERE reason = 'unknown_run';
        ALTER TABLE events ATTACH PARTITION events_legacy DEFAULT;
    END IF;
END
$$;

-- The partitions of one day (UTC) of the journal and the events, made ahead by
-- stead (the worker, `stead db prune`), under a lock that makes two makers one:
-- empty tables attached without blocking writes (ATTACH takes SHARE UPDATE
-- EXCLUSIVE on the parent). Rows already in *_dated_other for that day (a day
-- no one made in time) move in with them. False: another maker holds the lock.
CREATE OR REPLACE FUNCTION stead_add_day(day date) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    lo text := '0000000000007' || lpad(to_hex((extract(epoch FROM day) * 1000)::bigint), 12, '0');
    hi text := '0000000000007' || lpad(to_hex((extract(epoch FROM day + 1) * 1000)::bigint), 12, '0');
    suffix text := to_char(day, 'YYYYMMDD');
    parent text;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext(current_schema() || '/stead partitions')) THEN
        RETURN false;
    END IF;
    FOREACH parent IN ARRAY ARRAY['journal', 'events'] LOOP
        IF to_regclass(format('%I', parent || '_d' || suffix)) IS NULL THEN
            EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS)',
                           parent || '_d' || suffix, parent);
            EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (run_id >= %L AND run_id < %L)',
                           parent || '_d' || suffix, parent || '_d' || suffix || '_ids', lo, hi);
            EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', parent || '_dated_other');
            EXECUTE format('INSERT INTO %I SELECT * FROM %I WHERE run_id >= %L AND run_id < %L',
                           parent || '_d' || suffix, parent || '_dated_other', lo, hi);
            EXECUTE format('DELETE FROM %I WHERE run_id >= %L AND run_id < %L',
                           parent || '_dated_other', lo, hi);
            EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                           parent || '_dated', parent || '_d' || suffix, lo, hi);
        END IF;
    END LOOP;
    RETURN true;
END
$$;

-- The days that have partitions, with their bounds.
CREATE OR REPLACE FUNCTION stead_days() RETURNS TABLE (day date, lo text, hi text)
LANGUAGE sql STABLE AS $$
    SELECT to_date(substr(c.relname, 10), 'YYYYMMDD'),
           substring(pg_get_expr(c.relpartbound, c.oid) FROM $r$FROM \('([0-9a-f]+)'\)$r$),
           substring(pg_get_expr(c.relpartbound, c.oid) FROM $r$TO \('([0-9a-f]+)'\)$r$)
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = to_regclass('journal_dated') AND c.relname ~ '^journal_d[0-9]{8}$'
    ORDER BY 1
$$;

-- Empty one day's partitions, in the transaction that deletes its runs: each
-- is locked alone, never the parent, and nothing is left to vacuum.
CREATE OR REPLACE FUNCTION stead_empty_day(day date) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    suffix text := to_char(day, 'YYYYMMDD');
BEGIN
    IF to_regclass(format('%I', 'journal_d' || suffix)) IS NOT NULL THEN
        EXECUTE format('TRUNCATE %I, %I', 'journal_d' || suffix, 'events_d' || suffix);
    END IF;
END
$$;

-- Drop one emptied day's partitions: a moment's ACCESS EXCLUSIVE lock on
-- journal and events, bounded by lock_timeout. False: not empty (nothing dropped).
CREATE OR REPLACE FUNCTION stead_drop_day(day date) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    suffix text := to_char(day, 'YYYYMMDD');
    found boolean;
BEGIN
    IF to_regclass(format('%I', 'journal_d' || suffix)) IS NULL THEN
        RETURN true;
    END IF;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I) OR EXISTS (SELECT 1 FROM %I)',
                   'journal_d' || suffix, 'events_d' || suffix) INTO found;
    IF found THEN
        RETURN false;
    END IF;
    EXECUTE format('DROP TABLE %I, %I', 'journal_d' || suffix, 'events_d' || suffix);
    RETURN true;
END
$$;
