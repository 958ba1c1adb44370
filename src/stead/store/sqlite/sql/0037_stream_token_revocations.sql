-- upgrade: compatible online
-- stead schema 37 (SQLite): revoked end-user stream tokens (`stead.stream_tokens`).
-- stream_token_revocations: `revoked` is a token's id, or 'run:' and a run id
-- for every token of that run issued at or before `revoked_at`. A row is kept
-- until `expires_at`, when no token it refuses is still alive; a revocation
-- forgets the rows past it.
CREATE TABLE stream_token_revocations (
    revoked    TEXT PRIMARY KEY,
    revoked_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
