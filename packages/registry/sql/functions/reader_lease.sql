-- Take or extend p_holder's lease on a readable generation until now + p_ttl_ms; returns the
-- new expiry. Refuses a gone generation (GFG01, the reason from genfill.generation_gone as
-- the message, the state as DETAIL), an unknown dataset or generation (GFN01) and a bad
-- holder or TTL (22023). Leases of the dataset that expired more than an hour ago are
-- dropped on the way: nothing reads them.
--
-- genfill.reader_lease of 0016, with one change (0018): the generation's row is read FOR KEY SHARE,
-- held by the page's transaction. A cutover's or rollback's UPDATE of the row (FOR NO KEY
-- UPDATE) still never waits for readers; genfill.retire_generation (FOR UPDATE) waits for
-- every page in flight, and a page that waited for a retirement reads the row as retired (a
-- READ COMMITTED row lock returns the latest version) and is refused (410) before reading.
-- In 0016 an extended lease (ON CONFLICT DO UPDATE) took no lock on the row: a page could pass
-- its check, lose the race to the retirement and find its partition detached (an empty page).
--
-- Bounded (migration 0026): a lease is its principal's. Another principal cannot renew (or
-- take over) a live lease (GFQ04; the holder name is taken: pick another) — before 0026 any
-- reader extended anyone's lease. And a lease cannot outlive the owner's
-- reader_lease.max_lifetime counted from its first grant (taken_at): its expiry is capped
-- there: a renewal then returns the capped expiry, and once that has passed the holder name is
-- refused (GFQ05) until the expired row is dropped, so retention and pruning go on. A lease
-- that expired before its cap is taken afresh (a new first grant), by its principal or another.
CREATE OR REPLACE FUNCTION genfill.reader_lease(p_dataset text, p_generation text, p_holder text, p_ttl_ms integer)
RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_state text;
  v_gone text;
  v_expires timestamptz;
  v_max interval := genfill.setting('reader_lease.max_lifetime')::interval;
  v_principal text := genfill.current_principal();
  v_held record;
BEGIN
  IF p_holder IS NULL OR length(p_holder) NOT BETWEEN 1 AND 200 THEN
    RAISE EXCEPTION 'a reader lease needs a holder of 1 to 200 characters' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF p_ttl_ms IS NULL OR p_ttl_ms NOT BETWEEN 1000 AND 86400000 THEN
    RAISE EXCEPTION 'a reader lease lasts 1 s to 24 h, not % ms', p_ttl_ms USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM genfill.datasets d WHERE d.name = p_dataset) THEN
    RAISE EXCEPTION 'dataset % does not exist', p_dataset USING ERRCODE = 'GFN01';
  END IF;
  SELECT g.state INTO v_state FROM genfill.generations g WHERE g.dataset = p_dataset AND g.generation = p_generation FOR KEY SHARE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'dataset % has no generation %', p_dataset, p_generation USING ERRCODE = 'GFN01';
  END IF;
  v_gone := genfill.generation_gone(p_dataset, p_generation);
  IF v_gone IS NOT NULL THEN
    RAISE EXCEPTION '%', v_gone USING ERRCODE = 'GFG01', DETAIL = v_state;
  END IF;
  DELETE FROM genfill.reader_leases l
   WHERE l.dataset = p_dataset AND l.expires_at < clock_timestamp() - interval '1 hour';
  SELECT l.principal, l.taken_at, l.expires_at INTO v_held FROM genfill.reader_leases l
   WHERE l.dataset = p_dataset AND l.generation = p_generation AND l.holder = p_holder;
  IF FOUND THEN
    IF v_held.expires_at >= clock_timestamp() AND v_held.principal IS DISTINCT FROM v_principal THEN
      RAISE EXCEPTION 'the reader lease % on %/% is held by another principal: a principal renews only its own lease (use another holder name)',
        p_holder, p_dataset, p_generation USING ERRCODE = 'GFQ04';
    END IF;
    -- At its cap: not extended. A page may still read until the lease expires; after that the
    -- holder name stays refused until the row is dropped (an hour after it expired, below), so
    -- there is a time without the lease for retention to act in.
    IF v_held.expires_at >= v_held.taken_at + v_max THEN
      IF v_held.expires_at >= clock_timestamp() THEN
        RETURN v_held.expires_at;
      END IF;
      RAISE EXCEPTION 'the reader lease % on %/% was first granted at % and may not outlive reader_lease.max_lifetime (%): it is not extended; finish the read',
        p_holder, p_dataset, p_generation, v_held.taken_at, v_max
        USING ERRCODE = 'GFQ05', DETAIL = jsonb_build_object('takenAt', v_held.taken_at, 'expiresAt', v_held.expires_at, 'maxLifetime', v_max::text)::text;
    END IF;
  END IF;
  -- The row of a live lease is its principal's (checked above; the WHERE fences a concurrent
  -- take-over between the check and here); an expired one is granted afresh.
  INSERT INTO genfill.reader_leases AS l (dataset, generation, holder, expires_at)
  VALUES (p_dataset, p_generation, p_holder, least(clock_timestamp() + p_ttl_ms * interval '1 millisecond', clock_timestamp() + v_max))
  ON CONFLICT (dataset, generation, holder) DO UPDATE
     SET expires_at = CASE WHEN l.expires_at < clock_timestamp() THEN EXCLUDED.expires_at ELSE least(EXCLUDED.expires_at, l.taken_at + v_max) END,
         renewed_at = clock_timestamp(), principal = EXCLUDED.principal,
         taken_at = CASE WHEN l.expires_at < clock_timestamp() THEN clock_timestamp() ELSE l.taken_at END
   WHERE l.principal = EXCLUDED.principal OR l.expires_at < clock_timestamp()
  RETURNING l.expires_at INTO v_expires;
  IF v_expires IS NULL THEN
    RAISE EXCEPTION 'the reader lease % on %/% is held by another principal: a principal renews only its own lease (use another holder name)',
      p_holder, p_dataset, p_generation USING ERRCODE = 'GFQ04';
  END IF;
  RETURN v_expires;
END $$;
ALTER FUNCTION genfill.reader_lease(text, text, text, integer) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.reader_lease(text, text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.reader_lease(text, text, text, integer) TO genfill_reader, genfill_operator, genfill_approver, genfill_service;
