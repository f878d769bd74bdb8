-- `genfill ingest <dataset> <file>` / `POST /datasets/:ds/events`: apply the events the caller
-- staged in its session's temporary table `ingress_events (line integer, event jsonb)`, one row
-- per line of the file, `event` the line's JSON ({key, revision, op, row}) or NULL for a blank
-- line. The client validated every line; the table is read, never trusted: it must be a plain
-- table of this session of exactly this shape, and every event is checked again. In this one
-- transaction, as 0011 (whose order of refusals this keeps):
--   1. refuse (GFI01, nothing written) events that do not fit the mirror, with their lines;
--   2. refuse (GFB01) when the dataset's pending events plus these exceed the owner's bound,
--      the setting ingest.max_pending_events (genfill.settings, migration 0026): the caller
--      has no say in it (before 0026 the caller passed it, and NULL skipped it);
--   3. type every event by the mirror (a value a column refuses: GFI01 with its line); per key
--      the file's highest revision is its candidate (the last line of it); two lines with one
--      revision and other payloads are a conflict (GFX01);
--   4. lock the keys in key order — a key genfill never saw by inserting its ingress_keys row
--      (waiting for a concurrent inserter of the same key), a known one with FOR UPDATE — and
--      compare with what genfill holds: a higher revision wins, a lower or equal one is a no-op,
--      an equal one with another payload a conflict: nothing is applied, and this verb
--      records the conflicts itself (genfill.ingress_record_conflict, internal: the conflicts
--      are what it found, never a caller's JSON) and returns them in `conflicts` with the ids
--      and the releases moved to RECONCILIATION_REQUIRED — the caller commits and reports;
--   5. at or below the compaction watermark, a key genfill holds nothing for is refused;
--   6. the winners go to the mirror (upsert, or delete leaving the tombstone in ingress_keys)
--      and to genfill.change_log (revision = the event's), and a dataset_log row 'ingest'.
-- Row images are typed by the mirror (jsonb_populate_record, then to_jsonb) under pinned
-- session settings, so equal payloads compare equal whatever their JSON spelling.
CREATE OR REPLACE FUNCTION genfill.ingest_apply(p_dataset text)
RETURNS TABLE (events bigint, applied bigint, upserts bigint, deletes bigint, stale bigint, refused bigint, refused_keys jsonb, source_table text,
               conflicts jsonb, conflict_ids bigint[], conflict_releases text[])
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
  ndeletes bigint;
  pending bigint;
  problems jsonb;
  conflicts jsonb;
  watermark bigint;
  typed boolean;
  bulk boolean;
  extract text;
  checks text;
  keyexpr text;
  keyorder text;
  tkeys text;
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
  v_max bigint;
  v_detail text;
  v_recorded record;
BEGIN
  v_max := genfill.setting('ingest.max_pending_events')::bigint;
  SELECT * INTO m FROM genfill.ingress_mirror_of(p_dataset);
  mirror := m.relid::regclass::text;

  -- The staged events: a plain table in this session's own temporary schema, of exactly this
  -- shape (a view or a policy there would run the caller's code as genfill_owner).
  SELECT c.oid INTO staged FROM pg_class c
   WHERE c.relname = 'ingress_events' AND c.relnamespace = pg_my_temp_schema() AND c.relkind = 'r' AND NOT c.relrowsecurity;
  SELECT array_agg(a.attname || ' ' || format_type(a.atttypid, NULL) ORDER BY a.attnum) INTO shape
    FROM pg_attribute a WHERE a.attrelid = staged AND a.attnum > 0 AND NOT a.attisdropped;
  IF staged IS NULL OR shape IS DISTINCT FROM ARRAY['line integer', 'event jsonb'] THEN
    RAISE EXCEPTION 'stage the events first: CREATE TEMPORARY TABLE ingress_events (line integer, event jsonb), one row per line, readable by genfill_owner'
      USING ERRCODE = 'GFR01';
  END IF;

  -- 1. Every event fits the mirror: an object, the right op, a revision that is an integer > 0
  --    (a number, or a string of digits), the key's columns exactly, an upsert's row with every
  --    column and no other, its key columns equal to the key. Spelled out per mirror, so a valid
  --    line costs no subquery; `extract` reads each field of the line once, `checks` is the
  --    message of a line that does not fit (NULL when it fits).
  extract := $q$
    SELECT e.line, jsonb_typeof(e.event) AS kind, e.event -> 'key' AS key, e.event ->> 'op' AS op, nullif(e.event -> 'row', 'null') AS row,
           CASE jsonb_typeof(e.event -> 'revision')
             WHEN 'number' THEN (e.event -> 'revision')::numeric
             WHEN 'string' THEN CASE WHEN (e.event ->> 'revision') ~ '^[0-9]{1,30}$' THEN (e.event ->> 'revision')::numeric END
           END AS revnum
      FROM ONLY pg_temp.ingress_events e WHERE e.event IS NOT NULL$q$;
  checks := format($q$CASE
        WHEN x.line IS NULL THEN 'no line number'
        WHEN x.kind <> 'object' THEN 'an event is a JSON object {key, revision, op, row}'
        WHEN x.op IS NULL OR x.op NOT IN ('upsert', 'delete') THEN 'op must be "upsert" or "delete"'
        WHEN x.revnum IS NULL OR x.revnum <= 0 OR x.revnum <> trunc(x.revnum) THEN 'revision must be an integer > 0'
        WHEN x.revnum > 9223372036854775807 THEN 'revision must fit a bigint'
        WHEN x.key IS NULL OR jsonb_typeof(x.key) <> 'object' OR NOT (x.key ?& %1$L::text[]) OR (x.key - %1$L::text[]) <> '{}'
          THEN %2$L
        WHEN %3$s THEN 'a key column is null'
        WHEN x.op = 'upsert' AND (x.row IS NULL OR jsonb_typeof(x.row) <> 'object') THEN 'an upsert carries row, the full row as an object'
        WHEN x.row IS NOT NULL AND jsonb_typeof(x.row) <> 'object' THEN 'row must be an object'
        WHEN x.row IS NOT NULL AND (x.row - %4$L::text[]) <> '{}'
          THEN format('row has columns %%s does not: %%s', %5$L, (SELECT string_agg(k, ', ') FROM jsonb_object_keys(x.row - %4$L::text[]) k))
        WHEN x.op = 'upsert' AND NOT (x.row ?& %4$L::text[])
          THEN format('row lacks columns of %%s: %%s (send the full row; null is a value)', %5$L,
                      (SELECT string_agg(c, ', ') FROM unnest(%4$L::text[]) c WHERE NOT x.row ? c))
        WHEN x.op = 'upsert' AND NOT (x.row @> x.key%6$s) THEN 'the key columns of row differ from key'
        END$q$,
    m.key_columns,
    format('key must be an object with exactly the key columns (%s)', array_to_string(m.key_columns, ', ')),
    (SELECT string_agg(format('x.key @> %L', jsonb_build_object(k, NULL)), ' OR ') FROM unnest(m.key_columns) k),
    m.columns,
    mirror,
    -- Containment is equality for scalars; a key column whose values are arrays, objects or
    -- composites is compared exactly.
    (SELECT coalesce(string_agg(format(' AND x.row -> %1$L = x.key -> %1$L', a.attname), ''), '')
       FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid LEFT JOIN pg_type b ON b.oid = t.typbasetype
      WHERE a.attrelid = m.relid AND a.attnum > 0 AND NOT a.attisdropped AND a.attname::text = ANY (m.key_columns)
        AND (coalesce(b.typcategory, t.typcategory) = 'A' OR coalesce(b.typtype, t.typtype) = 'c'
             OR coalesce(b.oid, t.oid) IN ('json'::regtype, 'jsonb'::regtype))));

  -- 3. (typing) Every fitting event typed by the mirror, in one pass: `r` is its row as the
  --    mirror stores it (a value of the mirror's row type), `key` the canonical key — the key
  --    columns of the typed row, or of the typed key for a delete — and gf_k1, gf_k2 … those
  --    columns as typed values: the order keys are locked in (sorting jsonb costs a
  --    comparison function call per pair; a bigint key sorts natively). A value a column type
  --    refuses aborts this statement: the lines are then found one by one below (after the
  --    refusals 0011 gives first).
  keyexpr := (SELECT format('jsonb_build_object(%s)', string_agg(format('%L, (CASE WHEN d.op = %L THEN d.r ELSE d.kr END).%I', k, 'upsert', k), ', ' ORDER BY i))
                FROM unnest(m.key_columns) WITH ORDINALITY u(k, i));
  tkeys := (SELECT string_agg(format('(CASE WHEN d.op = %L THEN d.r ELSE d.kr END).%I AS %I', 'upsert', k, 'gf_k' || i), ', ' ORDER BY i)
              FROM unnest(m.key_columns) WITH ORDINALITY u(k, i));
  keyorder := (SELECT string_agg(format('%I', 'gf_k' || i), ', ' ORDER BY i) FROM unnest(m.key_columns) WITH ORDINALITY u(k, i));
  typed := true;
  BEGIN
    EXECUTE format($q$
      CREATE TEMPORARY TABLE gf_ingress_t ON COMMIT DROP AS
      SELECT d.line, d.op, d.revision, d.r, d.msg, CASE WHEN d.msg IS NULL THEN %1$s END AS key, %5$s
        FROM (SELECT c.line, c.op, c.msg,
                     CASE WHEN c.msg IS NULL THEN c.revnum::bigint END AS revision,
                     CASE WHEN c.msg IS NULL AND c.row IS NOT NULL THEN jsonb_populate_record(NULL::%2$s, c.row) END AS r,
                     CASE WHEN c.msg IS NULL AND c.op = 'delete' THEN jsonb_populate_record(NULL::%2$s, c.key) END AS kr
                FROM (SELECT x.line, x.op, x.key, x.row, x.revnum, %3$s AS msg FROM (%4$s OFFSET 0) x OFFSET 0) c
              OFFSET 0) d$q$, keyexpr, mirror, checks, extract, tkeys);
    GET DIAGNOSTICS n = ROW_COUNT;
  EXCEPTION WHEN data_exception THEN
    typed := false;
  END;
  -- One file over the bound is refused before anything else is said about it (the client
  -- refuses such a file before sending it; this pass counted the events).
  IF NOT typed THEN
    SELECT count(*) INTO n FROM ONLY pg_temp.ingress_events e WHERE e.event IS NOT NULL;
  END IF;
  IF n > v_max THEN
    RAISE EXCEPTION '% events in one file, more than GENFILL_MAX_PENDING_EVENTS (%): split the file', n, v_max
      USING ERRCODE = 'GFI01', DETAIL = jsonb_build_array(jsonb_build_object('line', NULL, 'message',
        format('%s events in one file, more than GENFILL_MAX_PENDING_EVENTS (%s): split the file', n, v_max)))::text;
  END IF;
  IF typed THEN
    SELECT jsonb_agg(jsonb_build_object('line', t.line, 'message', t.msg) ORDER BY t.line) FILTER (WHERE t.msg IS NOT NULL),
           count(*) FILTER (WHERE t.op = 'delete')
      INTO problems, ndeletes FROM pg_temp.gf_ingress_t t;
  ELSE
    EXECUTE format($q$
      SELECT jsonb_agg(jsonb_build_object('line', s.line, 'message', s.msg) ORDER BY s.line)
        FROM (SELECT x.line, %1$s AS msg FROM (%2$s) x) s
       WHERE s.msg IS NOT NULL$q$, checks, extract) INTO problems;
  END IF;
  IF problems IS NOT NULL THEN
    RAISE EXCEPTION '% events do not fit %', jsonb_array_length(problems), mirror USING ERRCODE = 'GFI01', DETAIL = problems::text;
  END IF;

  -- 2. The pending bound: busy is an answer to retry, never a drop.
  pending := genfill.ingress_pending(p_dataset, v_max + 1);
  IF pending + n > v_max THEN
    RAISE EXCEPTION 'dataset % has % pending events; % more would pass GENFILL_MAX_PENDING_EVENTS (%): retry once the projector has consumed some',
      p_dataset, pending, n, v_max
      USING ERRCODE = 'GFB01', DETAIL = jsonb_build_object('pending', pending, 'events', n, 'max', v_max)::text;
  END IF;

  -- Ingest and compaction of one mirror exclude each other (compaction takes it exclusively).
  PERFORM genfill.take_lock('ingress', m.source_table, 'shared');

  -- 3. (the values the columns refuse, line by line: only for a file that has some)
  IF NOT typed THEN
    problems := '[]';
    FOR ev IN SELECT e.line, e.event -> 'key' AS key, nullif(e.event -> 'row', 'null') AS row
                FROM ONLY pg_temp.ingress_events e WHERE e.event IS NOT NULL ORDER BY e.line LOOP
      BEGIN
        EXECUTE format('SELECT jsonb_populate_record(NULL::%1$s, $1), jsonb_populate_record(NULL::%1$s, $2)', mirror) USING ev.key, ev.row;
      EXCEPTION WHEN data_exception THEN
        problems := problems || jsonb_build_object('line', ev.line, 'message', SQLERRM);
      END;
    END LOOP;
    RAISE EXCEPTION '% events have values the columns of % refuse', jsonb_array_length(problems), mirror USING ERRCODE = 'GFI01', DETAIL = problems::text;
  END IF;

  -- From here to the conflict handler at the end, one block: a conflict (GFX01) rolls back
  -- everything the block wrote (the new keys' rows among them) and is recorded by the handler.
  BEGIN
  SELECT im.compacted_revision INTO watermark FROM genfill.ingress_mirrors im WHERE im.source_table = m.source_table;
  watermark := coalesce(watermark, 0);

  -- 4. The bulk load: every line a key genfill holds nothing for, above the watermark. Inserting
  --    the keys' rows in key order locks them; a key held already, one a concurrent ingest is
  --    inserting (waited for), or a key on two lines of the file raises unique_violation and
  --    takes the path below instead.
  bulk := false;
  IF watermark = 0 OR NOT EXISTS (SELECT 1 FROM pg_temp.gf_ingress_t t WHERE t.revision <= watermark) THEN
    BEGIN
      EXECUTE format($q$
        INSERT INTO genfill.ingress_keys (source_table, key, revision, deleted)
        SELECT $1, t.key, t.revision, t.op = 'delete' FROM pg_temp.gf_ingress_t t ORDER BY %s$q$, keyorder) USING m.source_table;
      bulk := true;
    EXCEPTION WHEN unique_violation THEN
      bulk := false;
    END;
  END IF;

  IF bulk THEN
    nkeys := n;
    nfresh := n;
    ALTER TABLE pg_temp.gf_ingress_t ADD COLUMN state text NOT NULL DEFAULT 'fresh', ADD COLUMN stored_revision bigint, ADD COLUMN stored_deleted boolean;
    ALTER TABLE pg_temp.gf_ingress_t RENAME TO gf_ingress_d;
  ELSE
    -- One candidate per key: its highest revision, the last line of that.
    EXECUTE format($q$
      CREATE TEMPORARY TABLE gf_ingress_w ON COMMIT DROP AS
      SELECT DISTINCT ON (t.key) t.key, t.revision, t.op, t.r, t.line, %s FROM pg_temp.gf_ingress_t t
       ORDER BY t.key, t.revision DESC, t.line DESC$q$, keyorder);
    GET DIAGNOSTICS nkeys = ROW_COUNT;
    -- Some key is on several lines: one revision of it with two payloads is a conflict.
    IF nkeys < n THEN
      WITH dup AS (SELECT t.key, t.revision FROM pg_temp.gf_ingress_t t GROUP BY t.key, t.revision HAVING count(*) > 1),
           c AS (SELECT t.key, t.revision,
                        jsonb_agg(jsonb_build_object('line', t.line, 'op', t.op, 'row', to_jsonb(t.r)) ORDER BY t.line) AS incoming,
                        count(DISTINCT CASE WHEN t.op = 'delete' THEN 'delete' ELSE to_jsonb(t.r)::text END) AS payloads
                   FROM pg_temp.gf_ingress_t t JOIN dup ON dup.key = t.key AND dup.revision = t.revision
                  GROUP BY t.key, t.revision)
      SELECT jsonb_agg(jsonb_build_object('key', c.key, 'revision', c.revision, 'stored', NULL, 'incoming', c.incoming) ORDER BY c.key)
        INTO conflicts
        FROM (SELECT * FROM c WHERE c.payloads > 1 ORDER BY c.key LIMIT 100) c;
      IF conflicts IS NOT NULL THEN
        RAISE EXCEPTION 'conflict: key % at revision % is sent with two payloads (lines %); the file was refused, nothing applied',
          conflicts->0->'key', conflicts->0->'revision', (SELECT string_agg(i->>'line', ', ') FROM jsonb_array_elements(conflicts->0->'incoming') i)
          USING ERRCODE = 'GFX01', DETAIL = conflicts::text;
      END IF;
    END IF;
    DROP TABLE pg_temp.gf_ingress_t;
    ANALYZE pg_temp.gf_ingress_w;

    -- 4./5. Lock and compare, keys in key order. A key genfill never saw: inserting its row is
    --    its lock, and it wins — unless it is at or below the compaction watermark. When the
    --    file repeated keys and nothing below the watermark, the deduplicated keys may all be
    --    new: one plain INSERT (half the cost of ON CONFLICT) is tried first.
    nfresh := -1;
    IF nkeys < n AND (watermark = 0 OR NOT EXISTS (SELECT 1 FROM pg_temp.gf_ingress_w w WHERE w.revision <= watermark)) THEN
      BEGIN
        EXECUTE format($q$
          INSERT INTO genfill.ingress_keys (source_table, key, revision, deleted)
          SELECT $1, w.key, w.revision, w.op = 'delete' FROM pg_temp.gf_ingress_w w ORDER BY %s$q$, keyorder) USING m.source_table;
        GET DIAGNOSTICS nfresh = ROW_COUNT;
      EXCEPTION WHEN unique_violation THEN
        nfresh := -1;
      END;
    END IF;
    IF nfresh = -1 THEN
      EXECUTE format($q$
        CREATE TEMPORARY TABLE gf_ingress_fresh ON COMMIT DROP AS
        WITH ins AS (
          INSERT INTO genfill.ingress_keys AS k (source_table, key, revision, deleted)
          SELECT $1, w.key, w.revision, w.op = 'delete' FROM pg_temp.gf_ingress_w w
           WHERE w.revision > $2 ORDER BY %s
          ON CONFLICT DO NOTHING
          RETURNING k.key)
        SELECT ins.key FROM ins$q$, keyorder) USING m.source_table, watermark;
      GET DIAGNOSTICS nfresh = ROW_COUNT;
    END IF;
    IF nfresh = nkeys THEN
      -- Every key is new: nothing to compare.
      ALTER TABLE pg_temp.gf_ingress_w ADD COLUMN state text NOT NULL DEFAULT 'fresh', ADD COLUMN stored_revision bigint, ADD COLUMN stored_deleted boolean;
      ALTER TABLE pg_temp.gf_ingress_w RENAME TO gf_ingress_d;
      DROP TABLE IF EXISTS pg_temp.gf_ingress_fresh;
    ELSE
      ANALYZE pg_temp.gf_ingress_fresh;
      EXECUTE format($q$
        CREATE TEMPORARY TABLE gf_ingress_held ON COMMIT DROP AS
        SELECT k.key, k.revision, k.deleted
          FROM genfill.ingress_keys k JOIN pg_temp.gf_ingress_w w ON k.source_table = $1 AND k.key = w.key
         WHERE NOT EXISTS (SELECT 1 FROM pg_temp.gf_ingress_fresh f WHERE f.key = w.key)
         ORDER BY %s FOR UPDATE OF k$q$, keyorder) USING m.source_table;
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
    SELECT count(*) FILTER (WHERE d.op = 'delete' AND d.state IN ('fresh', 'apply')) INTO ndeletes FROM pg_temp.gf_ingress_d d;
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
  IF nfresh < nkeys THEN
    EXECUTE format($q$
      INSERT INTO %1$s AS t (%2$s) OVERRIDING SYSTEM VALUE
      SELECT %3$s FROM pg_temp.gf_ingress_d d WHERE d.state = 'apply' AND d.op = 'upsert'
      ON CONFLICT (%4$s) DO %5$s$q$, mirror, cols, rcols, keycols, setlist);
    GET DIAGNOSTICS nheld = ROW_COUNT;
    v_upserts := v_upserts + nheld;
  END IF;
  INSERT INTO genfill.change_log (source_table, key, op, row, revision)
  SELECT m.source_table, d.key, d.op, to_jsonb(d.r), d.revision FROM pg_temp.gf_ingress_d d
   WHERE d.state IN ('fresh', 'apply') AND d.op = 'upsert';
  -- A delete removes the mirror's row and logs it (the last image), else the row it carried.
  v_deletes := 0;
  IF ndeletes > 0 THEN
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
  END IF;
  v_applied := v_upserts + v_deletes;
  IF nfresh < nkeys THEN
    UPDATE genfill.ingress_keys k SET revision = d.revision, deleted = (d.op = 'delete'), changed_at = now()
      FROM pg_temp.gf_ingress_d d
     WHERE k.source_table = m.source_table AND k.key = d.key AND d.state = 'apply';
    -- Lines superseded by a later revision in the same file are stale too; refused: a key genfill
    -- holds nothing for at or below the watermark (its tombstone may have been compacted).
    SELECT count(*) FILTER (WHERE d.state IN ('stale', 'equal')) + (n - nkeys), count(*) FILTER (WHERE d.state = 'refused'),
           (SELECT jsonb_agg(r.key ORDER BY r.key) FROM (SELECT d2.key FROM pg_temp.gf_ingress_d d2 WHERE d2.state = 'refused' ORDER BY d2.key LIMIT 20) r)
      INTO v_stale, v_refused, v_refused_keys
      FROM pg_temp.gf_ingress_d d;
  ELSE
    v_stale := n - nkeys;
    v_refused := 0;
  END IF;
  DROP TABLE pg_temp.gf_ingress_d;

  INSERT INTO genfill.dataset_log (dataset, action, detail)
  VALUES (p_dataset, 'ingest', jsonb_build_object('events', n, 'applied', v_applied, 'upserts', v_upserts, 'deletes', v_deletes,
                                                  'stale', v_stale, 'refused', v_refused, 'sourceTable', m.source_table));
  RETURN QUERY SELECT n, v_applied, v_upserts, v_deletes, v_stale, v_refused, coalesce(v_refused_keys, '[]'), m.source_table,
                      NULL::jsonb, NULL::bigint[], NULL::text[];
  EXCEPTION WHEN SQLSTATE 'GFX01' THEN
    -- Nothing of the file is applied; the conflicts are the ones found above (the exception's
    -- DETAIL, built from the staged lines and the stored rows), recorded in this transaction.
    GET STACKED DIAGNOSTICS v_detail = PG_EXCEPTION_DETAIL;
    SELECT * INTO v_recorded FROM genfill.ingress_record_conflict(p_dataset, v_detail::jsonb);
    RETURN QUERY SELECT n, 0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint, '[]'::jsonb, m.source_table,
                        v_detail::jsonb, v_recorded.conflict_ids, v_recorded.releases;
  END;
END $$;
ALTER FUNCTION genfill.ingest_apply(text) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.ingest_apply(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.ingest_apply(text) TO genfill_operator, genfill_service, genfill_api;
