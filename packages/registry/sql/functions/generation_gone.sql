-- Why a generation can no longer be read, from what the registry records — or NULL while it
-- can (CANDIDATE, ACTIVE, RETAINED, with its table attached to the dataset's parent, through
-- which readers read it). RETIRED and ABANDONED generations are gone, and so is one whose
-- table was dropped or detached (a DETACH … CONCURRENTLY pending counts). Raises nothing for
-- an unknown generation (NULL: the caller says "unknown" itself).
CREATE OR REPLACE FUNCTION genfill.generation_gone(p_dataset text, p_generation text) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_state text;
  v_table text := genfill.generation_table(p_dataset, p_generation);
  v_rel regclass;
  v_attached boolean;
  v_where text;
  v_what text := format('generation %s of %s', p_generation, p_dataset);
  v_log record;
  v_cancel record;
  v_repl record;
  v_reason text;
BEGIN
  SELECT g.state INTO v_state FROM genfill.generations g WHERE g.dataset = p_dataset AND g.generation = p_generation;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  v_rel := to_regclass(format('genfill_data.%I', v_table));
  v_attached := v_rel IS NOT NULL AND EXISTS (
    SELECT 1 FROM pg_inherits i
     WHERE i.inhrelid = v_rel AND i.inhparent = to_regclass(format('genfill_data.%I', p_dataset)) AND NOT i.inhdetachpending);
  IF v_state NOT IN ('RETIRED', 'ABANDONED') AND v_attached THEN
    RETURN NULL;
  END IF;
  v_where := CASE WHEN v_rel IS NULL THEN format('its table genfill_data.%I was dropped', v_table)
                  WHEN NOT v_attached THEN format('its table genfill_data.%I is detached from genfill_data.%I', v_table, p_dataset) END;

  IF v_state = 'ABANDONED' THEN
    SELECT l.release, l.at, l.principal, l.reason INTO v_cancel
      FROM genfill.release_log l JOIN genfill.releases r ON r.id = l.release
     WHERE r.dataset = p_dataset AND l.action = 'cancel' AND l.detail->>'abandonedGeneration' = p_generation
     ORDER BY l.id DESC LIMIT 1;
    v_reason := format('%s was abandoned', v_what) || CASE WHEN v_cancel.release IS NULL THEN '' ELSE
      format(' at %s: release %s was cancelled by %s%s', to_char(v_cancel.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
             v_cancel.release, v_cancel.principal, coalesce(format(' (%s)', v_cancel.reason), '')) END;
  ELSIF v_state = 'RETIRED' THEN
    -- A dataset log row that names the generation with a retire action, if retention wrote one.
    SELECT l.action, l.at, l.principal, l.detail INTO v_log
      FROM genfill.dataset_log l
     WHERE l.dataset = p_dataset AND l.action ILIKE 'retire%'
       AND (l.generation = p_generation OR l.detail->>'generation' = p_generation OR l.detail->>'retired' = p_generation)
     ORDER BY l.id DESC LIMIT 1;
    v_reason := format('%s was retired', v_what) || CASE WHEN v_log.at IS NULL THEN '' ELSE
      format(' at %s by %s%s', to_char(v_log.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), v_log.principal,
             coalesce(format(' (%s)', v_log.detail->>'reason'), '')) END;
  ELSE
    v_reason := format('%s (%s) cannot be read: %s', v_what, v_state, v_where);
    v_where := NULL;
  END IF;

  -- The release that replaced it (its cutover named this generation as expected active), and
  -- when its rollback window ended: the cutover plus the release's rollbackWindow (ISO 8601,
  -- which interval input reads; default PT24H).
  IF v_state <> 'ABANDONED' THEN
    BEGIN
      SELECT r.id, r.generation, c.at AS cut_at,
             c.at + coalesce(nullif(r.spec->>'rollbackWindow', ''), 'PT24H')::interval AS window_end
        INTO v_repl
        FROM genfill.releases r
        JOIN LATERAL (SELECT l.at FROM genfill.release_log l WHERE l.release = r.id AND l.action = 'cutover' ORDER BY l.id DESC LIMIT 1) c ON true
       WHERE r.dataset = p_dataset AND r.expected_active = p_generation
       ORDER BY c.at DESC LIMIT 1;
      IF v_repl.id IS NOT NULL THEN
        v_reason := v_reason || format(' (release %s replaced it with %s at %s; its rollback window %s %s)', v_repl.id, v_repl.generation,
          to_char(v_repl.cut_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
          CASE WHEN v_repl.window_end <= clock_timestamp() THEN 'ended' ELSE 'ends' END,
          to_char(v_repl.window_end AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'));
      END IF;
    EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow THEN
      NULL; -- a window the interval input cannot read: the reason goes without it
    END;
  END IF;
  IF v_where IS NOT NULL THEN
    v_reason := v_reason || '; ' || v_where;
  END IF;
  RETURN v_reason || '; read the active generation instead (omit the generation and the cursor)';
END $$;
ALTER FUNCTION genfill.generation_gone(text, text) OWNER TO genfill_owner;
