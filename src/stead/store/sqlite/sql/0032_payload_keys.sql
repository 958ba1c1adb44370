-- upgrade: compatible online
-- stead schema 32 (SQLite): the data keys payloads are sealed with.
-- payload_keys: one row per scope (a run id, or `task:<key>` for a task's
-- state): its data key, wrapped by the keyring's key `key_id` (see
-- `stead.payloads`); the database never holds a key that unwraps it.
-- Forgetting a task (`stead tasks forget`) nulls `key_id` and `wrapped` of
-- its scopes and says who, when and why; with encryption off it writes such a
-- row too, for the runs whose payloads it overwrote.
CREATE TABLE payload_keys (
    scope         TEXT PRIMARY KEY,
    key_id        TEXT,
    wrapped       TEXT,
    created_at    REAL NOT NULL,
    task_id       TEXT,
    forgotten_at  REAL,
    forgotten_by  TEXT,
    forgotten_why TEXT
);
CREATE INDEX payload_keys_key_id ON payload_keys (key_id) WHERE key_id IS NOT NULL;
