-- Record a release's cleanup (once; false when it was already recorded) and drop its
-- temporary rows: the throttle's fencing row. p_detail says what went from Redis.
CREATE OR REPLACE FUNCTION genfill.record_release_cleanup(p_release text, p_detail jsonb)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  n integer;
BEGIN
  PERFORM 1 FROM genfill.releases r WHERE r.id = p_release FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'release % does not exist', p_release USING ERRCODE = 'GFN01';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM genfill.releases_due_for_cleanup() d WHERE d.release = p_release) THEN
    IF EXISTS (SELECT 1 FROM genfill.release_log l WHERE l.release = p_release AND l.action = 'cleanup') THEN
      RETURN false;
    END IF;
    RAISE EXCEPTION 'release % is not past its rollback window: nothing of it is cleaned up yet', p_release USING ERRCODE = 'GFR01';
  END IF;
  DELETE FROM genfill.throttle_leases t WHERE t.release = p_release;
  GET DIAGNOSTICS n = ROW_COUNT;
  INSERT INTO genfill.release_log (release, action, detail)
  VALUES (p_release, 'cleanup', coalesce(p_detail, '{}') || jsonb_build_object('throttleLeaseRows', n));
  RETURN true;
END $$;
ALTER FUNCTION genfill.record_release_cleanup(text, jsonb) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.record_release_cleanup(text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.record_release_cleanup(text, jsonb) TO genfill_service;
