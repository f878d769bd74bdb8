-- A first generation's view, created by plan. genfill_owner needs CREATE on the target's
-- schema (GRANT CREATE ON SCHEMA public TO genfill_owner); adopt creates its view as the
-- adopting role instead.
CREATE OR REPLACE FUNCTION genfill.create_target_view(p_dataset text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  target text;
BEGIN
  SELECT target_table INTO STRICT target FROM genfill.datasets WHERE name = p_dataset;
  IF to_regclass(target) IS NOT NULL THEN
    IF (SELECT relkind FROM pg_class WHERE oid = to_regclass(target)) <> 'v' THEN
      RAISE EXCEPTION '% exists and is not a genfill view: adopt it with genfill dataset adopt', target
        USING ERRCODE = 'duplicate_table';
    END IF;
    RETURN;
  END IF;
  EXECUTE format('CREATE VIEW %s AS %s', genfill.quote_qualified(target), genfill.target_view_sql(p_dataset));
END $$;
ALTER FUNCTION genfill.create_target_view(text) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.create_target_view(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.create_target_view(text) TO genfill_service;
