-- Let a lease go when the read is done (its holder, as the principal that holds it); false
-- when there was none.
CREATE OR REPLACE FUNCTION genfill.reader_lease_release(p_dataset text, p_generation text, p_holder text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  DELETE FROM genfill.reader_leases l
   WHERE l.dataset = p_dataset AND l.generation = p_generation AND l.holder = p_holder
     AND l.principal = genfill.current_principal();
  RETURN FOUND;
END $$;
ALTER FUNCTION genfill.reader_lease_release(text, text, text) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.reader_lease_release(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.reader_lease_release(text, text, text) TO genfill_reader, genfill_operator, genfill_approver, genfill_service;
