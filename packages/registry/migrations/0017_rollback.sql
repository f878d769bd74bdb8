-- 0017_rollback: the switch back (SPEC invariant 13) — nothing written since the cutover is lost.
-- Add-only: never edit this file once landed; add 0018_… instead.
--
-- `genfill rollback <release>` (packages/projector/src/rollback.ts) runs under the same lease as
-- a cutover (a RUNNING row of genfill.cutovers, now with a kind): first, unsealed replay rounds
-- apply the events since the old generation's frontier (B, where the cutover sealed it) to the
-- RETAINED old generation through its own transform map, moving its own frontier, so the freeze
-- covers only the tail; then genfill.rollback_seal seals epoch E+1 at B′ (the committed frontier
-- of the active generation), and one REPEATABLE READ transaction — genfill.rollback_switch, then
-- the apply of the rest of the log (to its own snapshot) to the old generation and its frontier
-- moved there — switches the pointer back and opens E+2 on the old generation. The release is
-- ROLLED_BACK, the release it had superseded ACTIVE again, the old generation ACTIVE, the rolled-
-- back one RETAINED (readers pinned to it keep reading until retention retires it). Roll forward
-- again = a new release expecting the old generation.

ALTER TABLE genfill.cutovers ADD COLUMN kind text NOT NULL DEFAULT 'cutover' CHECK (kind IN ('cutover', 'rollback'));

-- Requests gain the rollback (the projector service runs it).
ALTER TABLE genfill.requests DROP CONSTRAINT requests_kind_check;
ALTER TABLE genfill.requests ADD CONSTRAINT requests_kind_check
  CHECK (kind IN ('plan', 'reconcile', 'repair', 'seal', 'unseal', 'catchup', 'cutover', 'rollback'));
CREATE OR REPLACE FUNCTION genfill.request(p_kind text, p_release text, p_args jsonb)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_id bigint;
BEGIN
  IF p_kind NOT IN ('plan', 'reconcile', 'repair', 'seal', 'unseal', 'catchup', 'cutover', 'rollback') THEN
    RAISE EXCEPTION 'unknown request kind %', p_kind USING ERRCODE = 'GFR01';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM genfill.releases r WHERE r.id = p_release) THEN
    RAISE EXCEPTION 'release % does not exist: submit it with `genfill release submit <file>`', p_release USING ERRCODE = 'GFN01';
  END IF;
  INSERT INTO genfill.requests (kind, release, args) VALUES (p_kind, p_release, coalesce(p_args, '{}')) RETURNING id INTO v_id;
  PERFORM pg_notify('genfill_requests', p_kind);
  RETURN v_id;
END $$;

-- Why a rollback of p_release is refused now, or NULL: the release is not ACTIVE, its cutover is
-- not recorded, the generation it replaced is gone (retired), or another open release expects
-- the release's generation as its active one (it would lose its base).
CREATE FUNCTION genfill.rollback_refusal(p_release text)
RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  co record;
  g record;
  v_other text;
BEGIN
  SELECT r.id, r.dataset, r.generation, r.state INTO rel FROM genfill.releases r WHERE r.id = p_release;
  IF NOT FOUND THEN
    RETURN format('release %s does not exist', p_release);
  END IF;
  IF rel.state <> 'ACTIVE' THEN
    RETURN format('release %s is %s: only the ACTIVE release is rolled back', p_release, rel.state);
  END IF;
  SELECT c.from_generation, c.switched_at INTO co FROM genfill.cutovers c
   WHERE c.release = p_release AND c.kind = 'cutover' AND c.state = 'DONE' ORDER BY c.id DESC LIMIT 1;
  IF NOT FOUND THEN
    RETURN format('release %s has no recorded cutover: nothing to roll back to', p_release);
  END IF;
  SELECT gg.state INTO g FROM genfill.generations gg WHERE gg.dataset = rel.dataset AND gg.generation = co.from_generation;
  IF g.state IS DISTINCT FROM 'RETAINED' OR to_regclass(format('genfill_data.%I', rel.dataset || '__' || co.from_generation)) IS NULL THEN
    RETURN format('generation %s, which %s replaced, is %s: it can no longer take readers back (roll forward with a new release instead)',
                  co.from_generation, p_release, CASE WHEN g.state = 'RETAINED' THEN 'dropped' ELSE lower(coalesce(g.state, 'missing')) END);
  END IF;
  SELECT string_agg(r.id, ', ' ORDER BY r.id) INTO v_other FROM genfill.releases r
   WHERE r.dataset = rel.dataset AND r.expected_active = rel.generation
     AND r.state NOT IN ('DRAFT', 'CANCELLED', 'ACTIVE', 'SUPERSEDED', 'RETIRED', 'ROLLED_BACK');
  IF v_other IS NOT NULL THEN
    RETURN format('release(s) %s expect %s as their active generation: cancel them (or let them finish) first', v_other, rel.generation);
  END IF;
  RETURN NULL;
END $$;

-- The rollback's seal: READ COMMITTED, like genfill.seal_epoch — the exclusive seal lock with a
-- short lock_timeout (55P03 past it: the caller retries), the CAS OPEN → SEALED, then B′ read in
-- a later statement (the committed frontier of the active generation).
CREATE FUNCTION genfill.rollback_seal(p_release text, p_lock_timeout_ms integer)
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
  PERFORM set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
  PERFORM pg_advisory_xact_lock(genfill.seal_key(rel.dataset));
  PERFORM set_config('lock_timeout', '0', true);
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

-- Undo a rollback's seal: ingress reopens on the (still active) generation of the release under
-- a new epoch; the release stays ACTIVE.
CREATE FUNCTION genfill.rollback_unseal(p_release text, p_reason text)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  ds record;
BEGIN
  SELECT r.dataset, r.generation, r.state INTO rel FROM genfill.releases r WHERE r.id = p_release;
  SELECT d.ingress_state, d.ingress_epoch, d.active_generation INTO ds FROM genfill.datasets d WHERE d.name = rel.dataset FOR UPDATE;
  IF ds.ingress_state <> 'SEALED' OR NOT EXISTS (
       SELECT 1 FROM genfill.epochs e WHERE e.dataset = rel.dataset AND e.epoch = ds.ingress_epoch AND e.release = p_release AND e.sealed_from = 'ACTIVE') THEN
    RETURN NULL;
  END IF;
  UPDATE genfill.epochs e SET closed_at = clock_timestamp() WHERE e.dataset = rel.dataset AND e.epoch = ds.ingress_epoch;
  UPDATE genfill.datasets d SET ingress_state = 'OPEN', ingress_epoch = ds.ingress_epoch + 1 WHERE d.name = rel.dataset;
  INSERT INTO genfill.epochs (dataset, epoch, generation, opened_for, opened_by)
  VALUES (rel.dataset, ds.ingress_epoch + 1, ds.active_generation, format('rollback of %s undone', p_release), genfill.current_principal());
  INSERT INTO genfill.release_log (release, action, reason, detail)
  VALUES (p_release, 'rollback-unseal', p_reason, jsonb_build_object('closedEpoch', ds.ingress_epoch, 'epoch', ds.ingress_epoch + 1));
  RETURN ds.ingress_epoch + 1;
END $$;

-- The rollback's compare-and-swap, inside the rollback's REPEATABLE READ transaction (which then
-- applies the rest of the log to the old generation and moves its frontier before it commits).
CREATE FUNCTION genfill.rollback_switch(p_release text, p_record bigint, p_holder text, p_barrier pg_snapshot)
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

ALTER FUNCTION genfill.request(text, text, jsonb) OWNER TO genfill_owner;
ALTER FUNCTION genfill.rollback_refusal(text) OWNER TO genfill_owner;
ALTER FUNCTION genfill.rollback_seal(text, integer) OWNER TO genfill_owner;
ALTER FUNCTION genfill.rollback_unseal(text, text) OWNER TO genfill_owner;
ALTER FUNCTION genfill.rollback_switch(text, bigint, text, pg_snapshot) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.rollback_refusal(text), genfill.rollback_seal(text, integer), genfill.rollback_unseal(text, text),
  genfill.rollback_switch(text, bigint, text, pg_snapshot) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.rollback_refusal(text) TO genfill_operator, genfill_approver, genfill_reader, genfill_service;
GRANT EXECUTE ON FUNCTION genfill.rollback_seal(text, integer), genfill.rollback_unseal(text, text),
  genfill.rollback_switch(text, bigint, text, pg_snapshot) TO genfill_service;

