-- Record each conflict of a refused file and move the open releases built from the mirror (of
-- every dataset whose source it is: the conflict is in the source) to RECONCILIATION_REQUIRED —
-- every release whose state the transition table lets move there.
--
-- Internal (migration 0026): only genfill.ingest_apply calls it, as genfill_owner, with the
-- conflicts it found itself, in the transaction whose apply it rolled back. Until 0026 the
-- ingesting client called it in a second transaction with the JSON the apply had raised, and
-- so could anyone with EXECUTE (operators, the API): a forged conflict moved any open release.
-- No role holds EXECUTE on it now.
CREATE OR REPLACE FUNCTION genfill.ingress_record_conflict(p_dataset text, p_conflicts jsonb)
RETURNS TABLE (conflict_ids bigint[], releases text[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  m record;
  rel record;
  moved text[] := '{}';
  ids bigint[];
BEGIN
  SELECT * INTO m FROM genfill.ingress_mirror_of(p_dataset);
  IF p_conflicts IS NULL OR jsonb_typeof(p_conflicts) <> 'array' OR jsonb_array_length(p_conflicts) = 0
     OR EXISTS (SELECT 1 FROM jsonb_array_elements(p_conflicts) c
                 WHERE jsonb_typeof(c->'key') IS DISTINCT FROM 'object' OR jsonb_typeof(c->'revision') IS DISTINCT FROM 'number'
                    OR jsonb_typeof(c->'incoming') IS DISTINCT FROM 'array') THEN
    RAISE EXCEPTION 'conflicts must be a non-empty array of {key, revision, incoming, stored}' USING ERRCODE = 'GFR01';
  END IF;
  -- The releases to move, locked first so the conflict rows can name them.
  SELECT coalesce(array_agg(r.id ORDER BY r.id), '{}') INTO moved
    FROM genfill.releases r JOIN genfill.datasets d ON d.name = r.dataset
   WHERE to_regclass(d.source_table) = m.relid
     AND EXISTS (SELECT 1 FROM genfill.release_transitions t WHERE t.from_state = r.state AND t.to_state = 'RECONCILIATION_REQUIRED');
  PERFORM 1 FROM genfill.releases r WHERE r.id = ANY (moved) ORDER BY r.id FOR UPDATE;
  WITH ins AS (
    INSERT INTO genfill.ingress_conflicts (dataset, source_table, key, revision, incoming, stored, releases)
    SELECT p_dataset, m.source_table, c->'key', (c->>'revision')::bigint, c->'incoming', nullif(c->'stored', 'null'), moved
      FROM jsonb_array_elements(p_conflicts) c
    RETURNING id)
  SELECT array_agg(id ORDER BY id) INTO ids FROM ins;
  -- The log names the conflicts by id, never by key: people read release_log, and a source's
  -- keys are its data (0025 keeps them in ingress_conflicts, read through genfill.source_conflicts).
  FOR rel IN SELECT r.id, r.state FROM genfill.releases r WHERE r.id = ANY (moved) ORDER BY r.id LOOP
    UPDATE genfill.releases r SET state = 'RECONCILIATION_REQUIRED', state_changed_at = now() WHERE r.id = rel.id AND r.state = rel.state;
    INSERT INTO genfill.release_log (release, action, from_state, to_state, reason, detail)
    VALUES (rel.id, 'ingress-conflict', rel.state, 'RECONCILIATION_REQUIRED',
            format('ingest into %s: equal revision with another payload', p_dataset),
            jsonb_build_object('dataset', p_dataset, 'sourceTable', m.source_table, 'conflicts', to_jsonb(ids)));
  END LOOP;
  INSERT INTO genfill.dataset_log (dataset, action, detail)
  VALUES (p_dataset, 'ingest-conflict', jsonb_build_object('conflicts', to_jsonb(ids), 'releases', to_jsonb(moved)));
  RETURN QUERY SELECT ids, moved;
END $$;
ALTER FUNCTION genfill.ingress_record_conflict(text, jsonb) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.ingress_record_conflict(text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION genfill.ingress_record_conflict(text, jsonb) FROM genfill_operator, genfill_approver, genfill_reader, genfill_service, genfill_api;
