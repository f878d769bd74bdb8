-- A captured dependency changed: flag the dataset and move its open releases to
-- RECONCILIATION_REQUIRED (their pinned dependency hashes no longer hold). Called by the
-- projector in its own short transaction.
CREATE OR REPLACE FUNCTION genfill.mark_dependency_stale(p_dataset text, p_relations text[])
RETURNS text[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  moved text[] := '{}';
BEGIN
  INSERT INTO genfill.dataset_flags AS f (dataset, dependency_stale_since, stale_relations)
  VALUES (p_dataset, clock_timestamp(), p_relations)
  ON CONFLICT (dataset) DO UPDATE
     SET dependency_stale_since = coalesce(f.dependency_stale_since, EXCLUDED.dependency_stale_since),
         stale_relations = ARRAY(SELECT DISTINCT unnest(f.stale_relations || EXCLUDED.stale_relations) ORDER BY 1);
  FOR rel IN SELECT r.id, r.state FROM genfill.releases r
              WHERE r.dataset = p_dataset
                AND EXISTS (SELECT 1 FROM genfill.release_transitions t WHERE t.from_state = r.state AND t.to_state = 'RECONCILIATION_REQUIRED')
              ORDER BY r.id FOR UPDATE LOOP
    UPDATE genfill.releases r SET state = 'RECONCILIATION_REQUIRED', state_changed_at = now() WHERE r.id = rel.id AND r.state = rel.state;
    INSERT INTO genfill.release_log (release, action, from_state, to_state, reason, detail)
    VALUES (rel.id, 'dependency-changed', rel.state, 'RECONCILIATION_REQUIRED', 'DEPENDENCY_STALE',
            jsonb_build_object('dataset', p_dataset, 'relations', to_jsonb(p_relations)));
    moved := moved || rel.id;
  END LOOP;
  INSERT INTO genfill.dataset_log (dataset, action, detail)
  VALUES (p_dataset, 'dependency-stale', jsonb_build_object('relations', to_jsonb(p_relations), 'releases', to_jsonb(moved)));
  RETURN moved;
END $$;
ALTER FUNCTION genfill.mark_dependency_stale(text, text[]) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.mark_dependency_stale(text, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.mark_dependency_stale(text, text[]) TO genfill_service;
