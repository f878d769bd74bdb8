-- What a transform may read: no more than its submitter may (issue 28). The services run a
-- transform with the fleet's rights, which read every source; without this check anyone who
-- may submit could copy a table they cannot read into a generation readers can read. The
-- transform's reads are bounded by its declared source and dependencies (the probe refuses an
-- undeclared relation, and a function outside pg_catalog that is not allow-listed), so the
-- submitter must hold SELECT on each of those. The submitter is a principal: a database role —
-- an API token subject that names no role cannot be checked, and is refused.
-- Returns the problems as `[{path, message}]` (empty: admissible). Called by
-- genfill.submit_release and genfill.transform_admissible, which run as the owner.
CREATE OR REPLACE FUNCTION genfill.transform_read_problems(p_submitter text, p_source text, p_dependencies text[])
RETURNS jsonb
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  problems jsonb := '[]';
  rel text;
  i integer := 0;
  path text;
  v_rel regclass;
BEGIN
  IF p_submitter IS NULL OR NOT EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = p_submitter) THEN
    RETURN jsonb_build_array(jsonb_build_object('path', 'submitter', 'message', format(
      'the submitter %s is not a database role (an API token subject?): a transform may read only what its submitter may, '
      'which genfill checks for database logins; submit the release as a login (psql or the genfill CLI)', coalesce(p_submitter, '(none)'))));
  END IF;
  FOREACH rel IN ARRAY ARRAY[p_source] || coalesce(p_dependencies, '{}') LOOP
    path := CASE WHEN i = 0 THEN 'source.table' ELSE format('dependencies[%s]', i - 1) END;
    i := i + 1;
    v_rel := to_regclass(rel);
    IF v_rel IS NULL THEN
      problems := problems || jsonb_build_object('path', path, 'message', format('%s does not exist', rel));
    ELSIF NOT has_table_privilege(p_submitter, v_rel, 'SELECT') THEN
      problems := problems || jsonb_build_object('path', path, 'message', format(
        '%s may not read %s, which the transform reads: a transform reads nothing its submitter cannot; '
        'GRANT SELECT ON %s TO %I (or to a role %s is a member of), then submit again', p_submitter, rel, v_rel, p_submitter, p_submitter));
    END IF;
  END LOOP;
  RETURN problems;
END $$;
ALTER FUNCTION genfill.transform_read_problems(text, text, text[]) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.transform_read_problems(text, text, text[]) FROM PUBLIC;
