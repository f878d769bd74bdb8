-- 0011_ingress: sources outside the database enter through a mirror only genfill writes
-- (SPEC "Ingress", invariant 5 "Revisions"; seed 003, the version-aware merge drill).
-- Add-only: never edit this file once landed; add 0012_… instead.
--
-- `genfill capture install <table> --ingress` hands the table to genfill_owner and records it in
-- genfill.captures with mode 'ingress' (genfill.ingress_install); no capture trigger goes on
-- it. `genfill ingest` and `POST /datasets/:ds/events` stage NDJSON events in a temporary table
-- of the caller's session and call genfill.ingest_apply, which — in the caller's transaction —
-- locks the events' keys in key order, compares revisions, applies the winners to the mirror
-- and writes exactly those to genfill.change_log. A stale or repeated event changes nothing
-- and is not logged: a logged stale event would later overwrite a newer built row.

-- The revision of every key genfill has seen at a mirror: live (the mirror holds its row) or a
-- tombstone (deleted: the mirror has no row, this row keeps the delete's revision so an older
-- upsert cannot resurrect it). Revision 0: the row was in the table when it became a mirror
-- (any event supersedes it). The row is also the key's lock: ingest locks it before comparing.
CREATE TABLE genfill.ingress_keys (
  source_table  text NOT NULL,
  key           jsonb NOT NULL,
  revision      bigint NOT NULL CHECK (revision >= 0),
  deleted       boolean NOT NULL,
  changed_at    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (source_table, key)
);
CREATE INDEX ingress_keys_tombstones_idx ON genfill.ingress_keys (source_table, changed_at) WHERE deleted;

-- Per mirror: what compaction forgot. A tombstone older than GENFILL_TOMBSTONE_RETENTION may be
-- dropped; the highest revision dropped is remembered, and an event at or below it for a key
-- genfill holds nothing for is refused (it may be the late upsert of a compacted delete).
CREATE TABLE genfill.ingress_mirrors (
  source_table        text PRIMARY KEY,
  compacted_revision  bigint NOT NULL DEFAULT 0 CHECK (compacted_revision >= 0),
  compacted_keys      bigint NOT NULL DEFAULT 0,
  compacted_at        timestamptz
);

-- Equal revision, other payload: the file was refused and nothing applied; this row is the
-- evidence, written in a second transaction together with the releases it blocked.
CREATE TABLE genfill.ingress_conflicts (
  id            bigserial PRIMARY KEY,
  dataset       text NOT NULL REFERENCES genfill.datasets (name),
  source_table  text NOT NULL,
  key           jsonb NOT NULL,
  revision      bigint NOT NULL,
  -- [{line, op, row}] of the file, and what the mirror held at that revision ({op, row}), or
  -- NULL when two lines of the file disagree with each other.
  incoming      jsonb NOT NULL,
  stored        jsonb,
  -- Open releases moved to RECONCILIATION_REQUIRED by this conflict.
  releases      text[] NOT NULL DEFAULT '{}',
  principal     text NOT NULL DEFAULT session_user,
  at            timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX ingress_conflicts_dataset_idx ON genfill.ingress_conflicts (dataset, id);
CREATE TRIGGER ingress_conflicts_principal BEFORE INSERT ON genfill.ingress_conflicts
  FOR EACH ROW EXECUTE FUNCTION genfill.fill_principal();
CREATE TRIGGER ingress_conflicts_append_only BEFORE UPDATE OR DELETE ON genfill.ingress_conflicts
  FOR EACH ROW EXECUTE FUNCTION genfill.refuse_change();
CREATE TRIGGER ingress_conflicts_no_truncate BEFORE TRUNCATE ON genfill.ingress_conflicts
  FOR EACH STATEMENT EXECUTE FUNCTION genfill.refuse_change();

-- ---------------------------------------------------------------------------------------
-- The ingress mirror behind a dataset, or an exception naming the fix. Internal: called by the
-- verbs below (as genfill_owner).
CREATE FUNCTION genfill.ingress_mirror_of(p_dataset text)
RETURNS TABLE (source_table text, relid oid, key_columns text[], columns text[])
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  ds record;
  cap record;
BEGIN
  SELECT d.name, d.source_table INTO ds FROM genfill.datasets d WHERE d.name = p_dataset;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'dataset % does not exist: a dataset is registered by its first `genfill release submit` (or `genfill dataset adopt`)', p_dataset
      USING ERRCODE = 'GFN01';
  END IF;
  SELECT c.source_table, c.relid, c.mode, c.key_columns INTO cap FROM genfill.captures c WHERE c.relid = to_regclass(ds.source_table);
  IF NOT FOUND OR cap.mode <> 'ingress' THEN
    RAISE EXCEPTION 'the source of dataset %, %, is not an ingress mirror%: run `genfill capture install % --ingress` first', p_dataset, ds.source_table,
      CASE WHEN cap.mode = 'trigger' THEN ' (it is captured by triggers: its own writes reach the log; `genfill capture remove` it before making it a mirror)' ELSE '' END,
      ds.source_table
      USING ERRCODE = 'GFR01';
  END IF;
  RETURN QUERY SELECT cap.source_table, cap.relid, cap.key_columns,
    ARRAY(SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = cap.relid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum);
END $$;

-- Pending events of a dataset: its source's change_log rows not visible in the frontier of its
-- active generation (no frontier yet: every event is pending), counted up to p_limit. Uses the
-- snapshot definitions directly (SPEC "Capture rules": not `txid >= xmin(F)`, which a long
-- transaction degrades to a full scan): invisible in F means txid ≥ xmax(F) or txid in xip(F).
CREATE FUNCTION genfill.ingress_pending(p_dataset text, p_limit bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  src text;
  f pg_snapshot;
  n bigint;
BEGIN
  SELECT c.source_table INTO src FROM genfill.datasets d JOIN genfill.captures c ON c.relid = to_regclass(d.source_table) WHERE d.name = p_dataset;
  IF src IS NULL THEN RETURN 0; END IF;
  SELECT fr.snapshot INTO f FROM genfill.datasets d JOIN genfill.frontiers fr ON fr.dataset = d.name AND fr.generation = d.active_generation
   WHERE d.name = p_dataset;
  IF f IS NULL THEN
    SELECT count(*) INTO n FROM (SELECT 1 FROM genfill.change_log l WHERE l.source_table = src LIMIT p_limit) s;
  ELSE
    SELECT count(*) INTO n FROM (
      SELECT 1 FROM (SELECT 1 FROM genfill.change_log l WHERE l.source_table = src AND l.txid >= pg_snapshot_xmax(f)
                     UNION ALL
                     SELECT 1 FROM genfill.change_log l WHERE l.source_table = src AND l.txid = ANY (ARRAY(SELECT pg_snapshot_xip(f)))) u
      LIMIT p_limit) s;
  END IF;
  RETURN n;
END $$;

-- `genfill capture install <table> --ingress` (installIngressMirror in @genfill/capture): the
-- caller has handed the table to genfill_owner in the same transaction (ALTER TABLE … OWNER,
-- which needs the table's owner to be a superuser or a member of genfill_owner). Here: every
-- write privilege of anyone else is revoked (only ingest_apply, running as genfill_owner,
-- writes it), readers keep SELECT, the rows already there get revision 0, and the table is
-- recorded as a capture of mode 'ingress'. No trigger is installed: ingest writes the log.
-- Idempotent: 'unchanged' when it already is this mirror.
CREATE FUNCTION genfill.ingress_install(p_table regclass, p_reader text)
RETURNS TABLE (source_table text, key_columns text[], status text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  v_key text[];
  v_name text := p_table::text;
  existing record;
  had boolean;
  g record;
  triggers text;
BEGIN
  SELECT c.oid, c.relkind, c.relpersistence, n.nspname, pg_get_userbyid(c.relowner) AS owner INTO rel
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = p_table;
  IF rel.relkind <> 'r' OR rel.relpersistence = 't' THEN
    RAISE EXCEPTION '% is not a plain table: an ingress mirror is an ordinary (not partitioned, not temporary) table', v_name USING ERRCODE = 'GFR01';
  END IF;
  IF rel.nspname IN ('genfill', 'genfill_data', 'pg_catalog', 'information_schema') OR rel.nspname LIKE 'pg\_%' THEN
    RAISE EXCEPTION '% belongs to genfill or the system: a mirror is one of your tables', v_name USING ERRCODE = 'GFR01';
  END IF;
  IF rel.owner <> 'genfill_owner' THEN
    RAISE EXCEPTION '% is owned by %, not genfill_owner: hand it over first (ALTER TABLE % OWNER TO genfill_owner)', v_name, rel.owner, v_name
      USING ERRCODE = 'GFR01';
  END IF;
  SELECT string_agg(quote_ident(t.tgname), ', ' ORDER BY t.tgname) INTO triggers FROM pg_trigger t WHERE t.tgrelid = p_table AND NOT t.tgisinternal;
  IF triggers IS NOT NULL THEN
    RAISE EXCEPTION '% has triggers (%): a mirror has none — ingest writes the change log itself, and a trigger would run as genfill_owner; drop them first', v_name, triggers
      USING ERRCODE = 'GFR01';
  END IF;
  IF EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = p_table AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated <> '') THEN
    RAISE EXCEPTION '% has generated columns: a mirror holds the rows the source sends, column for column', v_name USING ERRCODE = 'GFR01';
  END IF;
  -- The key: the primary key, else a unique constraint on NOT NULL columns; never deferrable
  -- (SPEC "Capture rules").
  SELECT ARRAY(SELECT a.attname::text FROM unnest(k.conkey) WITH ORDINALITY u(attnum, i)
                 JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.attnum ORDER BY u.i)
    INTO v_key
    FROM pg_constraint k
   WHERE k.conrelid = p_table AND k.contype IN ('p', 'u') AND NOT k.condeferrable
     AND NOT EXISTS (SELECT 1 FROM unnest(k.conkey) u(attnum) JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.attnum WHERE NOT a.attnotnull)
   ORDER BY k.contype, k.conname
   LIMIT 1;
  IF v_key IS NULL THEN
    RAISE EXCEPTION '% has no usable key: a mirror needs a primary key (or a unique constraint on NOT NULL columns) that is not deferrable', v_name
      USING ERRCODE = 'GFR01';
  END IF;

  SELECT c.source_table, c.mode, c.key_columns, c.relid INTO existing FROM genfill.captures c
   WHERE c.relid = p_table OR c.source_table = v_name;
  had := FOUND;
  IF had AND existing.mode <> 'ingress' THEN
    RAISE EXCEPTION '% is captured by triggers: run `genfill capture remove %` before making it an ingress mirror', v_name, v_name USING ERRCODE = 'GFR01';
  END IF;
  IF had AND (existing.relid <> p_table OR existing.source_table <> v_name) THEN
    RAISE EXCEPTION 'genfill.captures records % for another table (oid %): the table was dropped or renamed; remove that capture first', existing.source_table, existing.relid
      USING ERRCODE = 'GFR01';
  END IF;
  IF had AND existing.key_columns <> v_key THEN
    RAISE EXCEPTION '% is a mirror keyed by (%), but its key is now (%): a mirror''s key never changes', v_name,
      array_to_string(existing.key_columns, ', '), array_to_string(v_key, ', ') USING ERRCODE = 'GFR01';
  END IF;

  -- Only genfill writes it: no one else keeps a write privilege, table- or column-level.
  EXECUTE format('REVOKE INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON %s FROM PUBLIC CASCADE', p_table);
  FOR g IN SELECT DISTINCT x.grantee FROM pg_class c, aclexplode(c.relacl) x
            WHERE c.oid = p_table AND x.grantee <> c.relowner AND x.grantee <> 0
              AND x.privilege_type IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER')
           UNION
           SELECT DISTINCT x.grantee FROM pg_attribute a, aclexplode(a.attacl) x
            WHERE a.attrelid = p_table AND x.grantee <> 0 AND x.privilege_type IN ('INSERT', 'UPDATE', 'REFERENCES') LOOP
    -- A table-level REVOKE takes the column-level grants of the same privileges with it.
    EXECUTE format('REVOKE INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON %s FROM %I CASCADE', p_table, pg_get_userbyid(g.grantee));
  END LOOP;
  -- The fleet builds from it, people validate releases against it, readers read it.
  EXECUTE format('GRANT SELECT ON %s TO genfill_service, genfill_operator, genfill_approver, genfill_reader', p_table);
  IF p_reader IS NOT NULL AND p_reader <> 'genfill_owner' AND EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = p_reader) THEN
    EXECUTE format('GRANT SELECT ON %s TO %I', p_table, p_reader);
  END IF;

  IF had THEN
    RETURN QUERY SELECT v_name, v_key, 'unchanged'::text;
    RETURN;
  END IF;
  -- Rows already there are "as of the install": revision 0, which every event supersedes.
  EXECUTE format('INSERT INTO genfill.ingress_keys (source_table, key, revision, deleted) SELECT $1, jsonb_build_object(%s), 0, false FROM %s t ON CONFLICT DO NOTHING',
    (SELECT string_agg(format('%L, t.%I', k, k), ', ') FROM unnest(v_key) k), p_table) USING v_name;
  INSERT INTO genfill.captures (source_table, relid, mode, key_columns) VALUES (v_name, p_table, 'ingress', v_key);
  INSERT INTO genfill.ingress_mirrors (source_table) VALUES (v_name) ON CONFLICT DO NOTHING;
  RETURN QUERY SELECT v_name, v_key, 'installed'::text;
END $$;

-- ---------------------------------------------------------------------------------------
-- `genfill ingest <dataset> <file>` / `POST /datasets/:ds/events`: apply the events the caller
-- staged in its session's temporary table `ingress_events (line integer, key jsonb, revision
-- bigint, op text, row jsonb)` (the client validated every line; the table is read, never
-- trusted: it must be a plain table of this session, and every event is checked again).
-- In this one transaction:
--   1. refuse (GFI01, nothing written) events that do not fit the mirror, with their lines;
--   2. refuse (GFB01) when the dataset's pending events plus these exceed p_max_pending;
--   3. per key, the file's highest revision is its candidate (the last line of it); two lines
--      with one revision and other payloads are a conflict;
--   4. lock the keys in key order — a key genfill never saw by inserting its ingress_keys row
--      (waiting for a concurrent inserter of the same key), a known one with FOR UPDATE — and
--      compare with what genfill holds: a higher revision wins, a lower or equal one is a no-op,
--      an equal one with another payload a conflict. Conflicts raise GFX01 (DETAIL: the
--      conflicts as JSON): nothing is applied; the caller records them in a second transaction
--      with genfill.ingress_record_conflict;
--   5. at or below the compaction watermark, a key genfill holds nothing for is refused;
--   6. the winners go to the mirror (upsert, or delete leaving the tombstone in ingress_keys)
--      and to genfill.change_log (revision = the event's), and a dataset_log row 'ingest'.
-- Row images are typed by the mirror (jsonb_populate_record, then to_jsonb) under pinned
-- session settings, so equal payloads compare equal whatever their JSON spelling. Set-based
-- throughout (a million events are a handful of statements); JIT is off, as its compile time
-- exceeds what it saves on these one-pass statements.
CREATE FUNCTION genfill.ingest_apply(p_dataset text, p_max_pending bigint DEFAULT NULL)
RETURNS TABLE (events bigint, applied bigint, upserts bigint, deletes bigint, stale bigint, refused bigint, refused_keys jsonb, source_table text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET "TimeZone" = 'UTC' SET "DateStyle" = 'ISO, YMD' SET "IntervalStyle" = 'postgres' SET extra_float_digits = 1 SET lc_monetary = 'C'
SET work_mem = '256MB' SET jit = off
AS $$
DECLARE
  m record;
  mirror text;
  staged oid;
  shape text[];
  n bigint;
  nkeys bigint;
  nfresh bigint;
  pending bigint;
  problems jsonb;
  conflicts jsonb;
  watermark bigint;
  keyexpr text;
  keymatch text;
  setlist text;
  keycols text;
  cols text;
  rcols text;
  nheld bigint;
  v_applied bigint;
  v_upserts bigint;
  v_deletes bigint;
  v_stale bigint;
  v_refused bigint;
  v_refused_keys jsonb;
  ev record;
BEGIN
  SELECT * INTO m FROM genfill.ingress_mirror_of(p_dataset);
  mirror := m.relid::regclass::text;

  -- The staged events: a plain table in this session's own temporary schema, of exactly this
  -- shape (a view or a policy there would run the caller's code as genfill_owner).
  SELECT c.oid INTO staged FROM pg_class c
   WHERE c.relname = 'ingress_events' AND c.relnamespace = pg_my_temp_schema() AND c.relkind = 'r' AND NOT c.relrowsecurity;
  SELECT array_agg(a.attname || ' ' || format_type(a.atttypid, NULL) ORDER BY a.attnum) INTO shape
    FROM pg_attribute a WHERE a.attrelid = staged AND a.attnum > 0 AND NOT a.attisdropped;
  IF staged IS NULL OR shape IS DISTINCT FROM ARRAY['line integer', 'key jsonb', 'revision bigint', 'op text', 'row jsonb'] THEN
    RAISE EXCEPTION 'stage the events first: CREATE TEMPORARY TABLE ingress_events (line integer, key jsonb, revision bigint, op text, row jsonb), readable by genfill_owner'
      USING ERRCODE = 'GFR01';
  END IF;

  SELECT count(*) INTO n FROM ONLY pg_temp.ingress_events;
  IF p_max_pending IS NOT NULL AND n > p_max_pending THEN
    RAISE EXCEPTION '% events in one file, more than GENFILL_MAX_PENDING_EVENTS (%): split the file', n, p_max_pending
      USING ERRCODE = 'GFI01', DETAIL = jsonb_build_array(jsonb_build_object('line', NULL, 'message',
        format('%s events in one file, more than GENFILL_MAX_PENDING_EVENTS (%s): split the file', n, p_max_pending)))::text;
  END IF;

  -- 1. Every event fits the mirror: right op and revision, the key's columns exactly, an
  --    upsert's row with every column and no other, its key columns equal to the key. (The
  --    checks are spelled out per mirror, so a valid line costs no subquery.)
  EXECUTE format($q$
    SELECT jsonb_agg(jsonb_build_object('line', s.line, 'message', s.msg) ORDER BY s.line) FROM (
      SELECT e.line, CASE
        WHEN e.line IS NULL THEN 'no line number'
        WHEN e.op IS NULL OR e.op NOT IN ('upsert', 'delete') THEN 'op must be "upsert" or "delete"'
        WHEN e.revision IS NULL OR e.revision <= 0 THEN 'revision must be an integer > 0'
        WHEN e.key IS NULL OR jsonb_typeof(e.key) <> 'object' OR NOT (e.key ?& $1) OR (e.key - $1) <> '{}'
          THEN format('key must be an object with exactly the key columns (%%s)', array_to_string($1, ', '))
        WHEN %1$s THEN 'a key column is null'
        WHEN e.op = 'upsert' AND (e.row IS NULL OR jsonb_typeof(e.row) <> 'object') THEN 'an upsert carries row, the full row as an object'
        WHEN e.row IS NOT NULL AND jsonb_typeof(e.row) <> 'object' THEN 'row must be an object'
        WHEN e.row IS NOT NULL AND (e.row - $2) <> '{}'
          THEN format('row has columns %%s does not: %%s', $3, (SELECT string_agg(k, ', ') FROM jsonb_object_keys(e.row - $2) k))
        WHEN e.op = 'upsert' AND NOT (e.row ?& $2)
          THEN format('row lacks columns of %%s: %%s (send the full row; null is a value)', $3,
                      (SELECT string_agg(c, ', ') FROM unnest($2) c WHERE NOT e.row ? c))
        WHEN e.op = 'upsert' AND e.key <> jsonb_build_object(%2$s) THEN 'the key columns of row differ from key'
        END AS msg
        FROM ONLY pg_temp.ingress_events e) s
     WHERE s.msg IS NOT NULL$q$,
    (SELECT string_agg(format('e.key -> %L = %L', k, 'null'), ' OR ') FROM unnest(m.key_columns) k),
    (SELECT string_agg(format('%L, e.row -> %L', k, k), ', ') FROM unnest(m.key_columns) k))
    INTO problems USING m.key_columns, m.columns, mirror;
  IF problems IS NOT NULL THEN
    RAISE EXCEPTION '% events do not fit %', jsonb_array_length(problems), mirror USING ERRCODE = 'GFI01', DETAIL = problems::text;
  END IF;

  -- 2. The pending bound: busy is an answer to retry, never a drop.
  IF p_max_pending IS NOT NULL THEN
    pending := genfill.ingress_pending(p_dataset, p_max_pending + 1);
    IF pending + n > p_max_pending THEN
      RAISE EXCEPTION 'dataset % has % pending events; % more would pass GENFILL_MAX_PENDING_EVENTS (%): retry once the projector has consumed some',
        p_dataset, pending, n, p_max_pending
        USING ERRCODE = 'GFB01', DETAIL = jsonb_build_object('pending', pending, 'events', n, 'max', p_max_pending)::text;
    END IF;
  END IF;

  -- Ingest and compaction of one mirror exclude each other (compaction takes it exclusively).
  PERFORM pg_advisory_xact_lock_shared(hashtextextended('genfill:ingress:' || m.source_table, 0));

  -- 3. One candidate per key: its highest revision, the last line of that. The canonical key is
  --    the key columns of the typed key; `r` is the row as the mirror stores it (a value of the
  --    mirror's row type). A value a column type refuses is the caller's input: found line by
  --    line, nothing written.
  keyexpr := (SELECT format('jsonb_build_object(%s)', string_agg(format('%L, kr.%I', k, k), ', ')) FROM unnest(m.key_columns) k);
  BEGIN
    EXECUTE format($q$
      CREATE TEMPORARY TABLE gf_ingress_w ON COMMIT DROP AS
      SELECT DISTINCT ON (s.key) s.key, s.revision, s.op, s.r, s.line
        FROM (SELECT e.line, e.revision, e.op, %1$s AS key,
                     CASE WHEN e.row IS NOT NULL THEN jsonb_populate_record(NULL::%2$s, e.row) END AS r
                FROM ONLY pg_temp.ingress_events e CROSS JOIN LATERAL jsonb_populate_record(NULL::%2$s, e.key) kr) s
       ORDER BY s.key, s.revision DESC, s.line DESC$q$, keyexpr, mirror);
    GET DIAGNOSTICS nkeys = ROW_COUNT;
  EXCEPTION WHEN data_exception THEN
    problems := '[]';
    FOR ev IN SELECT e.line, e.key, e.row FROM ONLY pg_temp.ingress_events e ORDER BY e.line LOOP
      BEGIN
        EXECUTE format('SELECT jsonb_populate_record(NULL::%1$s, $1), jsonb_populate_record(NULL::%1$s, $2)', mirror) USING ev.key, ev.row;
      EXCEPTION WHEN data_exception THEN
        problems := problems || jsonb_build_object('line', ev.line, 'message', SQLERRM);
      END;
    END LOOP;
    RAISE EXCEPTION '% events have values the columns of % refuse', jsonb_array_length(problems), mirror USING ERRCODE = 'GFI01', DETAIL = problems::text;
  END;
  -- Some key is on several lines: one revision of it with two payloads is a conflict.
  IF nkeys < n THEN
    EXECUTE format($q$
      WITH x AS (SELECT e.line, %1$s AS key, e.revision, e.op, e.row
                   FROM ONLY pg_temp.ingress_events e CROSS JOIN LATERAL jsonb_populate_record(NULL::%2$s, e.key) kr),
           dup AS (SELECT x.key, x.revision FROM x GROUP BY x.key, x.revision HAVING count(*) > 1),
           c AS (SELECT x.key, x.revision,
                        jsonb_agg(jsonb_build_object('line', x.line, 'op', x.op, 'row', p.img) ORDER BY x.line) AS incoming,
                        count(DISTINCT CASE WHEN x.op = 'delete' THEN 'delete' ELSE p.img::text END) AS payloads
                   FROM x JOIN dup ON dup.key = x.key AND dup.revision = x.revision
                   CROSS JOIN LATERAL (SELECT CASE WHEN x.row IS NOT NULL THEN to_jsonb(jsonb_populate_record(NULL::%2$s, x.row)) END AS img) p
                  GROUP BY x.key, x.revision)
      SELECT jsonb_agg(jsonb_build_object('key', c.key, 'revision', c.revision, 'stored', NULL, 'incoming', c.incoming) ORDER BY c.key)
        FROM (SELECT * FROM c WHERE c.payloads > 1 ORDER BY c.key LIMIT 100) c$q$, keyexpr, mirror) INTO conflicts;
    IF conflicts IS NOT NULL THEN
      RAISE EXCEPTION 'conflict: key % at revision % is sent with two payloads (lines %); the file was refused, nothing applied',
        conflicts->0->'key', conflicts->0->'revision', (SELECT string_agg(i->>'line', ', ') FROM jsonb_array_elements(conflicts->0->'incoming') i)
        USING ERRCODE = 'GFX01', DETAIL = conflicts::text;
    END IF;
  END IF;
  ANALYZE pg_temp.gf_ingress_w;

  -- 4./5. Lock and compare, keys in key order. A key genfill never saw: inserting its row is
  --    its lock, and it wins — unless it is at or below the compaction watermark.
  SELECT im.compacted_revision INTO watermark FROM genfill.ingress_mirrors im WHERE im.source_table = m.source_table;
  watermark := coalesce(watermark, 0);
  -- The bulk load first: when no key of the file is known, one plain INSERT (half the cost of
  -- ON CONFLICT); a known key, or one a concurrent ingest is inserting, sends it to the per-key
  -- path (which waits for that ingest, then compares with what it wrote).
  nfresh := -1;
  BEGIN
    INSERT INTO genfill.ingress_keys (source_table, key, revision, deleted)
    SELECT m.source_table, w.key, w.revision, w.op = 'delete' FROM pg_temp.gf_ingress_w w
     WHERE w.revision > watermark ORDER BY w.key;
    GET DIAGNOSTICS nfresh = ROW_COUNT;
  EXCEPTION WHEN unique_violation THEN
    nfresh := -1;
  END;
  IF nfresh = -1 THEN
    CREATE TEMPORARY TABLE gf_ingress_fresh ON COMMIT DROP AS
    WITH ins AS (
      INSERT INTO genfill.ingress_keys AS k (source_table, key, revision, deleted)
      SELECT m.source_table, w.key, w.revision, w.op = 'delete' FROM pg_temp.gf_ingress_w w
       WHERE w.revision > watermark ORDER BY w.key
      ON CONFLICT DO NOTHING
      RETURNING k.key)
    SELECT ins.key FROM ins;
    GET DIAGNOSTICS nfresh = ROW_COUNT;
  ELSIF nfresh < nkeys THEN
    -- All above the watermark were new; the others are held, or refused.
    CREATE TEMPORARY TABLE gf_ingress_fresh ON COMMIT DROP AS
    SELECT w.key FROM pg_temp.gf_ingress_w w WHERE w.revision > watermark;
  END IF;
  IF nfresh = nkeys THEN
    -- Every key is new (the bulk load): nothing to compare.
    ALTER TABLE pg_temp.gf_ingress_w ADD COLUMN state text NOT NULL DEFAULT 'fresh', ADD COLUMN stored_revision bigint, ADD COLUMN stored_deleted boolean;
    ALTER TABLE pg_temp.gf_ingress_w RENAME TO gf_ingress_d;
  ELSE
    ANALYZE pg_temp.gf_ingress_w;
    ANALYZE pg_temp.gf_ingress_fresh;
    CREATE TEMPORARY TABLE gf_ingress_held ON COMMIT DROP AS
    SELECT k.key, k.revision, k.deleted
      FROM genfill.ingress_keys k JOIN pg_temp.gf_ingress_w w ON k.source_table = m.source_table AND k.key = w.key
     WHERE NOT EXISTS (SELECT 1 FROM pg_temp.gf_ingress_fresh f WHERE f.key = w.key)
     ORDER BY k.key FOR UPDATE OF k;
    ANALYZE pg_temp.gf_ingress_held;
    CREATE TEMPORARY TABLE gf_ingress_d ON COMMIT DROP AS
    SELECT w.key, w.revision, w.op, w.r, w.line,
           CASE WHEN f.key IS NOT NULL THEN 'fresh'
                WHEN h.key IS NULL THEN 'refused'
                WHEN w.revision > h.revision THEN 'apply'
                WHEN w.revision < h.revision THEN 'stale'
                WHEN h.deleted AND w.op = 'delete' THEN 'stale'
                WHEN h.deleted OR w.op = 'delete' THEN 'conflict'
                ELSE 'equal' END AS state,
           h.revision AS stored_revision, h.deleted AS stored_deleted
      FROM pg_temp.gf_ingress_w w
      LEFT JOIN pg_temp.gf_ingress_fresh f ON f.key = w.key
      LEFT JOIN pg_temp.gf_ingress_held h ON h.key = w.key;
    DROP TABLE pg_temp.gf_ingress_w, pg_temp.gf_ingress_held, pg_temp.gf_ingress_fresh;
  END IF;

  -- Equal revisions of live rows: the same payload is a repeat, another one a conflict. A
  -- conflict with what genfill holds refuses the whole file, with the evidence of both sides.
  keymatch := (SELECT string_agg(format('t.%1$I = kr.%1$I', k), ' AND ') FROM unnest(m.key_columns) k);
  IF nfresh < nkeys THEN
    EXECUTE format($q$
      SELECT jsonb_agg(jsonb_build_object('key', x.key, 'revision', x.revision,
               'incoming', jsonb_build_array(jsonb_build_object('line', x.line, 'op', x.op, 'row', x.img)),
               'stored', jsonb_build_object('op', CASE WHEN x.stored_deleted THEN 'delete' ELSE 'upsert' END, 'row', x.held))
             ORDER BY x.key)
        FROM (SELECT d.key, d.revision, d.line, d.op, to_jsonb(d.r) AS img, d.state, d.stored_deleted, to_jsonb(t.*) AS held
                FROM pg_temp.gf_ingress_d d CROSS JOIN LATERAL jsonb_populate_record(NULL::%1$s, d.key) kr
                LEFT JOIN %1$s t ON %2$s
               WHERE d.state IN ('conflict', 'equal')) x
       WHERE x.state = 'conflict' OR x.held IS DISTINCT FROM x.img$q$, mirror, keymatch) INTO conflicts;
    IF conflicts IS NOT NULL THEN
      RAISE EXCEPTION 'conflict: key % at revision % already holds another payload (%); the file was refused, nothing applied',
        conflicts->0->'key', conflicts->0->'revision', conflicts->0->'stored'->>'op'
        USING ERRCODE = 'GFX01', DETAIL = (SELECT jsonb_agg(c) FROM (SELECT c FROM jsonb_array_elements(conflicts) c LIMIT 100) s)::text;
    END IF;
  END IF;

  -- 6. Apply the winners: the mirror, the log, the keys' revisions.
  IF (SELECT count(*) FROM unnest(m.columns) c WHERE c <> ALL (m.key_columns)) = 0 THEN
    setlist := 'NOTHING';
  ELSE
    setlist := 'UPDATE SET ' || (SELECT string_agg(format('%1$I = EXCLUDED.%1$I', c), ', ') FROM unnest(m.columns) c WHERE c <> ALL (m.key_columns));
  END IF;
  -- A key genfill never saw has no mirror row (install gave every row there an ingress_keys
  -- row, and only this verb writes the mirror): a plain INSERT, with the upsert as the fallback.
  keycols := (SELECT string_agg(quote_ident(c), ', ') FROM unnest(m.key_columns) c);
  cols := (SELECT string_agg(quote_ident(c), ', ') FROM unnest(m.columns) c);
  rcols := (SELECT string_agg('(d.r).' || quote_ident(c), ', ') FROM unnest(m.columns) c);
  BEGIN
    EXECUTE format($q$
      INSERT INTO %1$s (%2$s) OVERRIDING SYSTEM VALUE
      SELECT %3$s FROM pg_temp.gf_ingress_d d WHERE d.state = 'fresh' AND d.op = 'upsert'$q$, mirror, cols, rcols);
    GET DIAGNOSTICS v_upserts = ROW_COUNT;
  EXCEPTION WHEN unique_violation THEN
    EXECUTE format($q$
      INSERT INTO %1$s (%2$s) OVERRIDING SYSTEM VALUE
      SELECT %3$s FROM pg_temp.gf_ingress_d d WHERE d.state = 'fresh' AND d.op = 'upsert'
      ON CONFLICT (%4$s) DO %5$s$q$, mirror, cols, rcols, keycols, setlist);
    GET DIAGNOSTICS v_upserts = ROW_COUNT;
  END;
  EXECUTE format($q$
    INSERT INTO %1$s AS t (%2$s) OVERRIDING SYSTEM VALUE
    SELECT %3$s FROM pg_temp.gf_ingress_d d WHERE d.state = 'apply' AND d.op = 'upsert'
    ON CONFLICT (%4$s) DO %5$s$q$, mirror, cols, rcols, keycols, setlist);
  GET DIAGNOSTICS nheld = ROW_COUNT;
  v_upserts := v_upserts + nheld;
  INSERT INTO genfill.change_log (source_table, key, op, row, revision)
  SELECT m.source_table, d.key, d.op, to_jsonb(d.r), d.revision FROM pg_temp.gf_ingress_d d
   WHERE d.state IN ('fresh', 'apply') AND d.op = 'upsert';
  -- A delete removes the mirror's row and logs it (the last image), else the row it carried.
  EXECUTE format($q$
    WITH gone AS (
      DELETE FROM %1$s t USING pg_temp.gf_ingress_d d CROSS JOIN LATERAL jsonb_populate_record(NULL::%1$s, d.key) kr
       WHERE d.state IN ('fresh', 'apply') AND d.op = 'delete' AND %2$s
      RETURNING d.key, to_jsonb(t.*) AS img)
    INSERT INTO genfill.change_log (source_table, key, op, row, revision)
    SELECT $1, d.key, 'delete', coalesce(gone.img, to_jsonb(d.r)), d.revision
      FROM pg_temp.gf_ingress_d d LEFT JOIN gone ON gone.key = d.key
     WHERE d.state IN ('fresh', 'apply') AND d.op = 'delete'$q$, mirror, keymatch) USING m.source_table;
  GET DIAGNOSTICS v_deletes = ROW_COUNT;
  IF nfresh < nkeys THEN
    UPDATE genfill.ingress_keys k SET revision = d.revision, deleted = (d.op = 'delete'), changed_at = now()
      FROM pg_temp.gf_ingress_d d
     WHERE k.source_table = m.source_table AND k.key = d.key AND d.state = 'apply';
  END IF;
  v_applied := v_upserts + v_deletes;
  -- Lines superseded by a later revision in the same file are stale too; refused: a key genfill
  -- holds nothing for at or below the watermark (its tombstone may have been compacted).
  SELECT count(*) FILTER (WHERE d.state IN ('stale', 'equal')) + (n - nkeys), count(*) FILTER (WHERE d.state = 'refused'),
         (SELECT jsonb_agg(r.key ORDER BY r.key) FROM (SELECT d2.key FROM pg_temp.gf_ingress_d d2 WHERE d2.state = 'refused' ORDER BY d2.key LIMIT 20) r)
    INTO v_stale, v_refused, v_refused_keys
    FROM pg_temp.gf_ingress_d d;
  DROP TABLE pg_temp.gf_ingress_d;

  INSERT INTO genfill.dataset_log (dataset, action, detail)
  VALUES (p_dataset, 'ingest', jsonb_build_object('events', n, 'applied', v_applied, 'upserts', v_upserts, 'deletes', v_deletes,
                                                  'stale', v_stale, 'refused', v_refused, 'sourceTable', m.source_table));
  RETURN QUERY SELECT n, v_applied, v_upserts, v_deletes, v_stale, v_refused, coalesce(v_refused_keys, '[]'), m.source_table;
END $$;

-- The second transaction of a refused file: record each conflict and move the open releases
-- built from the mirror (of every dataset whose source it is: the conflict is in the source)
-- to RECONCILIATION_REQUIRED — every release whose state the transition table lets move there.
CREATE FUNCTION genfill.ingress_record_conflict(p_dataset text, p_conflicts jsonb)
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
  FOR rel IN SELECT r.id, r.state FROM genfill.releases r JOIN genfill.datasets d ON d.name = r.dataset
              WHERE to_regclass(d.source_table) = m.relid
                AND EXISTS (SELECT 1 FROM genfill.release_transitions t WHERE t.from_state = r.state AND t.to_state = 'RECONCILIATION_REQUIRED')
              ORDER BY r.id FOR UPDATE OF r LOOP
    UPDATE genfill.releases r SET state = 'RECONCILIATION_REQUIRED', state_changed_at = now() WHERE r.id = rel.id AND r.state = rel.state;
    INSERT INTO genfill.release_log (release, action, from_state, to_state, reason, detail)
    VALUES (rel.id, 'ingress-conflict', rel.state, 'RECONCILIATION_REQUIRED',
            format('ingest into %s: equal revision with another payload', p_dataset),
            jsonb_build_object('dataset', p_dataset, 'sourceTable', m.source_table,
                               'keys', (SELECT jsonb_agg(jsonb_build_object('key', c->'key', 'revision', c->'revision')) FROM jsonb_array_elements(p_conflicts) c)));
    moved := moved || rel.id;
  END LOOP;
  WITH ins AS (
    INSERT INTO genfill.ingress_conflicts (dataset, source_table, key, revision, incoming, stored, releases)
    SELECT p_dataset, m.source_table, c->'key', (c->>'revision')::bigint, c->'incoming', nullif(c->'stored', 'null'), moved
      FROM jsonb_array_elements(p_conflicts) c
    RETURNING id)
  SELECT array_agg(id ORDER BY id) INTO ids FROM ins;
  INSERT INTO genfill.dataset_log (dataset, action, detail)
  VALUES (p_dataset, 'ingest-conflict', jsonb_build_object('conflicts', to_jsonb(ids), 'releases', to_jsonb(moved)));
  RETURN QUERY SELECT ids, moved;
END $$;

-- Tombstones older than p_retention (GENFILL_TOMBSTONE_RETENTION) are dropped; the mirror
-- remembers the highest revision dropped (the watermark ingest_apply refuses at or below).
-- Skipped (NULL) while an ingest of the mirror runs: it is housekeeping, never worth a wait.
CREATE FUNCTION genfill.ingress_compact_tombstones(p_dataset text, p_retention interval)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  m record;
  n bigint;
  top bigint;
BEGIN
  SELECT * INTO m FROM genfill.ingress_mirror_of(p_dataset);
  IF p_retention IS NULL OR p_retention < interval '0' THEN
    RAISE EXCEPTION 'retention must be a duration ≥ 0, not %', p_retention USING ERRCODE = 'GFR01';
  END IF;
  IF NOT pg_try_advisory_xact_lock(hashtextextended('genfill:ingress:' || m.source_table, 0)) THEN
    RETURN NULL;
  END IF;
  WITH gone AS (
    DELETE FROM genfill.ingress_keys k
     WHERE k.source_table = m.source_table AND k.deleted AND k.changed_at < now() - p_retention
    RETURNING k.revision)
  SELECT count(*), max(gone.revision) INTO n, top FROM gone;
  IF n > 0 THEN
    INSERT INTO genfill.ingress_mirrors AS im (source_table, compacted_revision, compacted_keys, compacted_at)
    VALUES (m.source_table, top, n, now())
    ON CONFLICT (source_table) DO UPDATE
      SET compacted_revision = greatest(im.compacted_revision, EXCLUDED.compacted_revision),
          compacted_keys = im.compacted_keys + EXCLUDED.compacted_keys, compacted_at = EXCLUDED.compacted_at;
    INSERT INTO genfill.dataset_log (dataset, action, detail)
    VALUES (p_dataset, 'ingress-compact', jsonb_build_object('tombstones', n, 'upToRevision', top, 'retention', p_retention::text));
  END IF;
  RETURN n;
END $$;

-- Ownership, and who may call what.
ALTER TABLE genfill.ingress_keys OWNER TO genfill_owner;
ALTER TABLE genfill.ingress_mirrors OWNER TO genfill_owner;
ALTER TABLE genfill.ingress_conflicts OWNER TO genfill_owner;
ALTER FUNCTION genfill.ingress_mirror_of(text) OWNER TO genfill_owner;
ALTER FUNCTION genfill.ingress_pending(text, bigint) OWNER TO genfill_owner;
ALTER FUNCTION genfill.ingress_install(regclass, text) OWNER TO genfill_owner;
ALTER FUNCTION genfill.ingest_apply(text, bigint) OWNER TO genfill_owner;
ALTER FUNCTION genfill.ingress_record_conflict(text, jsonb) OWNER TO genfill_owner;
ALTER FUNCTION genfill.ingress_compact_tombstones(text, interval) OWNER TO genfill_owner;
GRANT SELECT ON genfill.ingress_keys, genfill.ingress_mirrors, genfill.ingress_conflicts
  TO genfill_operator, genfill_approver, genfill_reader, genfill_service;
REVOKE ALL ON FUNCTION genfill.ingress_mirror_of(text), genfill.ingress_pending(text, bigint), genfill.ingress_install(regclass, text),
  genfill.ingest_apply(text, bigint), genfill.ingress_record_conflict(text, jsonb), genfill.ingress_compact_tombstones(text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.ingress_pending(text, bigint) TO genfill_operator, genfill_approver, genfill_reader, genfill_service;
-- ingress_install: no grant; only genfill_owner's members (and superusers), who could hand
-- the table over, may make a mirror.
GRANT EXECUTE ON FUNCTION genfill.ingest_apply(text, bigint), genfill.ingress_record_conflict(text, jsonb),
  genfill.ingress_compact_tombstones(text, interval) TO genfill_operator, genfill_service, genfill_api;
