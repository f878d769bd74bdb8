-- The planner's check before it plans a release (issue 28): the release's submitter may still
-- read its source and every declared dependency. genfill.submit_release checked it at submit;
-- a REVOKE since then stops the plan here (GFT01, DETAIL the problems as JSON), before the
-- transform is run by anyone. Raises GFN01 for a release that does not exist.
CREATE OR REPLACE FUNCTION genfill.transform_admissible(p_release text) RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  r record;
  problems jsonb;
BEGIN
  SELECT rl.submitted_by, rl.spec INTO r FROM genfill.releases rl WHERE rl.id = p_release;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'release % does not exist', p_release USING ERRCODE = 'GFN01';
  END IF;
  problems := genfill.transform_read_problems(
    r.submitted_by, r.spec#>>'{source,table}',
    ARRAY(SELECT jsonb_array_elements_text(coalesce(r.spec->'dependencies', '[]'))));
  IF jsonb_array_length(problems) > 0 THEN
    RAISE EXCEPTION 'release % is refused: its transform reads what its submitter % may not read now: %', p_release, r.submitted_by,
      (SELECT string_agg(p->>'message', '; ') FROM jsonb_array_elements(problems) p)
      USING ERRCODE = 'GFT01', DETAIL = problems::text;
  END IF;
END $$;
ALTER FUNCTION genfill.transform_admissible(text) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.transform_admissible(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.transform_admissible(text) TO genfill_service;
