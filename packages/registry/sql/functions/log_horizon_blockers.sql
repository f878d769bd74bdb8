-- Transactions of genfill's writers (superusers, members of genfill_service or genfill_owner)
-- in this database that began before p_since, and prepared transactions of theirs from before
-- it. Such a transaction may still record a snapshot it read before p_since (a release floor,
-- a carry watermark): a horizon is used for pruning only if it was taken before every one of
-- them began (packages/retention/src/horizon.ts). The service's only (0025): pruning needs it,
-- `genfill status` does not, and it names genfill's writers' sessions.
CREATE OR REPLACE FUNCTION genfill.log_horizon_blockers(p_since timestamptz)
RETURNS TABLE (kind text, pid integer, gid text, role text, application text, session_state text, started timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT 'backend', a.pid, NULL::text, a.usename::text, a.application_name, a.state, a.xact_start
    FROM pg_stat_activity a
   WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.xact_start < p_since
     AND a.backend_type = 'client backend'
     AND (pg_has_role(a.usesysid, 'genfill_service', 'USAGE') OR pg_has_role(a.usesysid, 'genfill_owner', 'USAGE'))
  UNION ALL
  SELECT 'prepared', NULL, p.gid, p.owner::text, NULL, 'prepared', p.prepared
    FROM pg_prepared_xacts p JOIN pg_roles o ON o.rolname = p.owner
   WHERE p.database = current_database() AND p.prepared < p_since
     AND (pg_has_role(o.oid, 'genfill_service', 'USAGE') OR pg_has_role(o.oid, 'genfill_owner', 'USAGE'))
   ORDER BY 7
$$;
ALTER FUNCTION genfill.log_horizon_blockers(timestamptz) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.log_horizon_blockers(timestamptz) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION genfill.log_horizon_blockers(timestamptz) FROM genfill_operator, genfill_approver, genfill_reader, genfill_api;
GRANT EXECUTE ON FUNCTION genfill.log_horizon_blockers(timestamptz) TO genfill_service;
