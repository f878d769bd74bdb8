-- Approvals along a chain of reconciliations (issue 16, invariant 10). An incremental
-- reconciliation (packages/reconcile/src/incremental.ts) re-checks only the keys changed since
-- its parent — the latest reconciliation, which passed — and records the parent. The approvals
-- that count are those bound to the latest reconciliation or to any ancestor reached through
-- passing incremental links; a failing reconciliation (full or incremental) is the latest and
-- voids them all (voided_by); a new full reconciliation starts a new chain (it re-proves
-- everything: it is reviewed again). genfill.approve and genfill.cutover_switch count with it.
--
-- It counts persons (migration 0028): distinct persons along the chain, the submitter's person
-- excluded, so one person counts once whatever principals they approved under. Approvals
-- recorded before 0028 carry no person and count by principal, as they did when given.
CREATE OR REPLACE FUNCTION genfill.approval_chain(p_release text)
RETURNS TABLE (latest bigint, latest_state text, chain bigint[], approvals integer, required integer, voided_by bigint, approved_on bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  cur record;
  v_chain bigint[] := '{}';
  v_n integer := 0;
BEGIN
  SELECT r.submitted_by, r.approvals_required, genfill.person_of(r.submitted_by, r.submitted_kind) AS submitter_person INTO rel
    FROM genfill.releases r WHERE r.id = p_release;
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
  SELECT count(DISTINCT CASE WHEN a.person IS NOT NULL THEN 'person:' || a.person ELSE 'principal:' || a.principal END)::integer INTO v_n
    FROM genfill.approvals a
   WHERE a.release = p_release AND a.reconciliation_id = ANY (v_chain)
     AND CASE WHEN a.person IS NOT NULL THEN rel.submitter_person IS NOT NULL AND a.person <> rel.submitter_person
              ELSE a.principal <> rel.submitted_by END;
  RETURN QUERY SELECT latest, latest_state, v_chain, v_n, rel.approvals_required, NULL::bigint,
    (SELECT max(a.reconciliation_id) FROM genfill.approvals a WHERE a.release = p_release AND a.reconciliation_id = ANY (v_chain));
END $$;
ALTER FUNCTION genfill.approval_chain(text) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.approval_chain(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.approval_chain(text) TO genfill_operator, genfill_approver, genfill_reader, genfill_service;
