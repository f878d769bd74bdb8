-- Retire one generation: the one writer of that state. Under the generation's row lock (FOR
-- UPDATE, which waits for every pinned-read page in flight on it: genfill.reader_lease
-- holds FOR KEY SHARE on the row for the page's transaction), re-checks that it is retirable,
-- marks it RETIRED, moves the SUPERSEDED releases that built it to RETIRED, records a dataset
-- log `retire` row with the reason (what genfill.generation_gone tells a reader, HTTP 410),
-- and removes what only it needed: its frontier, its projector tombstones, its expired reader
-- leases. The table is the caller's next step (on an owner connection). Idempotent: a
-- generation already RETIRED answers 'already-retired'. Refusals are GFR01 naming the holds.
CREATE OR REPLACE FUNCTION genfill.retire_generation(p_dataset text, p_generation text)
RETURNS TABLE (outcome text, from_state text, releases text[], reason text, table_name text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_state text;
  r record;
  v_releases text[];
  v_reason text;
  v_last_lease timestamptz;
BEGIN
  -- The release whose switch took readers off it first, then the generation: the order
  -- genfill.rollback_switch locks them in (release row, then the generation's update).
  PERFORM 1 FROM genfill.releases rr
   WHERE rr.id = (SELECT c.release FROM genfill.cutovers c
                   WHERE c.dataset = p_dataset AND c.from_generation = p_generation AND c.state = 'DONE'
                   ORDER BY c.switched_at DESC NULLS LAST LIMIT 1)
     FOR UPDATE;
  SELECT g.state INTO v_state FROM genfill.generations g WHERE g.dataset = p_dataset AND g.generation = p_generation FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'dataset % has no generation %', p_dataset, p_generation USING ERRCODE = 'GFN01';
  END IF;
  IF v_state = 'RETIRED' THEN
    RETURN QUERY SELECT 'already-retired'::text, v_state, ARRAY[]::text[], NULL::text, genfill.generation_table(p_dataset, p_generation);
    RETURN;
  END IF;
  SELECT * INTO r FROM genfill.generation_retention(p_dataset) gr WHERE gr.generation = p_generation;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'generation % of % is %: only a RETAINED or ABANDONED generation is retired', p_generation, p_dataset, v_state
      USING ERRCODE = 'GFR01';
  END IF;
  IF NOT r.retirable THEN
    RAISE EXCEPTION 'generation % of % is kept: %', p_generation, p_dataset, array_to_string(r.holds, '; ') USING ERRCODE = 'GFR01';
  END IF;
  SELECT max(l.expires_at) INTO v_last_lease FROM genfill.reader_leases l WHERE l.dataset = p_dataset AND l.generation = p_generation;
  v_reason := CASE r.left_by
                WHEN 'cutover' THEN format('the rollback window of %s (%s from its cutover at %s) ended at %s', r.left_by_release,
                                           r.rollback_window, to_char(r.left_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                                           to_char(r.window_end AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
                WHEN 'rollback' THEN format('%s was rolled back at %s and kept %s for its readers, until %s', r.left_by_release,
                                            to_char(r.left_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), r.rollback_window,
                                            to_char(r.window_end AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
                ELSE format('abandoned by the cancel of %s at %s, kept %s, until %s', r.left_by_release,
                            to_char(r.left_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), r.rollback_window,
                            to_char(r.window_end AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')) END
              || CASE WHEN v_last_lease IS NULL THEN '; no reader lease was taken on it'
                      ELSE format('; the last reader lease expired at %s', to_char(v_last_lease AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')) END;

  UPDATE genfill.generations g SET state = 'RETIRED' WHERE g.dataset = p_dataset AND g.generation = p_generation AND g.state = v_state;
  WITH moved AS (
    UPDATE genfill.releases rr SET state = 'RETIRED', state_changed_at = now()
     WHERE rr.dataset = p_dataset AND rr.generation = p_generation AND rr.state = 'SUPERSEDED'
    RETURNING rr.id)
  SELECT coalesce(array_agg(moved.id ORDER BY moved.id), '{}') INTO v_releases FROM moved;
  INSERT INTO genfill.release_log (release, action, from_state, to_state, reason, detail)
  SELECT u.id, 'retire', 'SUPERSEDED', 'RETIRED', v_reason, jsonb_build_object('dataset', p_dataset, 'generation', p_generation)
    FROM unnest(v_releases) AS u(id);
  DELETE FROM genfill.frontiers f WHERE f.dataset = p_dataset AND f.generation = p_generation;
  DELETE FROM genfill.projector_tombstones t WHERE t.dataset = p_dataset AND t.generation = p_generation;
  DELETE FROM genfill.reader_leases l WHERE l.dataset = p_dataset AND l.generation = p_generation AND l.expires_at <= clock_timestamp();
  INSERT INTO genfill.dataset_log (dataset, action, generation, detail)
  VALUES (p_dataset, 'retire', p_generation,
          jsonb_build_object('generation', p_generation, 'reason', v_reason, 'from', v_state, 'leftBy', r.left_by,
                             'release', r.left_by_release, 'leftAt', r.left_at, 'windowEnd', r.window_end,
                             'lastLease', v_last_lease, 'releasesRetired', to_jsonb(v_releases),
                             'table', r.table_name, 'bytes', r.bytes));
  RETURN QUERY SELECT 'retired'::text, v_state, v_releases, v_reason, r.table_name;
END $$;
ALTER FUNCTION genfill.retire_generation(text, text) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.retire_generation(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.retire_generation(text, text) TO genfill_service;
