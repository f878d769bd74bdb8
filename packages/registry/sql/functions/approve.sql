-- `genfill approve <release> --reconciliation <id>`: an approval is bound to what was reviewed.
-- It refuses an id that is not the release's latest reconciliation, a latest that did not
-- pass, and the submitter. The approvals that count are those along the chain of passing
-- reconciliations (genfill.approval_chain). The release row is locked first, so two approvers
-- racing count each other exactly once. Refusals raise GFR01 (not found: GFN01).
--
-- People, not principals (migration 0028): the approver and the submitter are compared as the
-- persons their principals map to (genfill.principal_persons), so login alice and token subject
-- alice mapped to one person count once, and a submitter holding an approver token under
-- another subject is still the submitter. An approver or submitter that maps to no person is
-- refused (GFM01) with the SQL that maps it; the submitter as another principal GFM03; a person
-- who approved along the chain under another principal GFM02. The approval row keeps the
-- principal that acted and records its kind and person.
CREATE OR REPLACE FUNCTION genfill.approve(p_release text, p_reconciliation bigint)
RETURNS TABLE (outcome text, reconciliation_id bigint, approvals integer, required integer, state text, principal text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  latest record;
  me text := genfill.current_principal();
  my_kind text := genfill.current_principal_kind();
  my_person text := genfill.person_of(me, my_kind);
  submitter_person text;
  earlier record;
  n integer;
  v_chain bigint[];
BEGIN
  SELECT r.id, r.state, r.submitted_by, r.submitted_kind, r.approvals_required INTO rel
    FROM genfill.releases r WHERE r.id = p_release FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'release % does not exist', p_release USING ERRCODE = 'GFN01';
  END IF;
  IF rel.submitted_by = me AND rel.submitted_kind = my_kind THEN
    RAISE EXCEPTION 'release % was submitted by %: the submitter cannot approve it; another person must', p_release, me
      USING ERRCODE = 'GFM03';
  END IF;
  IF my_person IS NULL THEN
    RAISE EXCEPTION 'the % % maps to no person, and approvals count persons (one person, one identity): nothing was recorded; map it %',
      my_kind, me, genfill.person_mapping_sql(me, my_kind)
      USING ERRCODE = 'GFM01', DETAIL = json_build_object('principal', me, 'kind', my_kind)::text;
  END IF;
  submitter_person := genfill.person_of(rel.submitted_by, rel.submitted_kind);
  IF submitter_person IS NULL THEN
    RAISE EXCEPTION 'release % was submitted by the % %, which maps to no person, so no approval can show it is not the submitter''s: nothing was recorded; map it %',
      p_release, rel.submitted_kind, rel.submitted_by, genfill.person_mapping_sql(rel.submitted_by, rel.submitted_kind)
      USING ERRCODE = 'GFM01', DETAIL = json_build_object('principal', rel.submitted_by, 'kind', rel.submitted_kind)::text;
  END IF;
  IF submitter_person = my_person THEN
    RAISE EXCEPTION 'release % was submitted by % (the % %), and you are % as the % %: the submitter cannot approve it under any principal; another person must',
      p_release, submitter_person, rel.submitted_kind, rel.submitted_by, my_person, my_kind, me
      USING ERRCODE = 'GFM03';
  END IF;
  SELECT c.id, c.state INTO latest FROM genfill.reconciliations c WHERE c.release = p_release ORDER BY c.id DESC LIMIT 1;
  SELECT x.chain INTO v_chain FROM genfill.approval_chain(p_release) x;
  IF latest.id IS NOT NULL AND p_reconciliation = latest.id
     AND EXISTS (SELECT 1 FROM genfill.approvals a
                  WHERE a.release = p_release AND a.reconciliation_id = ANY (v_chain) AND a.principal = me
                    AND coalesce(a.principal_kind, my_kind) = my_kind) THEN
    SELECT x.approvals INTO n FROM genfill.approval_chain(p_release) x;
    RETURN QUERY SELECT 'already-approved'::text, latest.id, n, rel.approvals_required, rel.state::text, me;
    RETURN;
  END IF;
  SELECT a.principal, a.principal_kind, a.reconciliation_id INTO earlier FROM genfill.approvals a
   WHERE a.release = p_release AND a.reconciliation_id = ANY (v_chain) AND a.person = my_person
   ORDER BY a.id LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'person % already approved release % (reconciliation #%) as the % %: one person approves once, whatever principal they use; another person must',
      my_person, p_release, earlier.reconciliation_id, earlier.principal_kind, earlier.principal
      USING ERRCODE = 'GFM02';
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

  INSERT INTO genfill.approvals (release, reconciliation_id, principal_kind, person) VALUES (p_release, latest.id, my_kind, my_person);
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
ALTER FUNCTION genfill.approve(text, bigint) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.approve(text, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.approve(text, bigint) TO genfill_approver;
