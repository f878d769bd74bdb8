-- After `genfill capture remove` dropped the triggers and the captures row.
CREATE OR REPLACE FUNCTION genfill.capture_drop_functions(p_relid oid) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  f regprocedure;
  n integer := 0;
BEGIN
  IF EXISTS (SELECT 1 FROM genfill.captures c WHERE c.relid = p_relid) THEN
    RAISE EXCEPTION 'capture_drop_functions: % is still captured', p_relid::regclass USING ERRCODE = 'GFR01';
  END IF;
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p WHERE p.pronamespace = 'genfill'::regnamespace
              AND p.proname IN (format('capture_%s_insert', p_relid), format('capture_%s_update', p_relid), format('capture_%s_delete', p_relid)) LOOP
    IF EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgfoid = f) THEN
      RAISE EXCEPTION 'capture_drop_functions: % still fires %: drop the triggers first', f,
        (SELECT string_agg(format('%s on %s', t.tgname, t.tgrelid::regclass), ', ') FROM pg_trigger t WHERE t.tgfoid = f) USING ERRCODE = 'GFR01';
    END IF;
    EXECUTE format('DROP FUNCTION %s', f);
    n := n + 1;
  END LOOP;
  RETURN n;
END $$;
ALTER FUNCTION genfill.capture_drop_functions(oid) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.capture_drop_functions(oid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.capture_drop_functions(oid) TO genfill_service;
