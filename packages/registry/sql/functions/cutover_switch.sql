-- The cutover's compare-and-swap (invariant 11), called inside the cutover's REPEATABLE READ
-- transaction, which then applies (B, S_cut] to the new generation and moves its frontier to
-- S_cut before it commits. The preconditions are genfill.cutover_preconditions (phase
-- 'switch'): any that fails raises GFR01 naming each; nothing is written then (the caller undoes
-- the seal).
CREATE OR REPLACE FUNCTION genfill.cutover_switch(p_release text, p_cutover bigint, p_holder text, p_barrier pg_snapshot, p_round bigint, p_root numeric)
RETURNS TABLE (dataset text, from_generation text, to_generation text, closed_epoch bigint, opened_epoch bigint, superseded text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  ds record;
  co record;
  latest record;
  v_refused text;
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
  SELECT d.name, d.active_generation, d.ingress_state, d.ingress_epoch INTO ds FROM genfill.datasets d WHERE d.name = rel.dataset FOR UPDATE;
  -- The same precondition list `genfill cutover --dry-run` shows, with the switch's own checks:
  -- every failed one named in one refusal.
  SELECT string_agg(format('precondition %s: %s', c.name, c.detail), '; ') INTO v_refused
    FROM genfill.cutover_preconditions(p_release, 'switch', p_barrier, p_round, p_root) AS c WHERE NOT c.ok;
  IF v_refused IS NOT NULL THEN
    RAISE EXCEPTION '%', v_refused USING ERRCODE = 'GFR01';
  END IF;
  SELECT * INTO latest FROM genfill.approval_chain(p_release);

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
