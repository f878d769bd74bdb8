-- The cutover's compare-and-swap (invariant 11), called inside the cutover's REPEATABLE READ
-- transaction, which then applies (B, S_cut] to the new generation and moves its frontier to
-- S_cut before it commits. Each precondition that fails raises GFR01 naming it; nothing is
-- written then (the caller undoes the seal).
CREATE OR REPLACE FUNCTION genfill.cutover_switch(p_release text, p_cutover bigint, p_holder text, p_barrier pg_snapshot, p_round bigint, p_root numeric)
RETURNS TABLE (dataset text, from_generation text, to_generation text, closed_epoch bigint, opened_epoch bigint, superseded text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  ds record;
  ep record;
  co record;
  latest record;
  last_round record;
  v_bad jsonb;
  v_n integer;
  v_superseded text;
BEGIN
  SELECT r.id, r.dataset, r.generation, r.expected_active, r.state, r.digest, r.approvals_required, r.submitted_by INTO rel
    FROM genfill.releases r WHERE r.id = p_release FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'release % does not exist', p_release USING ERRCODE = 'GFN01';
  END IF;
  SELECT * INTO co FROM genfill.cutovers c WHERE c.id = p_cutover FOR UPDATE;
  IF NOT FOUND OR co.release <> p_release OR co.state <> 'RUNNING' OR co.holder <> p_holder THEN
    RAISE EXCEPTION 'cutover lease: cutover #% of % is no longer held by % (taken over or finished)', p_cutover, p_release, p_holder
      USING ERRCODE = 'GFS01';
  END IF;
  IF rel.state <> 'CAUGHT_UP' THEN
    RAISE EXCEPTION 'precondition state: release % is %, not CAUGHT_UP', p_release, rel.state USING ERRCODE = 'GFR01';
  END IF;
  SELECT d.name, d.active_generation, d.ingress_state, d.ingress_epoch INTO ds FROM genfill.datasets d WHERE d.name = rel.dataset FOR UPDATE;
  IF ds.active_generation IS DISTINCT FROM rel.expected_active THEN
    RAISE EXCEPTION 'precondition expected-generation: release % expects % active, but % is', p_release,
      coalesce(rel.expected_active, 'no generation'), coalesce(ds.active_generation, 'none') USING ERRCODE = 'GFR01';
  END IF;
  SELECT * INTO ep FROM genfill.epochs e WHERE e.dataset = rel.dataset AND e.epoch = ds.ingress_epoch;
  IF ds.ingress_state <> 'SEALED' OR ep.release IS DISTINCT FROM p_release THEN
    RAISE EXCEPTION 'precondition sealed-epoch: epoch % of % is % and not sealed by %', ds.ingress_epoch, rel.dataset,
      lower(ds.ingress_state), p_release USING ERRCODE = 'GFR01';
  END IF;
  IF ep.barrier::text IS DISTINCT FROM p_barrier::text THEN
    RAISE EXCEPTION 'precondition barrier: epoch % was sealed at %, not at %', ds.ingress_epoch, ep.barrier, p_barrier USING ERRCODE = 'GFR01';
  END IF;
  SELECT jsonb_agg(p.id ORDER BY p.id) INTO v_bad FROM (
    SELECT p.id FROM genfill.partitions p
     WHERE p.release = p_release
       AND (p.status <> 'BUILT'
            OR NOT EXISTS (SELECT 1 FROM genfill.current_receipts rc
                            WHERE rc.release = p_release AND rc.partition = p.id AND rc.release_digest = rel.digest))
     ORDER BY p.id LIMIT 20) p;
  IF v_bad IS NOT NULL THEN
    RAISE EXCEPTION 'precondition manifest: partitions without a built, current receipt of this release: %', v_bad USING ERRCODE = 'GFR01';
  END IF;
  SELECT cr.id, cr.to_snapshot, cr.to_barrier, cr.root INTO last_round
    FROM genfill.catchup_rounds cr WHERE cr.release = p_release ORDER BY cr.id DESC LIMIT 1;
  IF last_round.id IS DISTINCT FROM p_round OR NOT last_round.to_barrier OR last_round.to_snapshot::text <> p_barrier::text
     OR last_round.root <> p_root THEN
    RAISE EXCEPTION 'precondition catch-up-root: the final round to the barrier is #% with root %, not #% with root %',
      last_round.id, last_round.root, p_round, p_root USING ERRCODE = 'GFR01';
  END IF;
  SELECT * INTO latest FROM genfill.approval_chain(p_release);
  IF latest.latest IS NULL OR latest.voided_by IS NOT NULL THEN
    RAISE EXCEPTION 'precondition approvals: the approvals are bound to reconciliation #%, voided by reconciliation #% (%)', latest.approved_on, latest.latest,
      coalesce(latest.latest_state, 'none') USING ERRCODE = 'GFR01';
  END IF;
  IF latest.approvals < rel.approvals_required THEN
    RAISE EXCEPTION 'precondition approvals: % of % approvals on reconciliation #%', latest.approvals, rel.approvals_required, latest.latest USING ERRCODE = 'GFR01';
  END IF;
  IF EXISTS (SELECT 1 FROM genfill.dataset_flags f WHERE f.dataset = rel.dataset AND f.dependency_stale_since IS NOT NULL) THEN
    RAISE EXCEPTION 'precondition dependencies: dataset % is DEPENDENCY_STALE', rel.dataset USING ERRCODE = 'GFR01';
  END IF;

  -- The switch: the pointer (the view follows; no DDL), the epochs, the generations, the releases.
  UPDATE genfill.datasets d SET active_generation = rel.generation, ingress_state = 'OPEN', ingress_epoch = ds.ingress_epoch + 1
   WHERE d.name = rel.dataset AND d.active_generation = rel.expected_active AND d.ingress_epoch = ds.ingress_epoch AND d.ingress_state = 'SEALED';
  UPDATE genfill.epochs e SET closed_at = clock_timestamp() WHERE e.dataset = rel.dataset AND e.epoch = ds.ingress_epoch;
  INSERT INTO genfill.epochs (dataset, epoch, generation, opened_for, opened_by)
  VALUES (rel.dataset, ds.ingress_epoch + 1, rel.generation, format('cutover of %s', p_release), genfill.current_principal());
  UPDATE genfill.generations g SET state = 'RETAINED' WHERE g.dataset = rel.dataset AND g.generation = rel.expected_active;
  UPDATE genfill.generations g SET state = 'ACTIVE' WHERE g.dataset = rel.dataset AND g.generation = rel.generation;
  SELECT r.id INTO v_superseded FROM genfill.releases r
   WHERE r.dataset = rel.dataset AND r.generation = rel.expected_active AND r.state = 'ACTIVE' FOR UPDATE;
  IF v_superseded IS NOT NULL THEN
    UPDATE genfill.releases r SET state = 'SUPERSEDED', state_changed_at = now() WHERE r.id = v_superseded AND r.state = 'ACTIVE';
    INSERT INTO genfill.release_log (release, action, from_state, to_state, detail)
    VALUES (v_superseded, 'superseded', 'ACTIVE', 'SUPERSEDED', jsonb_build_object('by', p_release, 'generation', rel.generation));
  END IF;
  UPDATE genfill.releases r SET state = 'ACTIVE', state_changed_at = now() WHERE r.id = p_release AND r.state = 'CAUGHT_UP';
  INSERT INTO genfill.release_log (release, action, from_state, to_state, detail)
  VALUES (p_release, 'cutover', 'CAUGHT_UP', 'ACTIVE',
          jsonb_build_object('cutover', p_cutover, 'dataset', rel.dataset, 'from', rel.expected_active, 'to', rel.generation,
                             'closedEpoch', ds.ingress_epoch, 'epoch', ds.ingress_epoch + 1, 'barrier', p_barrier::text,
                             'round', p_round, 'root', p_root::text, 'reconciliation', latest.latest, 'approvalChain', to_jsonb(latest.chain),
                             'superseded', v_superseded));
  INSERT INTO genfill.dataset_log (dataset, action, detail)
  VALUES (rel.dataset, 'cutover', jsonb_build_object('release', p_release, 'from', rel.expected_active, 'to', rel.generation, 'epoch', ds.ingress_epoch + 1));
  INSERT INTO genfill.frontiers AS f (dataset, generation, snapshot) VALUES (rel.dataset, rel.generation, p_barrier)
  ON CONFLICT ON CONSTRAINT frontiers_pkey DO UPDATE SET snapshot = EXCLUDED.snapshot, updated_at = clock_timestamp();
  UPDATE genfill.cutovers c SET step = 'switched', switched_at = clock_timestamp(), opened_epoch = ds.ingress_epoch + 1
   WHERE c.id = p_cutover;
  RETURN QUERY SELECT rel.dataset, rel.expected_active, rel.generation, ds.ingress_epoch, ds.ingress_epoch + 1, v_superseded;
END $$;
ALTER FUNCTION genfill.cutover_switch(text, bigint, text, pg_snapshot, bigint, numeric) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.cutover_switch(text, bigint, text, pg_snapshot, bigint, numeric) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.cutover_switch(text, bigint, text, pg_snapshot, bigint, numeric) TO genfill_service;
