-- Extend a held lease; false when it is no longer p_holder's under p_token.
CREATE OR REPLACE FUNCTION genfill.projector_renew(p_dataset text, p_holder text, p_token bigint, p_ttl_ms integer)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  UPDATE genfill.projector_leases l SET expires_at = clock_timestamp() + p_ttl_ms * interval '1 millisecond'
   WHERE l.dataset = p_dataset AND l.holder = p_holder AND l.token = p_token;
  RETURN FOUND;
END $$;
ALTER FUNCTION genfill.projector_renew(text, text, bigint, integer) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.projector_renew(text, text, bigint, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.projector_renew(text, text, bigint, integer) TO genfill_service;
