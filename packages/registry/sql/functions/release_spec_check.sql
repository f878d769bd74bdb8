-- The release format's rules that matter once a spec is stored (issue 28): the verb enforces
-- them itself, so psql is held to the same contract as the CLI (packages/contracts/src/
-- release.ts holds the zod schema these mirror). Identifiers and names end up in SQL text,
-- queue names and job ids; a range must be a range; enums must be known. Raises
-- invalid_parameter_value (22023) listing every problem; returns nothing when the spec is fine.
CREATE OR REPLACE FUNCTION genfill.release_spec_check(p_spec jsonb) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  ident constant text := '^[A-Za-z_][A-Za-z0-9_]*$';
  qualified constant text := '^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$';
  generation constant text := '^[a-z0-9][a-z0-9_-]{0,39}$';
  problems text[] := '{}';
  v_from timestamptz;
  v_to timestamptz;
  item jsonb;
  list_path text;
BEGIN
  IF jsonb_typeof(p_spec) IS DISTINCT FROM 'object' THEN
    RAISE EXCEPTION 'not a dataBackfillRelease.v1 spec: a JSON object is expected' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF p_spec->>'schema' IS DISTINCT FROM 'dataBackfillRelease.v1' THEN
    problems := problems || 'schema: must be dataBackfillRelease.v1'::text;
  END IF;
  IF jsonb_typeof(p_spec->'release') IS DISTINCT FROM 'string' OR p_spec->>'release' !~ '^[A-Za-z0-9][A-Za-z0-9._@+-]{0,99}$' THEN
    problems := problems || 'release: must be 1–100 characters of letters, digits and . _ @ + - (no ":" or spaces)'::text;
  END IF;
  IF jsonb_typeof(p_spec->'dataset') IS DISTINCT FROM 'string' OR p_spec->>'dataset' !~ ident THEN
    problems := problems || 'dataset: must be a plain SQL identifier (letters, digits, _)'::text;
  END IF;
  IF jsonb_typeof(p_spec#>'{source,table}') IS DISTINCT FROM 'string' OR p_spec#>>'{source,table}' !~ qualified THEN
    problems := problems || 'source.table: must be schema-qualified, e.g. public.orders'::text;
  END IF;
  IF jsonb_typeof(p_spec#>'{source,time}') IS DISTINCT FROM 'string' OR p_spec#>>'{source,time}' !~ ident THEN
    problems := problems || 'source.time: must be a plain SQL identifier'::text;
  END IF;
  IF jsonb_typeof(p_spec#>'{target,table}') IS DISTINCT FROM 'string' OR p_spec#>>'{target,table}' !~ qualified THEN
    problems := problems || 'target.table: must be schema-qualified, e.g. public.orders_enriched'::text;
  END IF;
  IF jsonb_typeof(p_spec#>'{target,generation}') IS DISTINCT FROM 'string' OR p_spec#>>'{target,generation}' !~ generation THEN
    problems := problems || 'target.generation: must be 1–40 characters of lower-case letters, digits, _ and -'::text;
  END IF;
  IF jsonb_typeof(p_spec#>'{target,expectedActive}') IS DISTINCT FROM 'null'
     AND (jsonb_typeof(p_spec#>'{target,expectedActive}') IS DISTINCT FROM 'string' OR p_spec#>>'{target,expectedActive}' !~ generation) THEN
    problems := problems || 'target.expectedActive: must be null or a generation id'::text;
  END IF;
  IF p_spec#>>'{target,writeMode}' IS NULL OR p_spec#>>'{target,writeMode}' NOT IN ('REPLACE_RANGE', 'UPSERT') THEN
    problems := problems || 'target.writeMode: must be REPLACE_RANGE or UPSERT'::text;
  END IF;
  -- Lists of identifiers: the key (at least one), the dependencies, the reconcile columns.
  FOREACH list_path IN ARRAY ARRAY['source.key', 'dependencies', 'reconcile.conserved', 'reconcile.expectedDiff'] LOOP
    item := p_spec #> string_to_array(list_path, '.');
    IF item IS NULL AND list_path <> 'source.key' THEN CONTINUE; END IF;
    IF jsonb_typeof(item) IS DISTINCT FROM 'array'
       OR EXISTS (SELECT 1 FROM jsonb_array_elements(item) e
                   WHERE jsonb_typeof(e) <> 'string' OR e #>> '{}' !~ CASE WHEN list_path = 'dependencies' THEN qualified ELSE ident END)
       OR (SELECT count(*) <> count(DISTINCT e) FROM jsonb_array_elements_text(item) e) THEN
      problems := problems || format('%s: must be a list of distinct %s', list_path,
                                     CASE WHEN list_path = 'dependencies' THEN 'schema-qualified table names' ELSE 'plain SQL identifiers' END);
    ELSIF list_path = 'source.key' AND jsonb_array_length(item) = 0 THEN
      problems := problems || 'source.key: needs at least one key column'::text;
    END IF;
  END LOOP;
  BEGIN
    v_from := (p_spec#>>'{range,from}')::timestamptz;
    v_to := (p_spec#>>'{range,to}')::timestamptz;
    IF v_from IS NULL OR v_to IS NULL OR NOT (v_from < v_to) OR isfinite(v_from) IS NOT TRUE OR isfinite(v_to) IS NOT TRUE THEN
      problems := problems || 'range: from and to must be finite instants with from < to'::text;
    END IF;
  EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR invalid_parameter_value THEN
    problems := problems || 'range: from and to must be ISO-8601 instants'::text;
  END;
  IF jsonb_typeof(p_spec->'timezone') IS DISTINCT FROM 'string'
     OR NOT EXISTS (SELECT 1 FROM pg_timezone_names z WHERE z.name = p_spec->>'timezone') THEN
    problems := problems || 'timezone: must be a time zone name of the server (e.g. Europe/Berlin or UTC)'::text;
  END IF;
  IF jsonb_typeof(p_spec#>'{partition,every}') IS DISTINCT FROM 'string' OR btrim(p_spec#>>'{partition,every}') = '' THEN
    problems := problems || 'partition.every: must be an ISO-8601 duration'::text;
  END IF;
  IF jsonb_typeof(p_spec->'approvals') IS DISTINCT FROM 'number' OR (p_spec->>'approvals')::numeric NOT IN (0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16) THEN
    problems := problems || 'approvals: must be a whole number from 0 to 16'::text;
  END IF;
  IF jsonb_typeof(p_spec->'owner') IS DISTINCT FROM 'string' OR btrim(p_spec->>'owner') = '' THEN
    problems := problems || 'owner: must name an owner'::text;
  END IF;
  BEGIN
    IF (p_spec->>'deadline')::timestamptz IS NULL THEN
      problems := problems || 'deadline: must be an ISO-8601 instant'::text;
    END IF;
  EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR invalid_parameter_value THEN
    problems := problems || 'deadline: must be an ISO-8601 instant'::text;
  END;
  IF cardinality(problems) > 0 THEN
    RAISE EXCEPTION 'the release spec breaks the release format (nothing was written): %; validate it with genfill release validate',
      array_to_string(problems, '; ')
      USING ERRCODE = 'invalid_parameter_value', DETAIL = array_to_json(problems)::text;
  END IF;
END $$;
ALTER FUNCTION genfill.release_spec_check(jsonb) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.release_spec_check(jsonb) FROM PUBLIC;
