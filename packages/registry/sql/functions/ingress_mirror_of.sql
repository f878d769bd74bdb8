-- The ingress mirror behind a dataset, or an exception naming the fix. Internal: called by the
-- ingress verbs (ingest_apply, ingress_record_conflict, ingress_compact_tombstones) as
-- genfill_owner.
CREATE OR REPLACE FUNCTION genfill.ingress_mirror_of(p_dataset text)
RETURNS TABLE (source_table text, relid oid, key_columns text[], columns text[])
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  ds record;
  cap record;
BEGIN
  SELECT d.name, d.source_table INTO ds FROM genfill.datasets d WHERE d.name = p_dataset;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'dataset % does not exist: a dataset is registered by its first `genfill release submit` (or `genfill dataset adopt`)', p_dataset
      USING ERRCODE = 'GFN01';
  END IF;
  SELECT c.source_table, c.relid, c.mode, c.key_columns INTO cap FROM genfill.captures c WHERE c.relid = to_regclass(ds.source_table);
  IF NOT FOUND OR cap.mode <> 'ingress' THEN
    RAISE EXCEPTION 'the source of dataset %, %, is not an ingress mirror%: run `genfill capture install % --ingress` first', p_dataset, ds.source_table,
      CASE WHEN cap.mode = 'trigger' THEN ' (it is captured by triggers: its own writes reach the log; `genfill capture remove` it before making it a mirror)' ELSE '' END,
      ds.source_table
      USING ERRCODE = 'GFR01';
  END IF;
  RETURN QUERY SELECT cap.source_table, cap.relid, cap.key_columns,
    ARRAY(SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = cap.relid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum);
END $$;
ALTER FUNCTION genfill.ingress_mirror_of(text) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.ingress_mirror_of(text) FROM PUBLIC;
