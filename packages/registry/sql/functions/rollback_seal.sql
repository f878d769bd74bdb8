-- The rollback's seal: READ COMMITTED, like genfill.seal_epoch — the exclusive seal lock with a
-- short timeout (GFK01 past it, genfill.take_lock: the caller retries), the CAS OPEN → SEALED, then B′ read in
-- a later statement (the committed frontier of the active generation).
CREATE OR REPLACE FUNCTION genfill.rollback_seal(p_release text, p_lock_timeout_ms integer)
RETURNS TABLE (dataset text, epoch bigint, generation text, barrier text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  ds record;
  v_why text;
  v_barrier pg_snapshot;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'the rollback seal runs in READ COMMITTED' USING ERRCODE = 'GFR01';
  END IF;
  v_why := genfill.rollback_refusal(p_release);
  IF v_why IS NOT NULL THEN
    RAISE EXCEPTION '%', v_why USING ERRCODE = 'GFR01';
  END IF;
  SELECT r.dataset, r.generation INTO rel FROM genfill.releases r WHERE r.id = p_release;
  SELECT d.active_generation, d.ingress_state, d.ingress_epoch INTO ds FROM genfill.datasets d WHERE d.name = rel.dataset;
  IF ds.active_generation IS DISTINCT FROM rel.generation THEN
    RAISE EXCEPTION 'dataset % reads %, not % of release %', rel.dataset, ds.active_generation, rel.generation, p_release USING ERRCODE = 'GFR01';
  END IF;
  IF ds.ingress_state <> 'OPEN' THEN
    RAISE EXCEPTION 'dataset % is already sealed (epoch %)', rel.dataset, ds.ingress_epoch USING ERRCODE = 'GFR01';
  END IF;
  PERFORM genfill.take_lock('seal', rel.dataset, 'exclusive', p_lock_timeout_ms);
  UPDATE genfill.datasets d SET ingress_state = 'SEALED'
   WHERE d.name = rel.dataset AND d.ingress_state = 'OPEN' AND d.ingress_epoch = ds.ingress_epoch AND d.active_generation = rel.generation;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'dataset % changed while the rollback seal waited for its lock; run rollback again', rel.dataset USING ERRCODE = 'GFR01';
  END IF;
  SELECT f.snapshot INTO v_barrier FROM genfill.frontiers f WHERE f.dataset = rel.dataset AND f.generation = rel.generation;
  UPDATE genfill.epochs e SET release = p_release, sealed_from = 'ACTIVE', sealed_at = clock_timestamp(),
         sealed_by = genfill.current_principal(), barrier = v_barrier
   WHERE e.dataset = rel.dataset AND e.epoch = ds.ingress_epoch;
  INSERT INTO genfill.release_log (release, action, detail)
  VALUES (p_release, 'rollback-seal', jsonb_build_object('dataset', rel.dataset, 'epoch', ds.ingress_epoch, 'barrier', v_barrier::text));
  RETURN QUERY SELECT rel.dataset, ds.ingress_epoch, rel.generation, v_barrier::text;
END $$;
ALTER FUNCTION genfill.rollback_seal(text, integer) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.rollback_seal(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.rollback_seal(text, integer) TO genfill_service;
