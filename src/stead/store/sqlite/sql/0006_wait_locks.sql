-- upgrade: compatible online
-- stead schema 6 (SQLite): deliveries refused for a bad token are counted per
-- wait; past the limit the wait is locked (locked_at set): it stays open but
-- refuses every event until an operator unlocks or revokes it.
ALTER TABLE waits ADD COLUMN bad_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE waits ADD COLUMN locked_at REAL;
