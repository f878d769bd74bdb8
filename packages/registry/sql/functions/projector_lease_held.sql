-- A projector batch's tail: whether p_holder still holds the lease of p_dataset under p_token,
-- read FOR SHARE in the caller's transaction (a REPEATABLE READ batch) — a zombie's late commit
-- either lands before a takeover (which waits for this row lock) or finds the row changed under
-- its snapshot (40001) and writes nothing. Owner-side because FOR SHARE needs UPDATE on the
-- table, which the fleet does not hold (leases change only through projector_acquire, _renew
-- and _release): run as a plain genfill_service login, the batch's own FOR SHARE was refused
-- ("permission denied for table projector_leases") and the projector applied nothing.
CREATE OR REPLACE FUNCTION genfill.projector_lease_held(p_dataset text, p_holder text, p_token bigint)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM 1 FROM genfill.projector_leases l
   WHERE l.dataset = p_dataset AND l.holder = p_holder AND l.token = p_token
     FOR SHARE;
  RETURN FOUND;
END $$;
ALTER FUNCTION genfill.projector_lease_held(text, text, bigint) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.projector_lease_held(text, text, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.projector_lease_held(text, text, bigint) TO genfill_service;
