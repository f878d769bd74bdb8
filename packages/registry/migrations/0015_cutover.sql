-- 0015_cutover: the switch every reader makes in one step (SPEC invariants 9 and 11).
-- Add-only: never edit this file once landed; add 0016_… instead.
--
-- `genfill cutover <release>` (packages/projector/src/cutover.ts) runs under a cutover lease
-- (genfill.cutovers, one RUNNING row per dataset): a pre-seal catch-up round and a check of the
-- keys changed since the approved reconciliation, the seal (B), the round to B, a check of the
-- keys changed in the tail, then ONE transaction — genfill.cutover_switch below, plus the apply
-- of (B, S_cut] to the new generation and its frontier at S_cut — so readers of the new
-- generation lose nothing readers of the old one saw, and the freeze ends at that commit. A
-- holder that dies leaves its row RUNNING under an expired lease: the next holder finishes it
-- (the steps are idempotent; a flip that committed is complete by construction) or, past the
-- freeze bound, undoes it (unseal: ingress reopens on the old generation under a new epoch).

-- Approvals along a chain of reconciliations (below) are what the switch compares.
--
-- The previously active generation is kept for rollback (state RETAINED) until retention
-- retires it; the release that built it steps aside as SUPERSEDED (its generation no longer
-- serves readers), comes back to ACTIVE if the release that superseded it is rolled back, and
-- is RETIRED with its generation.
ALTER TABLE genfill.generations DROP CONSTRAINT generations_state_check;
ALTER TABLE genfill.generations ADD CONSTRAINT generations_state_check
  CHECK (state IN ('CANDIDATE', 'ACTIVE', 'RETAINED', 'RETIRED', 'ABANDONED'));
ALTER TABLE genfill.releases DROP CONSTRAINT releases_state_check;
ALTER TABLE genfill.releases ADD CONSTRAINT releases_state_check CHECK (state IN (
  'DRAFT', 'SNAPSHOT_PINNED', 'BUILDING', 'BUILT', 'INGRESS_SEALED', 'CAUGHT_UP', 'RECONCILED', 'APPROVED', 'ACTIVE',
  'SUPERSEDED', 'RETIRED', 'RECONCILIATION_REQUIRED', 'ROLLED_BACK', 'CANCELLED'));
ALTER TABLE genfill.release_transitions DISABLE TRIGGER release_transitions_frozen;
INSERT INTO genfill.release_transitions (from_state, to_state) VALUES
  ('ACTIVE', 'SUPERSEDED'), ('SUPERSEDED', 'ACTIVE'), ('SUPERSEDED', 'RETIRED')
  ON CONFLICT DO NOTHING;
ALTER TABLE genfill.release_transitions ENABLE TRIGGER release_transitions_frozen;

-- One row per cutover attempt: who holds it, each step and its time, the barrier, the freeze.
CREATE TABLE genfill.cutovers (
  id                bigserial PRIMARY KEY,
  release           text NOT NULL REFERENCES genfill.releases (id),
  dataset           text NOT NULL REFERENCES genfill.datasets (name),
  from_generation   text NOT NULL,
  to_generation     text NOT NULL,
  -- The request it runs for (null when a service login ran it in its own process).
  request           bigint REFERENCES genfill.requests (id),
  holder            text NOT NULL,
  lease_expires_at  timestamptz NOT NULL,
  max_freeze_ms     integer NOT NULL CHECK (max_freeze_ms > 0),
  state             text NOT NULL DEFAULT 'RUNNING' CHECK (state IN ('RUNNING', 'DONE', 'ABORTED')),
  -- The last step reached: checking, pre-round, pre-verify, sealed, caught-up, verified, switched.
  step              text NOT NULL DEFAULT 'checking',
  epoch             bigint,
  barrier           pg_snapshot,
  sealed_at         timestamptz,
  switched_at       timestamptz,
  opened_epoch      bigint,
  s_cut             pg_snapshot,
  freeze_ms         numeric,
  cas_ms            numeric,
  -- [{step, ms, at, …}] in order, each holder's steps appended.
  steps             jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(steps) = 'array'),
  -- Why it ended as it did (a failed precondition, the mismatched keys, a recovery).
  outcome           jsonb,
  recovered_by      text[] NOT NULL DEFAULT '{}',
  principal         text NOT NULL DEFAULT session_user,
  started_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
  finished_at       timestamptz,
  CHECK ((state = 'RUNNING') = (finished_at IS NULL))
);
CREATE UNIQUE INDEX cutovers_one_running ON genfill.cutovers (dataset) WHERE state = 'RUNNING';
CREATE INDEX cutovers_release_idx ON genfill.cutovers (release, id);
CREATE TRIGGER cutovers_principal BEFORE INSERT ON genfill.cutovers
  FOR EACH ROW EXECUTE FUNCTION genfill.fill_principal();

-- ---------------------------------------------------------------------------------------
-- Incremental reconciliations (issue 16, invariant 10) and approvals along their chain.
-- An incremental reconciliation (packages/reconcile/src/incremental.ts) re-checks only the keys
-- changed since its parent — the latest reconciliation, which passed — against the transform of
-- their latest logged image, and records the parent. Approvals stay valid along a chain of
-- passing reconciliations: the approvals that count are those bound to the latest
-- reconciliation or to any ancestor reached through passing incremental links; a failing
-- reconciliation (full or incremental) is the latest and voids them all; a new full
-- reconciliation starts a new chain (it re-proves everything: it is reviewed again).
ALTER TABLE genfill.reconciliations ADD COLUMN kind text NOT NULL DEFAULT 'full' CHECK (kind IN ('full', 'incremental'));
ALTER TABLE genfill.reconciliations ADD COLUMN parent bigint REFERENCES genfill.reconciliations (id);
ALTER TABLE genfill.reconciliations ADD CONSTRAINT reconciliations_parent_kind CHECK ((kind = 'incremental') = (parent IS NOT NULL));

CREATE FUNCTION genfill.approval_chain(p_release text)
RETURNS TABLE (latest bigint, latest_state text, chain bigint[], approvals integer, required integer, voided_by bigint, approved_on bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  cur record;
  v_chain bigint[] := '{}';
  v_n integer := 0;
BEGIN
  SELECT r.submitted_by, r.approvals_required INTO rel FROM genfill.releases r WHERE r.id = p_release;
  SELECT c.id, c.state, c.kind, c.parent INTO cur FROM genfill.reconciliations c WHERE c.release = p_release ORDER BY c.id DESC LIMIT 1;
  IF cur.id IS NULL THEN
    RETURN QUERY SELECT NULL::bigint, NULL::text, '{}'::bigint[], 0, rel.approvals_required, NULL::bigint, NULL::bigint;
    RETURN;
  END IF;
  IF cur.state <> 'RECONCILED' THEN
    RETURN QUERY SELECT cur.id, cur.state, ARRAY[cur.id], 0, rel.approvals_required, cur.id,
      (SELECT max(a.reconciliation_id) FROM genfill.approvals a WHERE a.release = p_release);
    RETURN;
  END IF;
  latest := cur.id;
  latest_state := cur.state;
  LOOP
    v_chain := v_chain || cur.id;
    EXIT WHEN cur.kind <> 'incremental';
    SELECT c.id, c.state, c.kind, c.parent INTO cur FROM genfill.reconciliations c WHERE c.id = cur.parent;
    EXIT WHEN cur.id IS NULL OR cur.state <> 'RECONCILED';
  END LOOP;
  SELECT count(DISTINCT a.principal)::integer INTO v_n FROM genfill.approvals a
   WHERE a.release = p_release AND a.reconciliation_id = ANY (v_chain) AND a.principal <> rel.submitted_by;
  RETURN QUERY SELECT latest, latest_state, v_chain, v_n, rel.approvals_required, NULL::bigint,
    (SELECT max(a.reconciliation_id) FROM genfill.approvals a WHERE a.release = p_release AND a.reconciliation_id = ANY (v_chain));
END $$;

-- genfill approve: as 0006's, counting the approvals along the chain (above).
CREATE OR REPLACE FUNCTION genfill.approve(p_release text, p_reconciliation bigint)
RETURNS TABLE (outcome text, reconciliation_id bigint, approvals integer, required integer, state text, principal text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  latest record;
  me text := genfill.current_principal();
  n integer;
  v_chain bigint[];
BEGIN
  SELECT r.id, r.state, r.submitted_by, r.approvals_required INTO rel
    FROM genfill.releases r WHERE r.id = p_release FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'release % does not exist', p_release USING ERRCODE = 'GFN01';
  END IF;
  IF rel.submitted_by = me THEN
    RAISE EXCEPTION 'release % was submitted by %: the submitter cannot approve it; another principal must', p_release, me
      USING ERRCODE = 'GFR01';
  END IF;
  SELECT c.id, c.state INTO latest FROM genfill.reconciliations c WHERE c.release = p_release ORDER BY c.id DESC LIMIT 1;
  SELECT x.chain INTO v_chain FROM genfill.approval_chain(p_release) x;
  IF latest.id IS NOT NULL AND p_reconciliation = latest.id
     AND EXISTS (SELECT 1 FROM genfill.approvals a
                  WHERE a.release = p_release AND a.reconciliation_id = ANY (v_chain) AND a.principal = me) THEN
    SELECT x.approvals INTO n FROM genfill.approval_chain(p_release) x;
    RETURN QUERY SELECT 'already-approved'::text, latest.id, n, rel.approvals_required, rel.state::text, me;
    RETURN;
  END IF;
  IF rel.state <> 'RECONCILED' THEN
    RAISE EXCEPTION 'release % is %, not RECONCILED: only a reconciled release can be approved (genfill reconcile %)', p_release, rel.state, p_release
      USING ERRCODE = 'GFR01';
  END IF;
  IF latest.id IS NULL THEN
    RAISE EXCEPTION 'release % has no reconciliation: run genfill reconcile % first', p_release, p_release USING ERRCODE = 'GFR01';
  END IF;
  IF p_reconciliation IS NULL OR p_reconciliation <> latest.id THEN
    RAISE EXCEPTION 'reconciliation % is not the latest of release % (#% is): review #% and approve that one',
      coalesce('#' || p_reconciliation::text, '(none named)'), p_release, latest.id, latest.id
      USING ERRCODE = 'GFR01';
  END IF;
  IF latest.state <> 'RECONCILED' THEN
    RAISE EXCEPTION 'reconciliation #% of release % did not pass (%): repair and reconcile again', latest.id, p_release, latest.state
      USING ERRCODE = 'GFR01';
  END IF;

  INSERT INTO genfill.approvals (release, reconciliation_id) VALUES (p_release, latest.id);
  SELECT x.approvals INTO n FROM genfill.approval_chain(p_release) x;
  IF n >= rel.approvals_required THEN
    UPDATE genfill.releases r SET state = 'APPROVED', state_changed_at = now() WHERE r.id = p_release AND r.state = 'RECONCILED';
    INSERT INTO genfill.release_log (release, action, from_state, to_state, detail)
    VALUES (p_release, 'approve', 'RECONCILED', 'APPROVED', jsonb_build_object('reconciliation', latest.id, 'approvals', n, 'required', rel.approvals_required));
    RETURN QUERY SELECT 'approved'::text, latest.id, n, rel.approvals_required, 'APPROVED'::text, me;
  ELSE
    INSERT INTO genfill.release_log (release, action, detail)
    VALUES (p_release, 'approve', jsonb_build_object('reconciliation', latest.id, 'approvals', n, 'required', rel.approvals_required));
    RETURN QUERY SELECT 'recorded'::text, latest.id, n, rel.approvals_required, rel.state::text, me;
  END IF;
END $$;

ALTER FUNCTION genfill.approval_chain(text) OWNER TO genfill_owner;
ALTER FUNCTION genfill.approve(text, bigint) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.approval_chain(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.approval_chain(text) TO genfill_operator, genfill_approver, genfill_reader, genfill_service;

-- The cutover's compare-and-swap (invariant 11), called inside the cutover's REPEATABLE READ
-- transaction, which then applies (B, S_cut] to the new generation and moves its frontier to
-- S_cut before it commits. Each precondition that fails raises GFR01 naming it; nothing is
-- written then (the caller undoes the seal).
CREATE FUNCTION genfill.cutover_switch(p_release text, p_cutover bigint, p_holder text, p_barrier pg_snapshot, p_round bigint, p_root numeric)
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
            OR NOT EXISTS (SELECT 1 FROM genfill.receipts rc
                            WHERE rc.release = p_release AND rc.partition = p.id AND rc.release_digest = rel.digest
                              AND NOT EXISTS (SELECT 1 FROM genfill.receipts n WHERE n.supersedes = rc.id)))
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

-- Requests gain the cutover (the projector service runs it: it owns the seal and catch-up).
ALTER TABLE genfill.requests DROP CONSTRAINT requests_kind_check;
ALTER TABLE genfill.requests ADD CONSTRAINT requests_kind_check CHECK (kind IN ('plan', 'reconcile', 'repair', 'seal', 'unseal', 'catchup', 'cutover'));
CREATE OR REPLACE FUNCTION genfill.request(p_kind text, p_release text, p_args jsonb)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_id bigint;
BEGIN
  IF p_kind NOT IN ('plan', 'reconcile', 'repair', 'seal', 'unseal', 'catchup', 'cutover') THEN
    RAISE EXCEPTION 'unknown request kind %', p_kind USING ERRCODE = 'GFR01';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM genfill.releases r WHERE r.id = p_release) THEN
    RAISE EXCEPTION 'release % does not exist: submit it with `genfill release submit <file>`', p_release USING ERRCODE = 'GFN01';
  END IF;
  INSERT INTO genfill.requests (kind, release, args) VALUES (p_kind, p_release, coalesce(p_args, '{}')) RETURNING id INTO v_id;
  PERFORM pg_notify('genfill_requests', p_kind);
  RETURN v_id;
END $$;

ALTER TABLE genfill.cutovers OWNER TO genfill_owner;
ALTER FUNCTION genfill.cutover_switch(text, bigint, text, pg_snapshot, bigint, numeric) OWNER TO genfill_owner;
ALTER FUNCTION genfill.request(text, text, jsonb) OWNER TO genfill_owner;
GRANT SELECT ON genfill.cutovers TO genfill_operator, genfill_approver, genfill_reader, genfill_service;
GRANT INSERT, UPDATE ON genfill.cutovers TO genfill_service;
GRANT USAGE ON SEQUENCE genfill.cutovers_id_seq TO genfill_service;
REVOKE ALL ON FUNCTION genfill.cutover_switch(text, bigint, text, pg_snapshot, bigint, numeric) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.cutover_switch(text, bigint, text, pg_snapshot, bigint, numeric) TO genfill_service;
