-- upgrade: compatible online
-- stead schema 34 (SQLite): the requests a run's model calls sent.
-- conversation_parts: the messages and parameters of those requests, each
-- under its `name`: the sha256 (32 hex characters) of its canonical JSON after
-- the name of the message before it (`parent`; NULL for a conversation's first
-- message and for a request's parameters). A model call's journal record names the last
-- message of the list it sent and its parameters (see
-- `stead.store.transactions.conversations`), so a conversation that grows by
-- appending stores each message once, however many calls send it: its size is
-- linear in its turns. Rows belong to one run and go with it (retention, a
-- task's erasure); a fork copies those its journal prefix names.
CREATE TABLE conversation_parts (
    run_id  TEXT NOT NULL,
    name    TEXT NOT NULL,
    parent  TEXT,
    body    TEXT NOT NULL,
    PRIMARY KEY (run_id, name)
);
