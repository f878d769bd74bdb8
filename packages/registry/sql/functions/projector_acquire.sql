-- The lease: a new token when taken — expired, or p_holder's own (a restarted holder with the
-- same id fences its earlier self) —, NULL while another holder's is current.
CREATE OR REPLACE FUNCTION genfill.projector_acquire(p_dataset text, p_holder text, p_ttl_ms integer)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_token bigint;
BEGIN
  INSERT INTO genfill.projector_leases AS l (dataset, holder, token, expires_at)
  VALUES (p_dataset, p_holder, 1, clock_timestamp() + p_ttl_ms * interval '1 millisecond')
  ON CONFLICT (dataset) DO UPDATE
     SET holder = EXCLUDED.holder, token = l.token + 1, acquired_at = clock_timestamp(), expires_at = EXCLUDED.expires_at
   WHERE l.expires_at < clock_timestamp() OR l.holder = EXCLUDED.holder
  RETURNING l.token INTO v_token;
  RETURN v_token;
END $$;
ALTER FUNCTION genfill.projector_acquire(text, text, integer) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.projector_acquire(text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.projector_acquire(text, text, integer) TO genfill_service;
