-- The retired generation's table was dropped (by the service, on its owner connection).
CREATE OR REPLACE FUNCTION genfill.record_generation_dropped(p_dataset text, p_generation text, p_detail jsonb)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM genfill.generations g WHERE g.dataset = p_dataset AND g.generation = p_generation AND g.state = 'RETIRED') THEN
    RAISE EXCEPTION 'generation % of % is not RETIRED', p_generation, p_dataset USING ERRCODE = 'GFR01';
  END IF;
  IF to_regclass(format('genfill_data.%I', genfill.generation_table(p_dataset, p_generation))) IS NOT NULL THEN
    RAISE EXCEPTION 'the table of generation % of % still exists', p_generation, p_dataset USING ERRCODE = 'GFR01';
  END IF;
  INSERT INTO genfill.dataset_log (dataset, action, generation, detail)
  VALUES (p_dataset, 'generation-dropped', p_generation, jsonb_build_object('generation', p_generation) || coalesce(p_detail, '{}'));
END $$;
ALTER FUNCTION genfill.record_generation_dropped(text, text, jsonb) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.record_generation_dropped(text, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.record_generation_dropped(text, text, jsonb) TO genfill_service;
