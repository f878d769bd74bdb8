-- Projector tombstones below the horizon, at most p_limit: a tombstone keeps an older event of
-- its key from resurrecting the row, so it goes once no event of the key at or below its
-- revision is above the horizon — every consumer's frontier then contains them all, and none
-- applies them again. (A retired generation's tombstones went with it.)
CREATE OR REPLACE FUNCTION genfill.compact_projector_tombstones(p_horizon pg_snapshot, p_limit integer)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_h pg_snapshot := genfill.snapshot_least(p_horizon, genfill.log_horizon());
  n bigint;
BEGIN
  IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000000 THEN
    RAISE EXCEPTION 'a batch is 1 to 1,000,000 tombstones, not %', p_limit USING ERRCODE = 'invalid_parameter_value';
  END IF;
  WITH doomed AS (
    SELECT t.dataset, t.generation, t.key
      FROM genfill.projector_tombstones t
      JOIN genfill.datasets d ON d.name = t.dataset
      JOIN genfill.captures c ON c.relid = to_regclass(d.source_table)
     WHERE NOT EXISTS (SELECT 1 FROM genfill.change_log l
                        WHERE l.source_table = c.source_table AND l.key = t.key AND l.revision <= t.revision
                          AND l.txid >= pg_snapshot_xmin(v_h))
     LIMIT p_limit)
  DELETE FROM genfill.projector_tombstones t USING doomed
   WHERE t.dataset = doomed.dataset AND t.generation = doomed.generation AND t.key = doomed.key;
  GET DIAGNOSTICS n = ROW_COUNT;
  IF n > 0 THEN
    INSERT INTO genfill.change_log_prunes (what, rows, horizon) VALUES ('tombstones', n, v_h);
  END IF;
  RETURN n;
END $$;
ALTER FUNCTION genfill.compact_projector_tombstones(pg_snapshot, integer) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.compact_projector_tombstones(pg_snapshot, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.compact_projector_tombstones(pg_snapshot, integer) TO genfill_service;
