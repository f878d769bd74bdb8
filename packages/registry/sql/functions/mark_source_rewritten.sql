-- Rows of the captured table `p_relid` (a root) changed without DML, in this transaction: a
-- table rewrite, an enum label renamed, a column's type changed (issue 29; migration 0030). For
-- every dataset whose source it is: flag the dataset (dataset_flags.source_rewritten_at and
-- source_rewrite), move its open releases to RECONCILIATION_REQUIRED through the transition table
-- (release_log 'source-rewritten': their builds read values the source no longer holds), and log
-- 'source-rewritten' on the dataset. The active generation is left as it is; a cutover waits for
-- a drift check after this (genfill.source_rewrite_pending).
--
-- Called only by the guard's SECURITY DEFINER functions, which take what happened from the
-- event trigger's own state (pg_event_trigger_*), never from the DDL's login: no grant. A
-- statement that rewrites every partition of a tree calls it once per partition; only the first
-- call of a transaction on a dataset logs, later ones add their reasons to the flag.
CREATE OR REPLACE FUNCTION genfill.mark_source_rewritten(p_relid oid, p_command text, p_reasons text[], p_detail jsonb DEFAULT '{}')
RETURNS text[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  ds record;
  fl record;
  rel record;
  v_xid text := pg_current_xact_id()::text;
  v_table text;
  v_now timestamptz;
  moved text[] := '{}';
BEGIN
  SELECT c.source_table INTO v_table FROM genfill.captures c WHERE c.relid = p_relid AND c.mode = 'trigger';
  IF NOT FOUND THEN
    RETURN moved;
  END IF;
  FOR ds IN SELECT d.name FROM genfill.datasets d WHERE to_regclass(d.source_table) = p_relid ORDER BY d.name LOOP
    INSERT INTO genfill.dataset_flags (dataset) VALUES (ds.name) ON CONFLICT (dataset) DO NOTHING;
    -- Locked before the clock is read: a drift check recording its verdict on this row either
    -- committed before (its time is earlier than ours) or fails to serialize after us.
    SELECT f.source_rewrite INTO fl FROM genfill.dataset_flags f WHERE f.dataset = ds.name FOR UPDATE;
    v_now := clock_timestamp();
    IF fl.source_rewrite->>'xid' = v_xid THEN
      UPDATE genfill.dataset_flags f
         SET source_rewritten_at = v_now,
             source_rewrite = jsonb_set(f.source_rewrite || coalesce(p_detail, '{}'), '{reasons}',
               to_jsonb(ARRAY(SELECT DISTINCT x FROM (SELECT jsonb_array_elements_text(f.source_rewrite->'reasons') UNION ALL SELECT unnest(p_reasons)) AS r(x) ORDER BY 1)))
       WHERE f.dataset = ds.name;
      CONTINUE;
    END IF;
    UPDATE genfill.dataset_flags f
       SET source_rewritten_at = v_now,
           source_rewrite = jsonb_build_object('table', v_table, 'command', p_command, 'reasons', to_jsonb(p_reasons),
                                               'principal', session_user::text, 'xid', v_xid) || coalesce(p_detail, '{}')
     WHERE f.dataset = ds.name;
    moved := '{}';
    FOR rel IN SELECT r.id, r.state FROM genfill.releases r
                WHERE r.dataset = ds.name
                  AND EXISTS (SELECT 1 FROM genfill.release_transitions t WHERE t.from_state = r.state AND t.to_state = 'RECONCILIATION_REQUIRED')
                ORDER BY r.id FOR UPDATE LOOP
      UPDATE genfill.releases r SET state = 'RECONCILIATION_REQUIRED', state_changed_at = now() WHERE r.id = rel.id AND r.state = rel.state;
      INSERT INTO genfill.release_log (release, action, from_state, to_state, reason, detail)
      VALUES (rel.id, 'source-rewritten', rel.state, 'RECONCILIATION_REQUIRED', 'SOURCE_REWRITTEN',
              jsonb_build_object('table', v_table, 'command', p_command, 'reasons', to_jsonb(p_reasons)) || coalesce(p_detail, '{}'));
      moved := moved || rel.id;
    END LOOP;
    INSERT INTO genfill.dataset_log (dataset, action, detail)
    VALUES (ds.name, 'source-rewritten',
            jsonb_build_object('table', v_table, 'command', p_command, 'reasons', to_jsonb(p_reasons), 'releases', to_jsonb(moved)) || coalesce(p_detail, '{}'));
  END LOOP;
  RETURN moved;
END $$;
ALTER FUNCTION genfill.mark_source_rewritten(oid, text, text[], jsonb) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.mark_source_rewritten(oid, text, text[], jsonb) FROM PUBLIC;
