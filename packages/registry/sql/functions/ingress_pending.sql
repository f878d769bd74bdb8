-- Pending events of a dataset: its source's change_log rows not visible in the frontier of its
-- active generation (no frontier yet: every event is pending), counted up to p_limit. Uses the
-- snapshot definitions directly (SPEC "Capture rules": not `txid >= xmin(F)`, which a long
-- transaction degrades to a full scan): invisible in F means txid ≥ xmax(F) or txid in xip(F).
-- SECURITY DEFINER since 0025 made the change log private: it returns a count, no event.
CREATE OR REPLACE FUNCTION genfill.ingress_pending(p_dataset text, p_limit bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  src text;
  f pg_snapshot;
  n bigint;
BEGIN
  SELECT c.source_table INTO src FROM genfill.datasets d JOIN genfill.captures c ON c.relid = to_regclass(d.source_table) WHERE d.name = p_dataset;
  IF src IS NULL THEN RETURN 0; END IF;
  SELECT fr.snapshot INTO f FROM genfill.datasets d JOIN genfill.frontiers fr ON fr.dataset = d.name AND fr.generation = d.active_generation
   WHERE d.name = p_dataset;
  IF f IS NULL THEN
    SELECT count(*) INTO n FROM (SELECT 1 FROM genfill.change_log l WHERE l.source_table = src LIMIT p_limit) s;
  ELSE
    SELECT count(*) INTO n FROM (
      SELECT 1 FROM (SELECT 1 FROM genfill.change_log l WHERE l.source_table = src AND l.txid >= pg_snapshot_xmax(f)
                     UNION ALL
                     SELECT 1 FROM genfill.change_log l WHERE l.source_table = src AND l.txid = ANY (ARRAY(SELECT pg_snapshot_xip(f)))) u
      LIMIT p_limit) s;
  END IF;
  RETURN n;
END $$;
ALTER FUNCTION genfill.ingress_pending(text, bigint) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.ingress_pending(text, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.ingress_pending(text, bigint) TO genfill_operator, genfill_approver, genfill_reader, genfill_service;
