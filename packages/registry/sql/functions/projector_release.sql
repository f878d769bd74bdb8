-- Let the lease go at shutdown, so the next holder need not wait for it to expire.
CREATE OR REPLACE FUNCTION genfill.projector_release(p_dataset text, p_holder text, p_token bigint)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  UPDATE genfill.projector_leases l SET expires_at = clock_timestamp() - interval '1 millisecond'
   WHERE l.dataset = p_dataset AND l.holder = p_holder AND l.token = p_token;
  RETURN FOUND;
END $$;
ALTER FUNCTION genfill.projector_release(text, text, bigint) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.projector_release(text, text, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.projector_release(text, text, bigint) TO genfill_service;
