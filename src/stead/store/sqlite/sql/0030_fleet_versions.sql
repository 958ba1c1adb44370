-- upgrade: compatible online
-- stead schema 30 (SQLite): what a fleet whose releases overlap needs to
-- know (see stead/store/schema_versions.py).
-- stead_schema: each version from 30 on keeps its name, whether code that
-- knows only the versions before it keeps working once it is applied
-- (compatible), when it was applied and by which stead release; the rows of
-- older versions hold their number alone.
-- worker_hosts: the stead release and the schema version each worker's code
-- runs (NULL: a release before 0.2.0, which did not say), for `stead doctor`
-- and for `stead db migrate`, which applies no breaking migration while a live
-- worker runs older code. Adding a column rewrites no row.
ALTER TABLE stead_schema ADD COLUMN name TEXT;
ALTER TABLE stead_schema ADD COLUMN compatible INTEGER;
ALTER TABLE stead_schema ADD COLUMN applied_at REAL;
ALTER TABLE stead_schema ADD COLUMN stead_version TEXT;
ALTER TABLE worker_hosts ADD COLUMN stead_version TEXT;
ALTER TABLE worker_hosts ADD COLUMN schema_version INTEGER;
