-- Grants the owner of a captured table what DDL on it needs: the guard runs as the DDL's
-- user, calls capture_ddl_check and creates the triggers on a new partition.
CREATE OR REPLACE FUNCTION genfill.capture_grant_owner(p_relid oid) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  owner_role name := (SELECT pg_get_userbyid(c.relowner) FROM pg_class c WHERE c.oid = p_relid);
  f oid;
BEGIN
  IF owner_role IS NULL THEN RETURN; END IF;
  IF NOT has_schema_privilege(owner_role, 'genfill'::regnamespace, 'USAGE') THEN
    EXECUTE format('GRANT USAGE ON SCHEMA genfill TO %I', owner_role);
  END IF;
  FOR f IN SELECT p.oid FROM pg_proc p WHERE p.pronamespace = 'genfill'::regnamespace
              AND p.proname IN (format('capture_%s_insert', p_relid), format('capture_%s_update', p_relid), format('capture_%s_delete', p_relid),
                                'capture_ddl_check') LOOP
    IF NOT has_function_privilege(owner_role, f, 'EXECUTE') THEN
      EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f::regprocedure, owner_role);
    END IF;
  END LOOP;
END $$;
ALTER FUNCTION genfill.capture_grant_owner(oid) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.capture_grant_owner(oid) FROM PUBLIC;
