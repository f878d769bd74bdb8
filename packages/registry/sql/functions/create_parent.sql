-- The parent of a dataset's generations, shaped like a template relation (the adopted
-- table, or a view of the first transform's output): generation first, the template's
-- columns, then _gf_rev and _gf_deleted; primary key (generation, key…). No DEFAULT
-- partition: it would forbid DETACH … CONCURRENTLY.
CREATE OR REPLACE FUNCTION genfill.create_parent(p_dataset text, p_template regclass, p_key text[]) RETURNS regclass
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  cols text;
  keys text;
BEGIN
  IF to_regclass(format('genfill_data.%I', p_dataset)) IS NOT NULL THEN
    RETURN to_regclass(format('genfill_data.%I', p_dataset));
  END IF;
  SELECT string_agg(format('%I %s', attname, format_type(atttypid, atttypmod)), ', ' ORDER BY attnum)
    INTO cols
    FROM pg_attribute
   WHERE attrelid = p_template AND attnum > 0 AND NOT attisdropped
     AND attname NOT IN ('generation', '_gf_rev', '_gf_deleted');
  SELECT string_agg(format('%I', k), ', ') INTO keys FROM unnest(p_key) AS k;
  EXECUTE format(
    'CREATE TABLE genfill_data.%I (generation text NOT NULL, %s, _gf_rev bigint NOT NULL DEFAULT 0, '
    '_gf_deleted boolean NOT NULL DEFAULT false, PRIMARY KEY (generation, %s)) PARTITION BY LIST (generation)',
    p_dataset, cols, keys);
  EXECUTE format('REVOKE ALL ON genfill_data.%I FROM PUBLIC', p_dataset);
  RETURN to_regclass(format('genfill_data.%I', p_dataset));
END $$;
ALTER FUNCTION genfill.create_parent(text, regclass, text[]) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.create_parent(text, regclass, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.create_parent(text, regclass, text[]) TO genfill_service;
