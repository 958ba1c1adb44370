-- upgrade: compatible online
-- stead schema 3 (PostgreSQL): when a run ends (completed, failed, cancelled),
-- its open waits close with it, so `stead waits ls` lists only what runs wait for.
CREATE FUNCTION stead_close_waits() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE waits SET state = 'revoked', closed_at = NEW.updated_at
    WHERE run_id = NEW.run_id AND state = 'open';
    RETURN NULL;
END
$$;
CREATE TRIGGER close_waits_of_ended_runs AFTER UPDATE OF status ON runs
FOR EACH ROW WHEN (NEW.status IN ('completed', 'failed', 'cancelled'))
EXECUTE FUNCTION stead_close_waits();
