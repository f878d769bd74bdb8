-- How far a dataset's projector is behind, as counts and ages only (migration 0025: people read
-- the change log no more): the source's events not yet in the frontier F of its active
-- generation — visible in the current snapshot S and not in F, the predicate of
-- packages/capture/src/consume.ts newEventsWhere — counted up to p_limit, with the oldest one's
-- time and age. No capture or no frontier yet: 0 and NULLs (`genfill status --dataset`, the
-- API's status page and the projector's lag metrics all read it).
CREATE OR REPLACE FUNCTION genfill.dataset_pending(p_dataset text, p_limit integer)
RETURNS TABLE (events integer, oldest timestamptz, age_seconds double precision)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  src text;
  f pg_snapshot;
  s pg_snapshot := pg_current_snapshot();
BEGIN
  IF p_limit IS NULL OR p_limit < 1 OR p_limit > 1000000 THEN
    RAISE EXCEPTION 'dataset_pending: count up to 1 to 1000000 events, not %', p_limit USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT c.source_table, fr.snapshot INTO src, f
    FROM genfill.datasets d
    JOIN genfill.captures c ON c.relid = to_regclass(d.source_table)
    JOIN genfill.frontiers fr ON fr.dataset = d.name AND fr.generation = d.active_generation
   WHERE d.name = p_dataset;
  IF src IS NULL OR f IS NULL THEN
    RETURN QUERY SELECT 0, NULL::timestamptz, NULL::double precision;
    RETURN;
  END IF;
  RETURN QUERY
    SELECT count(*)::integer, min(e.logged_at), extract(epoch FROM clock_timestamp() - min(e.logged_at))::double precision
      FROM (SELECT l.logged_at FROM genfill.change_log l
             WHERE l.source_table = src
               AND (l.txid >= pg_snapshot_xmax(f) OR l.txid = ANY (ARRAY(SELECT pg_snapshot_xip(f))))
               AND l.txid < pg_snapshot_xmax(s)
               AND pg_visible_in_snapshot(l.txid, s)
               AND NOT pg_visible_in_snapshot(l.txid, f)
             LIMIT p_limit) AS e;
END $$;
ALTER FUNCTION genfill.dataset_pending(text, integer) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.dataset_pending(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.dataset_pending(text, integer) TO genfill_operator, genfill_approver, genfill_reader, genfill_service;
