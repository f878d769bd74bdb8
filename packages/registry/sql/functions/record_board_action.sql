-- Bull Board's kept writes — retry, promote and clean of a release's jobs — recorded in the
-- release's log under the subject who pressed them (issue 28: a queue edit on the board left no
-- record). The queue itself is Redis's; this verb only records, the API then lets bull-board do
-- it. Everything else that writes on the board is refused by the API and never reaches here.
CREATE OR REPLACE FUNCTION genfill.record_board_action(p_release text, p_action text, p_detail jsonb)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_id bigint;
BEGIN
  IF p_action IS NULL OR p_action NOT IN ('retry', 'promote', 'clean') THEN
    RAISE EXCEPTION 'Bull Board action % is not recorded: only retry, promote and clean are kept on the board', p_action
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF p_detail IS NOT NULL AND (jsonb_typeof(p_detail) <> 'object' OR octet_length(p_detail::text) > 4096) THEN
    RAISE EXCEPTION 'the detail of a board action is a JSON object of at most 4 kB' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM genfill.releases r WHERE r.id = p_release) THEN
    RAISE EXCEPTION 'release % does not exist: check the id with `genfill status`', p_release USING ERRCODE = 'GFN01';
  END IF;
  INSERT INTO genfill.release_log (release, action, detail)
  VALUES (p_release, 'board-' || p_action, coalesce(p_detail, '{}') || jsonb_build_object('via', 'bull-board'))
  RETURNING id INTO v_id;
  RETURN v_id;
END $$;
ALTER FUNCTION genfill.record_board_action(text, text, jsonb) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.record_board_action(text, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.record_board_action(text, text, jsonb) TO genfill_operator;
