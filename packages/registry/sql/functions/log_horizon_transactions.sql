-- Transactions in progress the horizon waits for (in its xip): a long or prepared transaction
-- holds every frontier — and so the horizon — back until it ends. SECURITY DEFINER to see
-- every session's transaction id (migration 0018 granted genfill_owner pg_read_all_stats).
-- The service's only (0025): the snapshot is the caller's, so a caller could name every xid in
-- progress in the cluster and list those sessions (pid, role, application, database). People
-- read genfill.log_horizon_waits: the real horizon's waits, as kind, xid and start.
CREATE OR REPLACE FUNCTION genfill.log_horizon_transactions(p_horizon pg_snapshot)
RETURNS TABLE (kind text, xid text, pid integer, gid text, role text, application text, session_state text, started timestamptz, database text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT 'backend', a.backend_xid::text, a.pid, NULL::text, a.usename::text, a.application_name, a.state, a.xact_start, a.datname::text
    FROM pg_stat_activity a
   WHERE a.backend_xid IS NOT NULL AND a.backend_xid = ANY (ARRAY(SELECT xid(x) FROM pg_snapshot_xip(p_horizon) AS x))
  UNION ALL
  SELECT 'prepared', p.transaction::text, NULL, p.gid, p.owner::text, NULL, 'prepared', p.prepared, p.database::text
    FROM pg_prepared_xacts p
   WHERE p.transaction = ANY (ARRAY(SELECT xid(x) FROM pg_snapshot_xip(p_horizon) AS x))
   ORDER BY 8
$$;
ALTER FUNCTION genfill.log_horizon_transactions(pg_snapshot) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.log_horizon_transactions(pg_snapshot) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION genfill.log_horizon_transactions(pg_snapshot) FROM genfill_operator, genfill_approver, genfill_reader, genfill_api;
GRANT EXECUTE ON FUNCTION genfill.log_horizon_transactions(pg_snapshot) TO genfill_service;
