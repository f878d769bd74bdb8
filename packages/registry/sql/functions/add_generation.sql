-- Add a generation to a dataset's parent: CREATE TABLE + ATTACH PARTITION, never
-- CREATE TABLE … PARTITION OF (which locks the parent against readers). The CHECK
-- constraint lets ATTACH skip its validation scan. Idempotent.
CREATE OR REPLACE FUNCTION genfill.add_generation(p_dataset text, p_generation text) RETURNS regclass
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  parent regclass := to_regclass(format('genfill_data.%I', p_dataset));
  child_name text := genfill.generation_table(p_dataset, p_generation);
  child regclass := to_regclass(format('genfill_data.%I', child_name));
BEGIN
  IF parent IS NULL THEN
    RAISE EXCEPTION 'dataset % has no generation table yet', p_dataset USING ERRCODE = 'undefined_table';
  END IF;
  IF octet_length(child_name) > 63 THEN
    RAISE EXCEPTION 'generation table name % is longer than 63 bytes: shorten the dataset or generation id', child_name
      USING ERRCODE = 'name_too_long';
  END IF;
  IF child IS NOT NULL AND EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = child AND inhparent = parent) THEN
    RETURN child;
  END IF;
  IF child IS NULL THEN
    EXECUTE format('CREATE TABLE genfill_data.%I (LIKE %s INCLUDING DEFAULTS)', child_name, parent);
    child := to_regclass(format('genfill_data.%I', child_name));
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = child AND conname = 'gf_generation_' || md5(p_generation)) THEN
    EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (generation = %L)', child, 'gf_generation_' || md5(p_generation), p_generation);
  END IF;
  EXECUTE format('ALTER TABLE %s ATTACH PARTITION %s FOR VALUES IN (%L)', parent, child, p_generation);
  EXECUTE format('REVOKE ALL ON %s FROM PUBLIC', child);
  RETURN child;
END $$;
ALTER FUNCTION genfill.add_generation(text, text) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.add_generation(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.add_generation(text, text) TO genfill_service;
