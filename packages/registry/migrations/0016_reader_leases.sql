-- 0016_reader_leases: pinned reads record who reads which generation (SPEC invariant 12).
-- Add-only: never edit this file once landed; add 0017_… instead.
--
-- A pinned read (packages/reads: `genfill read`, GET /datasets/:ds/rows, the library helper)
-- fixes its generation when the request starts and carries it in its page cursor. Every page
-- takes or extends a lease on that generation for its holder, in the page's own transaction,
-- through genfill.reader_lease — the only writer of genfill.reader_leases. Retirement of an
-- old generation is to wait for the longest live lease as well as the rollback window.
--
-- Depends on nothing of 0015 but that genfill.generations.state may also hold RETAINED (the
-- previously active generation kept for rollback), which reads like ACTIVE and CANDIDATE.

-- Why a generation can no longer be read, from what the registry records — or NULL while it
-- can (CANDIDATE, ACTIVE, RETAINED, with its table attached to the dataset's parent, through
-- which readers read it). RETIRED and ABANDONED generations are gone, and so is one whose
-- table was dropped or detached (a DETACH … CONCURRENTLY pending counts). Raises nothing for
-- an unknown generation (NULL: the caller says "unknown" itself).
CREATE FUNCTION genfill.generation_gone(p_dataset text, p_generation text) RETURNS text
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

-- One row per (dataset, generation, holder): taken or extended by every page of a pinned
-- read. `holder` names the reading session (a cursor carries it from page to page);
-- `principal` who read (session_user, or the API's token subject).
CREATE TABLE genfill.reader_leases (
  dataset     text NOT NULL,
  generation  text NOT NULL,
  holder      text NOT NULL CHECK (length(holder) BETWEEN 1 AND 200),
  principal   text NOT NULL DEFAULT session_user,
  taken_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
  renewed_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  expires_at  timestamptz NOT NULL,
  PRIMARY KEY (dataset, generation, holder),
  FOREIGN KEY (dataset, generation) REFERENCES genfill.generations (dataset, generation)
);
-- Retention asks "the longest live lease of this generation".
CREATE INDEX reader_leases_expiry_idx ON genfill.reader_leases (dataset, generation, expires_at);
CREATE TRIGGER reader_leases_principal BEFORE INSERT ON genfill.reader_leases
  FOR EACH ROW EXECUTE FUNCTION genfill.fill_principal();

-- Take or extend p_holder's lease on a readable generation until now + p_ttl_ms; returns the
-- new expiry. Refuses a gone generation (GFG01, the reason from genfill.generation_gone as
-- the message, the state as DETAIL), an unknown dataset or generation (GFN01) and a bad
-- holder or TTL (22023). Leases of the dataset that expired more than an hour ago are
-- dropped on the way: nothing reads them.
CREATE FUNCTION genfill.reader_lease(p_dataset text, p_generation text, p_holder text, p_ttl_ms integer)
RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_state text;
  v_gone text;
  v_expires timestamptz;
BEGIN
  IF p_holder IS NULL OR length(p_holder) NOT BETWEEN 1 AND 200 THEN
    RAISE EXCEPTION 'a reader lease needs a holder of 1 to 200 characters' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF p_ttl_ms IS NULL OR p_ttl_ms NOT BETWEEN 1000 AND 86400000 THEN
    RAISE EXCEPTION 'a reader lease lasts 1 s to 24 h, not % ms', p_ttl_ms USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM genfill.datasets d WHERE d.name = p_dataset) THEN
    RAISE EXCEPTION 'dataset % does not exist', p_dataset USING ERRCODE = 'GFN01';
  END IF;
  -- No row lock on the generation: a cutover's UPDATE of it must not wait behind readers (the
  -- lease row's foreign key takes only KEY SHARE). A retirement racing this page waits for it
  -- anyway at DETACH … CONCURRENTLY and DROP; the next page finds the generation gone.
  SELECT g.state INTO v_state FROM genfill.generations g WHERE g.dataset = p_dataset AND g.generation = p_generation;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'dataset % has no generation %', p_dataset, p_generation USING ERRCODE = 'GFN01';
  END IF;
  v_gone := genfill.generation_gone(p_dataset, p_generation);
  IF v_gone IS NOT NULL THEN
    RAISE EXCEPTION '%', v_gone USING ERRCODE = 'GFG01', DETAIL = v_state;
  END IF;
  DELETE FROM genfill.reader_leases l
   WHERE l.dataset = p_dataset AND l.expires_at < clock_timestamp() - interval '1 hour';
  INSERT INTO genfill.reader_leases AS l (dataset, generation, holder, expires_at)
  VALUES (p_dataset, p_generation, p_holder, clock_timestamp() + p_ttl_ms * interval '1 millisecond')
  ON CONFLICT (dataset, generation, holder) DO UPDATE
     SET expires_at = EXCLUDED.expires_at, renewed_at = clock_timestamp(), principal = EXCLUDED.principal,
         taken_at = CASE WHEN l.expires_at < clock_timestamp() THEN clock_timestamp() ELSE l.taken_at END
  RETURNING l.expires_at INTO v_expires;
  RETURN v_expires;
END $$;

-- Let a lease go when the read is done (its holder, as the principal that holds it); false
-- when there was none.
CREATE FUNCTION genfill.reader_lease_release(p_dataset text, p_generation text, p_holder text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  DELETE FROM genfill.reader_leases l
   WHERE l.dataset = p_dataset AND l.generation = p_generation AND l.holder = p_holder
     AND l.principal = genfill.current_principal();
  RETURN FOUND;
END $$;

ALTER TABLE genfill.reader_leases OWNER TO genfill_owner;
ALTER FUNCTION genfill.generation_gone(text, text) OWNER TO genfill_owner;
ALTER FUNCTION genfill.reader_lease(text, text, text, integer) OWNER TO genfill_owner;
ALTER FUNCTION genfill.reader_lease_release(text, text, text) OWNER TO genfill_owner;
-- Seen by everyone who reads the registry (`genfill status --dataset`); written by nobody but
-- the two functions (no INSERT, UPDATE or DELETE is granted to any role).
GRANT SELECT ON genfill.reader_leases TO genfill_operator, genfill_approver, genfill_reader, genfill_service;
REVOKE ALL ON FUNCTION genfill.reader_lease(text, text, text, integer), genfill.reader_lease_release(text, text, text) FROM PUBLIC;
-- Whoever may SELECT the generation tables (0006) may record that it reads them.
GRANT EXECUTE ON FUNCTION genfill.reader_lease(text, text, text, integer), genfill.reader_lease_release(text, text, text)
  TO genfill_reader, genfill_operator, genfill_approver, genfill_service;
