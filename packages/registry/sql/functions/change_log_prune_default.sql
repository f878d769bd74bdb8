-- Rows of the DEFAULT partition below the horizon, at most p_limit of them (a bounded batch:
-- the caller repeats). The horizon used is the smaller of the caller's and the current one,
-- so no caller can delete an event still needed. Returns the rows deleted.
CREATE OR REPLACE FUNCTION genfill.change_log_prune_default(p_horizon pg_snapshot, p_limit integer)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_h pg_snapshot := genfill.snapshot_least(p_horizon, genfill.log_horizon());
  n bigint;
BEGIN
  IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000000 THEN
    RAISE EXCEPTION 'a batch is 1 to 1,000,000 rows, not %', p_limit USING ERRCODE = 'invalid_parameter_value';
  END IF;
  WITH doomed AS (
    SELECT d.ctid FROM genfill.change_log_default d WHERE d.txid < pg_snapshot_xmin(v_h) LIMIT p_limit)
  DELETE FROM genfill.change_log_default d USING doomed WHERE d.ctid = doomed.ctid;
  GET DIAGNOSTICS n = ROW_COUNT;
  IF n > 0 THEN
    INSERT INTO genfill.change_log_prunes (what, partition, rows, horizon)
    VALUES ('default-rows', 'genfill.change_log_default', n, v_h);
  END IF;
  RETURN n;
END $$;
ALTER FUNCTION genfill.change_log_prune_default(pg_snapshot, integer) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.change_log_prune_default(pg_snapshot, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.change_log_prune_default(pg_snapshot, integer) TO genfill_service;
