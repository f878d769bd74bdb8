-- `genfill pause|resume`: the operator's flag of an open release, fenced on its old value.
CREATE OR REPLACE FUNCTION genfill.set_operator_pause(p_release text, p_paused boolean, p_reason text, p_detail jsonb)
RETURNS TABLE (state text, changed boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  verb text := CASE WHEN p_paused THEN 'pause' ELSE 'resume' END;
BEGIN
  -- FOR NO KEY UPDATE waits for claims in flight (they hold FOR SHARE): once this returns,
  -- every later claim sees the flag.
  SELECT r.state, r.operator_paused INTO rel FROM genfill.releases r WHERE r.id = p_release FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'release % does not exist: check the id with `genfill status`', p_release USING ERRCODE = 'GFN01';
  END IF;
  IF rel.state IN ('ACTIVE', 'RETIRED', 'ROLLED_BACK', 'CANCELLED') THEN
    RAISE EXCEPTION 'release % is %: % applies only to open releases, nothing was changed', p_release, rel.state, verb
      USING ERRCODE = 'GFR01';
  END IF;
  IF rel.operator_paused = p_paused THEN
    RETURN QUERY SELECT rel.state::text, false;
    RETURN;
  END IF;
  UPDATE genfill.releases r SET operator_paused = p_paused WHERE r.id = p_release AND r.operator_paused = NOT p_paused;
  INSERT INTO genfill.release_log (release, action, reason, detail)
  VALUES (p_release, verb, p_reason, jsonb_build_object('operatorPaused', p_paused) || coalesce(p_detail, '{}'));
  RETURN QUERY SELECT rel.state::text, true;
END $$;
ALTER FUNCTION genfill.set_operator_pause(text, boolean, text, jsonb) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.set_operator_pause(text, boolean, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.set_operator_pause(text, boolean, text, jsonb) TO genfill_operator, genfill_service;
