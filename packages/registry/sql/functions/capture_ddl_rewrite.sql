-- Rows of a captured table that change without DML (issue 29, finding 2; migration 0030;
-- docs/capture.md "Rewrites"). No row trigger fires for them, so no event reaches the change log
-- and the active generation keeps the transform of the old values. The capture DDL guard
-- (capture_ddl_guard.sql) keeps the triggers in place; these event triggers see the rest:
--
-- - `table_rewrite` (genfill_capture_ddl_rewrite): PostgreSQL rewrites the table for ALTER TABLE
--   or ALTER TYPE. A rewrite that may change values — `ALTER COLUMN … TYPE` with or without
--   USING (reason 4), `ADD COLUMN` with a volatile default or `GENERATED … STORED` (reason 2) —
--   marks the dataset (genfill.mark_source_rewritten). `SET UNLOGGED` (reason 1 on a permanent
--   table) is refused: after a crash PostgreSQL empties an unlogged table, and its rows would
--   leave the source with no logged delete. `SET LOGGED` and `SET ACCESS METHOD` copy the same
--   rows: nothing to do. CLUSTER and VACUUM FULL fire no event trigger at all, and need none:
--   they copy the same row versions.
-- - `ALTER TYPE` (genfill_capture_ddl_type_start / _end): an enum label renamed, or a composite
--   type's attributes changed, changes the value of every row holding it, with no rewrite. The
--   shapes of the types the captured tables use are taken before the statement and compared
--   after it; adding an enum label changes no row and passes.
--
-- All three are SECURITY DEFINER (genfill_owner): they read genfill.captures and write through
-- genfill.mark_source_rewritten, and what happened comes from the event trigger's own state,
-- never from an argument — an event trigger function cannot be called any other way. Each
-- leaves at once while no table is captured, so DDL elsewhere is untouched.

-- The types each captured root uses (directly, or inside an array, a domain, a composite type or
-- a range), as {"<root oid>": {"<type oid>": {"name", "kind", "shape"}}}, for the enums (labels
-- in sort order) and composite types (`name:type` per attribute) among them.
CREATE OR REPLACE FUNCTION genfill.capture_type_shapes() RETURNS jsonb
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  WITH RECURSIVE used (root, typ) AS (
    SELECT c.relid, a.atttypid
      FROM genfill.captures c JOIN pg_attribute a ON a.attrelid = c.relid AND a.attnum > 0 AND NOT a.attisdropped
     WHERE c.mode = 'trigger'
    UNION
    SELECT u.root, x.t
      FROM used u JOIN pg_type ty ON ty.oid = u.typ
     CROSS JOIN LATERAL (
           SELECT ty.typelem WHERE ty.typelem <> 0 AND ty.typsubscript = 'array_subscript_handler'::regproc
           UNION ALL SELECT ty.typbasetype WHERE ty.typtype = 'd'
           UNION ALL SELECT a.atttypid FROM pg_attribute a WHERE ty.typtype = 'c' AND a.attrelid = ty.typrelid AND a.attnum > 0 AND NOT a.attisdropped
           UNION ALL SELECT r.rngsubtype FROM pg_range r WHERE (ty.typtype = 'r' AND r.rngtypid = ty.oid) OR (ty.typtype = 'm' AND r.rngmultitypid = ty.oid)) AS x (t)
  ),
  shapes AS (
    SELECT u.root, u.typ, ty.typtype AS kind, format_type(ty.oid, NULL) AS name,
           CASE ty.typtype
             WHEN 'e' THEN to_jsonb(ARRAY(SELECT e.enumlabel::text FROM pg_enum e WHERE e.enumtypid = ty.oid ORDER BY e.enumsortorder))
             WHEN 'c' THEN to_jsonb(ARRAY(SELECT format('%s:%s', a.attname, format_type(a.atttypid, a.atttypmod)) FROM pg_attribute a
                                           WHERE a.attrelid = ty.typrelid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum)) END AS shape
      FROM used u JOIN pg_type ty ON ty.oid = u.typ
     WHERE ty.typtype IN ('e', 'c')
  )
  SELECT coalesce(jsonb_object_agg(s.root::text, s.types), '{}')
    FROM (SELECT root, jsonb_object_agg(typ::text, jsonb_build_object('name', name, 'kind', kind, 'shape', shape)) AS types
            FROM shapes GROUP BY root) AS s
$$;
ALTER FUNCTION genfill.capture_type_shapes() OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.capture_type_shapes() FROM PUBLIC;

CREATE OR REPLACE FUNCTION genfill.capture_ddl_rewrite() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel oid;
  why integer;
  root oid;
  v_table text;
  reasons text[] := '{}';
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'genfill_capture_insert') THEN
    RETURN;
  END IF;
  rel := pg_event_trigger_table_rewrite_oid();
  why := pg_event_trigger_table_rewrite_reason();
  root := coalesce(pg_partition_root(rel)::oid, rel);
  SELECT c.source_table INTO v_table FROM genfill.captures c WHERE c.relid = root AND c.mode = 'trigger';
  IF NOT FOUND THEN
    RETURN;
  END IF;
  -- Fired before the rewrite: pg_class still holds the persistence the table had.
  IF why & 1 <> 0 AND (SELECT c.relpersistence FROM pg_class c WHERE c.oid = rel) = 'p' THEN
    RAISE EXCEPTION 'refused: % … SET UNLOGGED on %, which is captured (%): after a crash PostgreSQL empties an unlogged table, and its rows would leave the source without a logged delete',
      TG_TAG, rel::regclass, v_table
      USING ERRCODE = 'GFR01', HINT = 'Keep the table logged, or run `genfill capture remove` first (refused while a release on it is open).';
  END IF;
  IF why & 4 <> 0 THEN
    reasons := reasons || 'column-rewrite'::text;
  END IF;
  IF why & 2 <> 0 THEN
    reasons := reasons || 'column-added-with-values'::text;
  END IF;
  IF cardinality(reasons) > 0 THEN
    PERFORM genfill.mark_source_rewritten(root, TG_TAG, reasons, jsonb_build_object('rewritten', rel::regclass::text));
  END IF;
END $$;
ALTER FUNCTION genfill.capture_ddl_rewrite() OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.capture_ddl_rewrite() FROM PUBLIC;

-- Before ALTER TYPE: the shapes, kept for the statement's end in a transaction-local setting.
-- Nothing runs between a statement's start and its end, so nobody can change it in between.
CREATE OR REPLACE FUNCTION genfill.capture_ddl_type_start() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'genfill_capture_insert') THEN
    PERFORM set_config('genfill.capture_type_shapes', '', true);
    RETURN;
  END IF;
  PERFORM set_config('genfill.capture_type_shapes', genfill.capture_type_shapes()::text, true);
END $$;
ALTER FUNCTION genfill.capture_ddl_type_start() OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.capture_ddl_type_start() FROM PUBLIC;

-- After ALTER TYPE: a captured root whose enum lost a label (renamed) or whose composite type's
-- attributes changed has rows whose values changed.
CREATE OR REPLACE FUNCTION genfill.capture_ddl_type_end() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  before_text text := current_setting('genfill.capture_type_shapes', true);
  before jsonb;
  after jsonb;
  r record;
BEGIN
  IF coalesce(before_text, '') = '' THEN
    RETURN;
  END IF;
  before := before_text::jsonb;
  after := genfill.capture_type_shapes();
  FOR r IN SELECT b.key::oid AS root,
                  jsonb_agg(jsonb_build_object('type', t.value->>'name', 'before', t.value->'shape', 'after', after->b.key->t.key->'shape') ORDER BY t.key) AS types
             FROM jsonb_each(before) AS b CROSS JOIN LATERAL jsonb_each(b.value) AS t
            WHERE CASE t.value->>'kind'
                    WHEN 'e' THEN NOT coalesce((after->b.key->t.key->'shape') @> (t.value->'shape'), false)
                    ELSE after->b.key->t.key->'shape' IS DISTINCT FROM t.value->'shape' END
            GROUP BY b.key ORDER BY b.key LOOP
    PERFORM genfill.mark_source_rewritten(r.root, TG_TAG, ARRAY['type-changed'], jsonb_build_object('types', r.types));
  END LOOP;
  PERFORM set_config('genfill.capture_type_shapes', '', true);
END $$;
ALTER FUNCTION genfill.capture_ddl_type_end() OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.capture_ddl_type_end() FROM PUBLIC;

-- Dropped and created again on every migrate (an event trigger has no CREATE OR REPLACE);
-- ENABLE ALWAYS, as the guard's: a session_replication_role = replica session is seen too.
DROP EVENT TRIGGER IF EXISTS genfill_capture_ddl_rewrite;
DROP EVENT TRIGGER IF EXISTS genfill_capture_ddl_type_start;
DROP EVENT TRIGGER IF EXISTS genfill_capture_ddl_type_end;
CREATE EVENT TRIGGER genfill_capture_ddl_rewrite ON table_rewrite EXECUTE FUNCTION genfill.capture_ddl_rewrite();
CREATE EVENT TRIGGER genfill_capture_ddl_type_start ON ddl_command_start WHEN TAG IN ('ALTER TYPE') EXECUTE FUNCTION genfill.capture_ddl_type_start();
CREATE EVENT TRIGGER genfill_capture_ddl_type_end ON ddl_command_end WHEN TAG IN ('ALTER TYPE') EXECUTE FUNCTION genfill.capture_ddl_type_end();
ALTER EVENT TRIGGER genfill_capture_ddl_rewrite ENABLE ALWAYS;
ALTER EVENT TRIGGER genfill_capture_ddl_type_start ENABLE ALWAYS;
ALTER EVENT TRIGGER genfill_capture_ddl_type_end ENABLE ALWAYS;
