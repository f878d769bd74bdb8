-- ANALYZE of a generation table for the reconciler, which logs in as genfill_service: in
-- PostgreSQL 15 only a table's owner may analyze it (others get a WARNING and nothing), and a
-- freshly built candidate without statistics made the old-vs-new pass spill to disk.
CREATE OR REPLACE FUNCTION genfill.analyze_generation(p_dataset text, p_generation text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  t regclass := to_regclass(format('genfill_data.%I', genfill.generation_table(p_dataset, p_generation)));
BEGIN
  IF t IS NOT NULL THEN
    EXECUTE format('ANALYZE %s', t);
  END IF;
END $$;
ALTER FUNCTION genfill.analyze_generation(text, text) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.analyze_generation(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.analyze_generation(text, text) TO genfill_service;
