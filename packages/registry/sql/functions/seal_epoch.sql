-- The seal (invariant 7), executed by the projector service for `genfill seal <release>`.
-- Must run in READ COMMITTED: each statement below takes a new snapshot, so B is read after
-- the lock and the CAS, never from an earlier snapshot (a REPEATABLE READ seal read a barrier
-- one batch stale). Raises GFK01 (genfill.take_lock: the seal lock not granted within
-- p_lock_timeout_ms, naming its holders) — the caller retries with backoff —, GFL01 when B does not contain every watermark
-- of the release (DETAIL: the partitions, as JSON; the caller waits for the projector), GFR01
-- for a precondition.
CREATE OR REPLACE FUNCTION genfill.seal_epoch(p_release text, p_lock_timeout_ms integer)
RETURNS TABLE (dataset text, epoch bigint, generation text, barrier text, sealed_from text, lock_wait_ms numeric)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  ds record;
  v_unbuilt bigint;
  v_barrier pg_snapshot;
  v_behind jsonb;
  v_other text;
  v_started timestamptz;
  v_waited numeric;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'seal runs in READ COMMITTED (its barrier must come from a statement after the lock), not %', current_setting('transaction_isolation')
      USING ERRCODE = 'GFR01';
  END IF;
  SELECT r.id, r.dataset, r.state, r.expected_active, r.generation INTO rel FROM genfill.releases r WHERE r.id = p_release;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'release % does not exist', p_release USING ERRCODE = 'GFN01';
  END IF;
  IF rel.state NOT IN ('BUILT', 'APPROVED') THEN
    RAISE EXCEPTION 'release % is %: seal needs every partition built (BUILT, or APPROVED for the short freeze)', p_release, rel.state
      USING ERRCODE = 'GFR01';
  END IF;
  SELECT count(*) INTO v_unbuilt FROM genfill.partitions p WHERE p.release = p_release AND p.status <> 'BUILT';
  IF v_unbuilt > 0 THEN
    RAISE EXCEPTION 'release %: % partitions are not built', p_release, v_unbuilt USING ERRCODE = 'GFR01';
  END IF;
  SELECT d.name, d.active_generation, d.ingress_state, d.ingress_epoch INTO ds FROM genfill.datasets d WHERE d.name = rel.dataset;
  IF ds.active_generation IS NULL THEN
    RAISE EXCEPTION 'dataset % has no active generation: there is no live writer to seal', rel.dataset USING ERRCODE = 'GFR01';
  END IF;
  IF rel.expected_active IS DISTINCT FROM ds.active_generation THEN
    RAISE EXCEPTION 'release % expects % to be active, but % is: it cannot be sealed against this generation', p_release,
      coalesce(rel.expected_active, 'no generation'), ds.active_generation USING ERRCODE = 'GFR01';
  END IF;
  IF ds.ingress_state <> 'OPEN' THEN
    SELECT e.release INTO v_other FROM genfill.epochs e WHERE e.dataset = rel.dataset AND e.epoch = ds.ingress_epoch;
    RAISE EXCEPTION 'dataset % is already sealed (epoch %, by release %): one release per dataset is sealed at a time; `genfill unseal %` first',
      rel.dataset, ds.ingress_epoch, coalesce(v_other, '?'), coalesce(v_other, '<release>') USING ERRCODE = 'GFR01';
  END IF;

  -- The seal lock, exclusive: it waits for the batches in their tail, and later batches queue
  -- behind it (take_lock.sql).
  v_started := clock_timestamp();
  PERFORM genfill.take_lock('seal', rel.dataset, 'exclusive', p_lock_timeout_ms);
  v_waited := round((extract(epoch FROM clock_timestamp() - v_started) * 1000)::numeric, 1);

  UPDATE genfill.datasets d SET ingress_state = 'SEALED'
   WHERE d.name = rel.dataset AND d.ingress_state = 'OPEN' AND d.ingress_epoch = ds.ingress_epoch AND d.active_generation = ds.active_generation;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'dataset % changed while the seal waited for its lock; run seal again', rel.dataset USING ERRCODE = 'GFR01';
  END IF;
  -- A statement after the lock and the CAS: the committed frontier, B.
  SELECT f.snapshot INTO v_barrier FROM genfill.frontiers f WHERE f.dataset = rel.dataset AND f.generation = ds.active_generation;
  IF v_barrier IS NULL THEN
    RAISE EXCEPTION 'dataset % has no projector frontier for %: adopt with capture (or run `genfill projector`) first', rel.dataset, ds.active_generation
      USING ERRCODE = 'GFR01';
  END IF;
  SELECT jsonb_agg(jsonb_build_object('partition', w.partition, 'watermark', w.watermark) ORDER BY w.partition) INTO v_behind
    FROM (SELECT DISTINCT rc.partition, rc.watermark::text AS watermark FROM genfill.receipts rc WHERE rc.release = p_release
           AND NOT genfill.snapshot_contains(v_barrier, rc.watermark)) w;
  IF v_behind IS NOT NULL THEN
    RAISE EXCEPTION 'the projector frontier % of % does not yet contain the watermarks of % partitions', v_barrier, rel.dataset, jsonb_array_length(v_behind)
      USING ERRCODE = 'GFL01', DETAIL = v_behind::text;
  END IF;

  UPDATE genfill.epochs e SET release = p_release, sealed_from = rel.state, sealed_at = clock_timestamp(),
         sealed_by = genfill.current_principal(), barrier = v_barrier
   WHERE e.dataset = rel.dataset AND e.epoch = ds.ingress_epoch;
  IF NOT FOUND THEN
    INSERT INTO genfill.epochs (dataset, epoch, generation, opened_for, release, sealed_from, sealed_at, sealed_by, barrier)
    VALUES (rel.dataset, ds.ingress_epoch, ds.active_generation, 'unrecorded', p_release, rel.state, clock_timestamp(), genfill.current_principal(), v_barrier);
  END IF;
  UPDATE genfill.releases r SET state = 'INGRESS_SEALED', state_changed_at = now() WHERE r.id = p_release AND r.state = rel.state;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'release % changed state while sealing; run seal again', p_release USING ERRCODE = 'GFR01';
  END IF;
  INSERT INTO genfill.release_log (release, action, from_state, to_state, detail)
  VALUES (p_release, 'seal', rel.state, 'INGRESS_SEALED',
          jsonb_build_object('dataset', rel.dataset, 'epoch', ds.ingress_epoch, 'barrier', v_barrier::text, 'lockWaitMs', v_waited));
  RETURN QUERY SELECT rel.dataset, ds.ingress_epoch, ds.active_generation, v_barrier::text, rel.state, v_waited;
END $$;
ALTER FUNCTION genfill.seal_epoch(text, integer) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.seal_epoch(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.seal_epoch(text, integer) TO genfill_service;
