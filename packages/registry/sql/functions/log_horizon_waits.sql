-- The transactions the change log's horizon waits for, as people may see them (migration 0025):
-- kind ('backend' or 'prepared'), xid, the prepared transaction's gid (pg_prepared_xacts shows
-- it to every login anyway) and when it began — what `genfill status --dataset` needs to say
-- "the log is kept from it on until it ends". The horizon is genfill.log_horizon(), not the
-- caller's: genfill.log_horizon_transactions takes any snapshot and names each session's pid,
-- role, application and database, which stays the service's (pruning, /metrics).
CREATE OR REPLACE FUNCTION genfill.log_horizon_waits()
RETURNS TABLE (kind text, xid text, gid text, started timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT t.kind, t.xid, t.gid, t.started FROM genfill.log_horizon_transactions(genfill.log_horizon()) t
$$;
ALTER FUNCTION genfill.log_horizon_waits() OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.log_horizon_waits() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.log_horizon_waits() TO genfill_operator, genfill_approver, genfill_reader, genfill_service;
