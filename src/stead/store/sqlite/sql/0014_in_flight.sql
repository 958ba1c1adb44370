-- upgrade: compatible online
-- stead schema 14 (SQLite): the calls a run's holder has in flight.
-- in_flight: JSON list of the started markers ({addr, attempt, kind, name,
-- digest, epoch}) of the calls the holder had in flight at its last lease
-- renewal and had not journaled yet; NULL when none. A takeover counts such
-- an attempt as died, as it does a journaled started marker.
ALTER TABLE runs ADD COLUMN in_flight TEXT;
