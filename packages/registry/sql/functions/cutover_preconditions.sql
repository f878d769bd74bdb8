-- Every precondition of a cutover, named, in one list: `genfill cutover --dry-run` shows it, the
-- cutover refuses to take its lease while any fails (phase 'start'), and genfill.cutover_switch
-- refuses the switch on the same list (phase 'switch': the release CAUGHT_UP, the epoch sealed by
-- it at p_barrier, and the final round to the barrier p_round with root p_root). One definition,
-- so what the dry run promises is what the switch enforces.
CREATE OR REPLACE FUNCTION genfill.cutover_preconditions(p_release text, p_phase text DEFAULT 'start',
                                                         p_barrier pg_snapshot DEFAULT NULL, p_round bigint DEFAULT NULL,
                                                         p_root numeric DEFAULT NULL)
RETURNS TABLE (name text, ok boolean, detail text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  ds record;
  ep record;
  ap record;
  fr record;
  last_round record;
  v_total integer;
  v_bad text[];
  v_cf text;
  v_along text;
  v_switch boolean := p_phase = 'switch';
  v_rw jsonb;
BEGIN
  IF p_phase NOT IN ('start', 'switch') THEN
    RAISE EXCEPTION 'unknown cutover phase %: start or switch', p_phase USING ERRCODE = '22023';
  END IF;
  SELECT r.id, r.dataset, r.generation, r.expected_active, r.state, r.digest INTO rel FROM genfill.releases r WHERE r.id = p_release;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'release % does not exist', p_release USING ERRCODE = 'GFN01';
  END IF;
  SELECT d.name, d.active_generation, d.ingress_state, d.ingress_epoch INTO ds FROM genfill.datasets d WHERE d.name = rel.dataset;
  SELECT e.release, e.barrier INTO ep FROM genfill.epochs e WHERE e.dataset = rel.dataset AND e.epoch = ds.ingress_epoch;

  IF v_switch THEN
    RETURN QUERY SELECT 'state'::text, rel.state = 'CAUGHT_UP', format('release %s is %s%s', p_release, rel.state,
      CASE WHEN rel.state = 'CAUGHT_UP' THEN '' ELSE ', not CAUGHT_UP' END);
  ELSE
    RETURN QUERY SELECT 'state'::text, rel.state = 'APPROVED', format('release %s is %s%s', p_release, rel.state,
      CASE WHEN rel.state = 'APPROVED' THEN '' ELSE ': a cutover needs an APPROVED release (reconcile, then approve as another person)' END);
  END IF;

  RETURN QUERY SELECT 'expected-generation'::text,
    rel.expected_active IS NOT NULL AND rel.expected_active IS NOT DISTINCT FROM ds.active_generation,
    CASE WHEN rel.expected_active IS NULL
         THEN format('release %s builds a first generation: there is no live generation to switch from (adopt the dataset first)', p_release)
         ELSE format('release %s expects %s active, but %s is', p_release, rel.expected_active, coalesce(ds.active_generation, 'none')) END;

  IF v_switch THEN
    RETURN QUERY SELECT 'sealed-epoch'::text, ds.ingress_state = 'SEALED' AND ep.release IS NOT DISTINCT FROM p_release,
      format('epoch %s of %s is %s%s', ds.ingress_epoch, rel.dataset, lower(ds.ingress_state),
             CASE WHEN ds.ingress_state = 'SEALED' THEN format(' by %s', coalesce(ep.release, '?')) ELSE format(' and not sealed by %s', p_release) END);
    RETURN QUERY SELECT 'barrier'::text, ep.barrier::text IS NOT DISTINCT FROM p_barrier::text,
      format('epoch %s was sealed at %s%s', ds.ingress_epoch, ep.barrier,
             CASE WHEN ep.barrier::text IS NOT DISTINCT FROM p_barrier::text THEN '' ELSE format(', not at %s', p_barrier) END);
  ELSE
    RETURN QUERY SELECT 'ingress'::text, ds.ingress_state = 'OPEN',
      CASE WHEN ds.ingress_state = 'OPEN' THEN format('epoch %s open', ds.ingress_epoch)
           ELSE format('epoch %s sealed by %s', ds.ingress_epoch, coalesce(ep.release, '?')) END;
  END IF;

  SELECT count(*)::integer, (array_agg(p.id ORDER BY p.id) FILTER (WHERE p.status <> 'BUILT' OR NOT EXISTS (
           SELECT 1 FROM genfill.current_receipts rc WHERE rc.release = p.release AND rc.partition = p.id AND rc.release_digest = rel.digest)))[1:20]
    INTO v_total, v_bad
    FROM genfill.partitions p WHERE p.release = p_release;
  RETURN QUERY SELECT 'manifest'::text, v_total > 0 AND v_bad IS NULL,
    CASE WHEN v_bad IS NULL THEN format('%s partitions, each with a current receipt', v_total)
         ELSE format('partitions without a built, current receipt of this release: %s', to_jsonb(v_bad)) END;

  IF v_switch THEN
    SELECT cr.id, cr.to_snapshot, cr.to_barrier, cr.root INTO last_round
      FROM genfill.catchup_rounds cr WHERE cr.release = p_release ORDER BY cr.id DESC LIMIT 1;
    RETURN QUERY SELECT 'catch-up-root'::text,
      last_round.id IS NOT DISTINCT FROM p_round AND coalesce(last_round.to_barrier, false)
        AND last_round.to_snapshot::text IS NOT DISTINCT FROM p_barrier::text AND last_round.root IS NOT DISTINCT FROM p_root,
      format('the final round to the barrier is #%s with root %s%s', last_round.id, last_round.root,
             CASE WHEN last_round.id IS NOT DISTINCT FROM p_round AND last_round.root IS NOT DISTINCT FROM p_root THEN ''
                  ELSE format(', not #%s with root %s', p_round, p_root) END);
  END IF;

  SELECT * INTO ap FROM genfill.approval_chain(p_release);
  v_along := CASE WHEN cardinality(ap.chain) > 1 THEN format(' (along the chain #%s)', array_to_string(ap.chain, ' ← #')) ELSE '' END;
  RETURN QUERY SELECT 'approvals'::text,
    ap.latest IS NOT NULL AND ap.voided_by IS NULL AND ap.approvals >= ap.required,
    CASE WHEN ap.latest IS NULL THEN 'no reconciliation: reconcile and approve first'
         WHEN ap.voided_by IS NOT NULL THEN format('the approvals are bound to reconciliation #%s, voided by reconciliation #%s (%s)',
                                                    coalesce(ap.approved_on::text, '?'), ap.latest, coalesce(ap.latest_state, 'none'))
         ELSE format('%s of %s approvals on reconciliation #%s%s', ap.approvals, ap.required, ap.latest, v_along) END;

  SELECT c.summary->'live'->>'catchupFrontier' INTO v_cf FROM genfill.reconciliations c WHERE c.id = ap.latest;
  RETURN QUERY SELECT 'reconciliation-live'::text, v_cf IS NOT NULL,
    CASE WHEN v_cf IS NOT NULL THEN format('reconciliation #%s verified the candidate at %s', ap.latest, v_cf)
         ELSE format('reconciliation #%s recorded no catch-up frontier: the tail since it cannot be verified (reconcile again)', coalesce(ap.latest::text, '?')) END;

  SELECT coalesce((SELECT fl.dependency_stale_since IS NOT NULL FROM genfill.dataset_flags fl WHERE fl.dataset = rel.dataset), false) AS stale,
         (SELECT s.key::text FROM genfill.projector_stops s WHERE s.dataset = rel.dataset) AS stop,
         f.snapshot::text AS frontier,
         (SELECT count(DISTINCT rc.partition)::integer FROM genfill.receipts rc WHERE rc.release = p_release
             AND f.snapshot IS NOT NULL AND NOT genfill.snapshot_contains(f.snapshot, rc.watermark)) AS behind
    INTO fr
    FROM (SELECT 1) AS one LEFT JOIN genfill.frontiers f ON f.dataset = rel.dataset AND f.generation = ds.active_generation;
  RETURN QUERY SELECT 'dependencies'::text, NOT fr.stale,
    CASE WHEN fr.stale THEN format('dataset %s is DEPENDENCY_STALE', rel.dataset) ELSE 'no captured dependency changed' END;
  -- The source changed without DML (a table rewrite, an enum label renamed: migration 0030):
  -- the active generation, which carry copies and a rollback returns to, is verified again first.
  v_rw := genfill.source_rewrite_pending(rel.dataset);
  RETURN QUERY SELECT 'source-rewrite'::text, v_rw IS NULL,
    CASE WHEN v_rw IS NULL THEN 'no change of the source without DML awaits a drift check'
         WHEN v_rw->'driftCheck' IS NULL OR jsonb_typeof(v_rw->'driftCheck') = 'null' THEN
           format('%s changed rows of %s without DML at %s (%s, by %s): the active generation %s may no longer be the transform of its source; run `genfill reconcile --dataset %s` (as the reconciler''s login) to verify it',
                  v_rw->>'command', v_rw->>'table', v_rw->>'at', (SELECT string_agg(x, ', ') FROM jsonb_array_elements_text(v_rw->'reasons') AS x),
                  v_rw->>'principal', ds.active_generation, rel.dataset)
         ELSE format('%s changed rows of %s without DML at %s; the drift check at %s found %s missing and %s extra rows in the active generation %s (keys %s): make the source log those keys (an UPDATE of each, e.g. setting a column to itself), let the projector apply them, then run `genfill reconcile --dataset %s` again',
                     v_rw->>'command', v_rw->>'table', v_rw->>'at', v_rw->'driftCheck'->>'at', v_rw->'driftCheck'->>'missing', v_rw->'driftCheck'->>'extra',
                     ds.active_generation, v_rw->'driftCheck'->'sample', rel.dataset) END;
  RETURN QUERY SELECT 'projector'::text, fr.frontier IS NOT NULL AND fr.stop IS NULL,
    CASE WHEN fr.frontier IS NULL THEN format('dataset %s has no projector frontier (adopt with capture)', rel.dataset)
         WHEN fr.stop IS NOT NULL THEN format('the projector of %s stopped at key %s (quarantine it or fix the transform)', rel.dataset, fr.stop)
         WHEN fr.behind > 0 THEN format('frontier %s; %s partitions'' watermarks are not yet in it (the seal waits for the projector)', fr.frontier, fr.behind)
         ELSE format('frontier %s', fr.frontier) END;
END $$;

ALTER FUNCTION genfill.cutover_preconditions(text, text, pg_snapshot, bigint, numeric) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.cutover_preconditions(text, text, pg_snapshot, bigint, numeric) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.cutover_preconditions(text, text, pg_snapshot, bigint, numeric) TO genfill_service;
