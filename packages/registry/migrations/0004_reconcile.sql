-- 0004_reconcile: the reconciler's evidence and approvals bound to it (SPEC invariant 10,
-- "Release gate"). Add-only: never edit this file once landed; add 0005_… instead.

-- One row per run of `genfill reconcile` (or the reconciler service): what was checked, in
-- which snapshot, and the verdict. Approvals bind to an id here, so a reconciliation is
-- evidence and never changes: a later run is a new row.
CREATE TABLE genfill.reconciliations (
  id              bigserial PRIMARY KEY,
  release         text NOT NULL REFERENCES genfill.releases (id),
  -- The snapshot every check read (one REPEATABLE READ transaction).
  snapshot        pg_snapshot NOT NULL,
  -- The release's state and digest in that snapshot.
  from_state      text NOT NULL,
  release_digest  text NOT NULL,
  state           text NOT NULL CHECK (state IN ('RECONCILED', 'RECONCILIATION_REQUIRED')),
  summary         jsonb NOT NULL,
  findings_count  bigint NOT NULL CHECK (findings_count >= 0),
  -- The complete NDJSON list of findings as written by the run (a path on the machine that ran it).
  findings_path   text,
  principal       text NOT NULL DEFAULT session_user,
  at              timestamptz NOT NULL DEFAULT clock_timestamp(),
  -- A verdict that contradicts its own findings is a bug, not evidence.
  CONSTRAINT reconciliations_verdict CHECK ((state = 'RECONCILED') = (findings_count = 0))
);
CREATE INDEX reconciliations_release_idx ON genfill.reconciliations (release, id);

-- Per build partition: the counts and roots the reconciler computed itself, next to the
-- receipt it checked them against. A child table rather than jsonb: a manifest may hold
-- 200,000 partitions.
CREATE TABLE genfill.reconciliation_partitions (
  reconciliation_id bigint NOT NULL REFERENCES genfill.reconciliations (id),
  release           text NOT NULL,
  partition         text NOT NULL,
  receipt_id        bigint REFERENCES genfill.receipts (id),
  source_rows       bigint NOT NULL,
  stored_rows       bigint NOT NULL,
  stored_key_root   numeric(20, 0) NOT NULL,
  stored_row_root   numeric(20, 0) NOT NULL,
  dual_rows         bigint NOT NULL,
  dual_key_root     numeric(20, 0) NOT NULL,
  dual_row_root     numeric(20, 0) NOT NULL,
  tombstones        bigint NOT NULL,
  findings          bigint NOT NULL,
  PRIMARY KEY (reconciliation_id, partition),
  FOREIGN KEY (release, partition) REFERENCES genfill.partitions (release, id)
);

CREATE TRIGGER reconciliations_append_only BEFORE UPDATE OR DELETE ON genfill.reconciliations
  FOR EACH ROW EXECUTE FUNCTION genfill.refuse_change();
CREATE TRIGGER reconciliations_no_truncate BEFORE TRUNCATE ON genfill.reconciliations
  FOR EACH STATEMENT EXECUTE FUNCTION genfill.refuse_change();
CREATE TRIGGER reconciliation_partitions_append_only BEFORE UPDATE OR DELETE ON genfill.reconciliation_partitions
  FOR EACH ROW EXECUTE FUNCTION genfill.refuse_change();
CREATE TRIGGER reconciliation_partitions_no_truncate BEFORE TRUNCATE ON genfill.reconciliation_partitions
  FOR EACH STATEMENT EXECUTE FUNCTION genfill.refuse_change();

-- 0001 left this reference open until the reconciler's table existed.
ALTER TABLE genfill.approvals
  ADD CONSTRAINT approvals_reconciliation_fk FOREIGN KEY (reconciliation_id) REFERENCES genfill.reconciliations (id);
CREATE INDEX approvals_reconciliation_idx ON genfill.approvals (release, reconciliation_id);

-- `genfill approve`: the only way an approval is written. SECURITY DEFINER because an
-- approver may neither UPDATE a release's state (that would let them set any state) nor be
-- trusted to fill in the principal or the reconciliation id. session_user stays the caller's
-- login inside the function, so the approval and the log record who approved.
-- The release row is locked first, so two approvers racing count each other exactly once.
-- Refusals raise SQLSTATE GFR01 (not found: GFN01); the CLI maps them to exit 3.
CREATE FUNCTION genfill.approve(p_release text)
RETURNS TABLE (outcome text, reconciliation_id bigint, approvals integer, required integer, state text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  latest record;
  me text := session_user;
  n integer;
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
  IF FOUND AND EXISTS (SELECT 1 FROM genfill.approvals a
                        WHERE a.release = p_release AND a.reconciliation_id = latest.id AND a.principal = me) THEN
    SELECT count(DISTINCT a.principal) INTO n FROM genfill.approvals a
     WHERE a.release = p_release AND a.reconciliation_id = latest.id AND a.principal <> rel.submitted_by;
    RETURN QUERY SELECT 'already-approved'::text, latest.id, n, rel.approvals_required, rel.state;
    RETURN;
  END IF;
  IF rel.state <> 'RECONCILED' THEN
    RAISE EXCEPTION 'release % is %, not RECONCILED: only a reconciled release can be approved (genfill reconcile %)', p_release, rel.state, p_release
      USING ERRCODE = 'GFR01';
  END IF;
  IF latest.id IS NULL OR latest.state <> 'RECONCILED' THEN
    RAISE EXCEPTION 'release % has no passing latest reconciliation: run genfill reconcile % first', p_release, p_release
      USING ERRCODE = 'GFR01';
  END IF;

  INSERT INTO genfill.approvals (release, reconciliation_id) VALUES (p_release, latest.id);
  -- Only approvals of the latest reconciliation count: an older id approved other evidence.
  SELECT count(DISTINCT a.principal) INTO n FROM genfill.approvals a
   WHERE a.release = p_release AND a.reconciliation_id = latest.id AND a.principal <> rel.submitted_by;
  IF n >= rel.approvals_required THEN
    UPDATE genfill.releases r SET state = 'APPROVED', state_changed_at = now() WHERE r.id = p_release AND r.state = 'RECONCILED';
    IF NOT FOUND THEN
      RAISE EXCEPTION 'release % left RECONCILED while being approved', p_release USING ERRCODE = 'GFR01';
    END IF;
    INSERT INTO genfill.release_log (release, action, from_state, to_state, detail)
    VALUES (p_release, 'approve', 'RECONCILED', 'APPROVED', jsonb_build_object('reconciliation', latest.id, 'approvals', n, 'required', rel.approvals_required));
    RETURN QUERY SELECT 'approved'::text, latest.id, n, rel.approvals_required, 'APPROVED'::text;
  ELSE
    INSERT INTO genfill.release_log (release, action, detail)
    VALUES (p_release, 'approve', jsonb_build_object('reconciliation', latest.id, 'approvals', n, 'required', rel.approvals_required));
    RETURN QUERY SELECT 'recorded'::text, latest.id, n, rel.approvals_required, rel.state;
  END IF;
END $$;

ALTER TABLE genfill.reconciliations OWNER TO genfill_owner;
ALTER TABLE genfill.reconciliation_partitions OWNER TO genfill_owner;
ALTER FUNCTION genfill.approve(text) OWNER TO genfill_owner;

GRANT SELECT ON genfill.reconciliations, genfill.reconciliation_partitions TO genfill_operator, genfill_approver;
GRANT INSERT ON genfill.reconciliations, genfill.reconciliation_partitions TO genfill_operator;
GRANT USAGE ON SEQUENCE genfill.reconciliations_id_seq TO genfill_operator;
-- 0003 let approvers insert approvals directly, which would let them name any principal or
-- reconciliation id; from now on approvals go through genfill.approve only.
REVOKE INSERT ON genfill.approvals FROM genfill_approver;
REVOKE ALL ON FUNCTION genfill.approve(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.approve(text) TO genfill_approver;
