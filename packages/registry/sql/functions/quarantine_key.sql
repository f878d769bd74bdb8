-- The operator's way past a poison event: record the key (up to its latest logged revision),
-- clear the stop. The projector skips those events and says so in every status; the
-- cutover's tail check reports the key instead of checking it.
--
-- Only for a key that was named (migration 0026; before it any key with events could be
-- quarantined, hiding its changes from every reader): the key the projector of the dataset
-- stopped on (genfill.projector_stops), a key a cutover, a rollback or a catch-up round of the
-- dataset refused on as poison (genfill.switch_stops, migration 0029), or a key a
-- reconciliation of one of the dataset's releases named in its findings
-- (genfill.reconciliation_findings). Anything else is refused (GFQ06). A switch stop stays
-- recorded (it is the record of why the switch was refused); the quarantine names it in
-- stopped_by.
CREATE OR REPLACE FUNCTION genfill.quarantine_key(p_dataset text, p_key jsonb, p_reason text)
RETURNS TABLE (id bigint, up_to_revision bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  ds record;
  stop record;
  sw record;
  v_top bigint;
  v_id bigint;
BEGIN
  SELECT d.name, d.source_table INTO ds FROM genfill.datasets d WHERE d.name = p_dataset;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'dataset % does not exist', p_dataset USING ERRCODE = 'GFN01';
  END IF;
  IF p_reason IS NULL OR length(trim(p_reason)) = 0 THEN
    RAISE EXCEPTION 'quarantining a key needs a reason (--reason): it is recorded with the key and shown in every status' USING ERRCODE = 'GFR01';
  END IF;
  IF jsonb_typeof(p_key) IS DISTINCT FROM 'object' THEN
    RAISE EXCEPTION 'the key must be a JSON object of the key columns, e.g. {"order_id": 7}' USING ERRCODE = 'GFR01';
  END IF;
  SELECT * INTO stop FROM genfill.projector_stops s WHERE s.dataset = p_dataset;
  SELECT * INTO sw FROM genfill.switch_stops w WHERE w.dataset = p_dataset AND w.key = p_key ORDER BY w.id DESC LIMIT 1;
  IF (stop.dataset IS NULL OR stop.key IS DISTINCT FROM p_key)
     AND sw.id IS NULL
     AND NOT EXISTS (SELECT 1 FROM genfill.reconciliation_findings f
                       JOIN genfill.reconciliations r ON r.id = f.reconciliation_id
                       JOIN genfill.releases rel ON rel.id = r.release
                      WHERE rel.dataset = p_dataset AND f.key = p_key) THEN
    RAISE EXCEPTION 'key % of dataset % is neither the key its projector stopped on (%) nor one a reconciliation named, nor one a cutover, rollback or catch-up refused on (genfill.switch_stops): only such a key may be quarantined',
      p_key, p_dataset, coalesce(stop.key::text, 'none')
      USING ERRCODE = 'GFQ06';
  END IF;
  SELECT max(l.revision) INTO v_top FROM genfill.change_log l
   WHERE l.source_table = (SELECT c.source_table FROM genfill.captures c WHERE c.relid = to_regclass(ds.source_table)) AND l.key = p_key;
  IF v_top IS NULL THEN
    RAISE EXCEPTION 'the change log holds no event of % for key %: nothing to quarantine', ds.source_table, p_key USING ERRCODE = 'GFR01';
  END IF;
  INSERT INTO genfill.quarantined_keys (dataset, key, up_to_revision, reason, stopped_by)
  VALUES (p_dataset, p_key, v_top, p_reason,
          CASE WHEN stop.key IS NOT DISTINCT FROM p_key THEN to_jsonb(stop)
               WHEN sw.id IS NOT NULL THEN to_jsonb(sw) || jsonb_build_object('table', 'switch_stops')
               WHEN stop.dataset IS NOT NULL THEN to_jsonb(stop) END)
  RETURNING quarantined_keys.id INTO v_id;
  DELETE FROM genfill.projector_stops s WHERE s.dataset = p_dataset AND s.key = p_key;
  INSERT INTO genfill.dataset_log (dataset, action, detail)
  VALUES (p_dataset, 'quarantine-key', jsonb_build_object('key', p_key, 'upToRevision', v_top, 'reason', p_reason, 'quarantine', v_id));
  RETURN QUERY SELECT v_id, v_top;
END $$;
ALTER FUNCTION genfill.quarantine_key(text, jsonb, text) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.quarantine_key(text, jsonb, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.quarantine_key(text, jsonb, text) TO genfill_operator, genfill_service;
