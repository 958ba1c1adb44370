-- upgrade: compatible online
-- stead schema 38 (PostgreSQL): a step's arguments by parameter name.
-- journal.arguments (and journal_archive.arguments, which a migration copies
-- it into): what a step was called with, as JSON text `{"args", "kwargs",
-- "names"}`, each value clipped and secrets masked (see `stead.run.steps`),
-- so a person reads `order_id: "o-7731"`. Shown, never replayed: NULL for
-- every other record and for steps journaled before. Older code names the
-- journal's columns in every statement, so a new nullable column changes
-- nothing it reads or writes; adding it rewrites no row.
ALTER TABLE journal ADD COLUMN arguments TEXT;
ALTER TABLE journal_archive ADD COLUMN arguments TEXT;
