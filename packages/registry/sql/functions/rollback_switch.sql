-- The rollback's compare-and-swap, inside the rollback's REPEATABLE READ transaction (which then
-- applies the rest of the log to the old generation and moves its frontier before it commits).
CREATE OR REPLACE FUNCTION genfill.rollback_switch(p_release text, p_record bigint, p_holder text, p_barrier pg_snapshot)
RETURNS TABLE (dataset text, from_generation text, to_generation text, closed_epoch bigint, opened_epoch bigint, reactivated text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  ds record;
  ep record;
  co record;
  v_why text;
  v_back text;
  v_prev text;
BEGIN
  SELECT r.id, r.dataset, r.generation INTO rel FROM genfill.releases r WHERE r.id = p_release FOR UPDATE;
  SELECT * INTO co FROM genfill.cutovers c WHERE c.id = p_record FOR UPDATE;
  IF NOT FOUND OR co.release <> p_release OR co.kind <> 'rollback' OR co.state <> 'RUNNING' OR co.holder <> p_holder THEN
    RAISE EXCEPTION 'rollback lease: rollback #% of % is no longer held by %', p_record, p_release, p_holder USING ERRCODE = 'GFS01';
  END IF;
  v_why := genfill.rollback_refusal(p_release);
  IF v_why IS NOT NULL THEN
    RAISE EXCEPTION 'precondition: %', v_why USING ERRCODE = 'GFR01';
  END IF;
  v_back := co.to_generation;
  SELECT d.active_generation, d.ingress_state, d.ingress_epoch INTO ds FROM genfill.datasets d WHERE d.name = rel.dataset FOR UPDATE;
  SELECT * INTO ep FROM genfill.epochs e WHERE e.dataset = rel.dataset AND e.epoch = ds.ingress_epoch;
  IF ds.active_generation IS DISTINCT FROM rel.generation OR ds.ingress_state <> 'SEALED' OR ep.release IS DISTINCT FROM p_release
     OR ep.sealed_from IS DISTINCT FROM 'ACTIVE' OR ep.barrier::text IS DISTINCT FROM p_barrier::text THEN
    RAISE EXCEPTION 'precondition sealed-epoch: epoch % of % is not sealed by the rollback of % at %', ds.ingress_epoch, rel.dataset, p_release, p_barrier
      USING ERRCODE = 'GFR01';
  END IF;
  UPDATE genfill.datasets d SET active_generation = v_back, ingress_state = 'OPEN', ingress_epoch = ds.ingress_epoch + 1
   WHERE d.name = rel.dataset AND d.ingress_epoch = ds.ingress_epoch;
  UPDATE genfill.epochs e SET closed_at = clock_timestamp() WHERE e.dataset = rel.dataset AND e.epoch = ds.ingress_epoch;
  INSERT INTO genfill.epochs (dataset, epoch, generation, opened_for, opened_by)
  VALUES (rel.dataset, ds.ingress_epoch + 1, v_back, format('rollback of %s', p_release), genfill.current_principal());
  UPDATE genfill.generations g SET state = 'RETAINED' WHERE g.dataset = rel.dataset AND g.generation = rel.generation;
  UPDATE genfill.generations g SET state = 'ACTIVE' WHERE g.dataset = rel.dataset AND g.generation = v_back;
  UPDATE genfill.releases r SET state = 'ROLLED_BACK', state_changed_at = now() WHERE r.id = p_release AND r.state = 'ACTIVE';
  INSERT INTO genfill.release_log (release, action, from_state, to_state, detail)
  VALUES (p_release, 'rollback', 'ACTIVE', 'ROLLED_BACK',
          jsonb_build_object('rollback', p_record, 'dataset', rel.dataset, 'from', rel.generation, 'to', v_back,
                             'closedEpoch', ds.ingress_epoch, 'epoch', ds.ingress_epoch + 1, 'barrier', p_barrier::text));
  SELECT r.id INTO v_prev FROM genfill.releases r WHERE r.dataset = rel.dataset AND r.generation = v_back AND r.state = 'SUPERSEDED' FOR UPDATE;
  IF v_prev IS NOT NULL THEN
    UPDATE genfill.releases r SET state = 'ACTIVE', state_changed_at = now() WHERE r.id = v_prev AND r.state = 'SUPERSEDED';
    INSERT INTO genfill.release_log (release, action, from_state, to_state, detail)
    VALUES (v_prev, 'reactivated', 'SUPERSEDED', 'ACTIVE', jsonb_build_object('rollbackOf', p_release, 'generation', v_back));
  END IF;
  INSERT INTO genfill.dataset_log (dataset, action, detail)
  VALUES (rel.dataset, 'rollback', jsonb_build_object('release', p_release, 'from', rel.generation, 'to', v_back, 'epoch', ds.ingress_epoch + 1));
  UPDATE genfill.cutovers c SET step = 'switched', switched_at = clock_timestamp(), opened_epoch = ds.ingress_epoch + 1 WHERE c.id = p_record;
  RETURN QUERY SELECT rel.dataset, rel.generation, v_back, ds.ingress_epoch, ds.ingress_epoch + 1, v_prev;
END $$;
ALTER FUNCTION genfill.rollback_switch(text, bigint, text, pg_snapshot) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.rollback_switch(text, bigint, text, pg_snapshot) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.rollback_switch(text, bigint, text, pg_snapshot) TO genfill_service;
