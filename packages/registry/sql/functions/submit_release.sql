-- `genfill release submit`: the CLI validates the file (zod, static checks, the database
-- probe) and hands over the parsed spec, its digest and the transform SQL; every column is
-- derived here from the spec itself, and the transform's digest from its text.
-- Anyone with EXECUTE may call this from psql without the CLI (issue 28), so the verb holds
-- them to the contract itself: the release format's rules (genfill.release_spec_check), and
-- a transform reads nothing its submitter may not read (genfill.transform_read_problems: SELECT
-- on the source and every declared dependency, the submitter a database role). The transform
-- text itself is checked by every service before each use (@genfill/transform admitTransform).
CREATE OR REPLACE FUNCTION genfill.submit_release(p_spec jsonb, p_digest text, p_transform_sql text)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_id text := p_spec->>'release';
  v_dataset text := p_spec->>'dataset';
  v_transform text := 'sha256:' || encode(sha256(convert_to(p_transform_sql, 'UTF8')), 'hex');
  existing text;
  ds record;
  other record;
  mismatches text[];
  v_read_problems jsonb;
BEGIN
  PERFORM genfill.release_spec_check(p_spec);
  IF v_id IS NULL OR v_dataset IS NULL OR p_spec->'source' IS NULL OR p_spec->'target' IS NULL OR p_spec->'range' IS NULL THEN
    RAISE EXCEPTION 'not a dataBackfillRelease.v1 spec: validate it with genfill release validate' USING ERRCODE = 'GFR01';
  END IF;
  PERFORM genfill.take_lock('dataset', v_dataset, 'exclusive');
  SELECT r.digest INTO existing FROM genfill.releases r WHERE r.id = v_id;
  IF FOUND THEN
    IF existing = p_digest THEN RETURN 'unchanged'; END IF;
    RAISE EXCEPTION 'release % exists with other content (digest %, this file %): a release is immutable; submit the change under a new id', v_id, existing, p_digest
      USING ERRCODE = 'GFC01', DETAIL = existing;
  END IF;

  v_read_problems := genfill.transform_read_problems(
    genfill.current_principal(), p_spec#>>'{source,table}',
    ARRAY(SELECT jsonb_array_elements_text(coalesce(p_spec->'dependencies', '[]'))));
  IF jsonb_array_length(v_read_problems) > 0 THEN
    RAISE EXCEPTION 'release % is refused, nothing was written: %', v_id,
      (SELECT string_agg(p->>'message', '; ') FROM jsonb_array_elements(v_read_problems) p)
      USING ERRCODE = 'GFT01', DETAIL = v_read_problems::text;
  END IF;

  SELECT * INTO ds FROM genfill.datasets d WHERE d.name = v_dataset;
  IF FOUND THEN
    mismatches := array_remove(ARRAY[
      CASE WHEN ds.source_table <> p_spec#>>'{source,table}' THEN format('source.table is %s', ds.source_table) END,
      CASE WHEN ds.target_table <> p_spec#>>'{target,table}' THEN format('target.table is %s', ds.target_table) END,
      CASE WHEN ds.time_column <> p_spec#>>'{source,time}' THEN format('source.time is %s', ds.time_column) END,
      CASE WHEN ds.key_columns <> ARRAY(SELECT jsonb_array_elements_text(p_spec#>'{source,key}'))
           THEN format('source.key is [%s]', array_to_string(ds.key_columns, ', ')) END], NULL);
    IF cardinality(mismatches) > 0 THEN
      RAISE EXCEPTION 'dataset % is registered with other settings: %', v_dataset, array_to_string(mismatches, '; ') USING ERRCODE = 'GFR01';
    END IF;
  ELSE
    SELECT d.name INTO other FROM genfill.datasets d WHERE d.target_table = p_spec#>>'{target,table}';
    IF FOUND THEN
      RAISE EXCEPTION '% is already the target of dataset %; a release of it must name dataset %', p_spec#>>'{target,table}', other.name, other.name
        USING ERRCODE = 'GFR01';
    END IF;
    INSERT INTO genfill.datasets (name, target_table, source_table, key_columns, time_column, created_by)
    VALUES (v_dataset, p_spec#>>'{target,table}', p_spec#>>'{source,table}',
            ARRAY(SELECT jsonb_array_elements_text(p_spec#>'{source,key}')), p_spec#>>'{source,time}', genfill.current_principal());
  END IF;

  SELECT r.id, r.range::text AS range INTO other FROM genfill.releases r
   WHERE r.dataset = v_dataset AND r.generation = p_spec#>>'{target,generation}' AND r.state <> 'CANCELLED'
     AND r.range && tstzrange((p_spec#>>'{range,from}')::timestamptz, (p_spec#>>'{range,to}')::timestamptz, '[)')
   ORDER BY r.id LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'release % overlaps release % (%) of the same dataset and generation', v_id, other.id, other.range
      USING ERRCODE = 'GFO01', DETAIL = other.id, HINT = other.range;
  END IF;

  INSERT INTO genfill.transforms (digest, sql, created_by) VALUES (v_transform, p_transform_sql, genfill.current_principal())
  ON CONFLICT (digest) DO NOTHING;
  INSERT INTO genfill.releases (id, dataset, generation, expected_active, digest, spec, transform_digest, range, timezone, every,
                                approvals_required, owner, deadline, submitted_by)
  VALUES (v_id, v_dataset, p_spec#>>'{target,generation}', p_spec#>>'{target,expectedActive}', p_digest, p_spec, v_transform,
          tstzrange((p_spec#>>'{range,from}')::timestamptz, (p_spec#>>'{range,to}')::timestamptz, '[)'),
          p_spec->>'timezone', p_spec#>>'{partition,every}', (p_spec->>'approvals')::integer, p_spec->>'owner',
          (p_spec->>'deadline')::timestamptz, genfill.current_principal());
  INSERT INTO genfill.release_log (release, action, to_state, detail)
  VALUES (v_id, 'submit', 'DRAFT', jsonb_build_object('digest', p_digest));
  RETURN 'submitted';
END $$;
ALTER FUNCTION genfill.submit_release(jsonb, text, text) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.submit_release(jsonb, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.submit_release(jsonb, text, text) TO genfill_operator, genfill_service;
