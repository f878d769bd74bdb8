-- The capture DDL guard (SPEC "Capture rules", invariant 5; docs/capture.md): three event
-- triggers, run as the DDL's user, keep a captured table captured. They refuse what would let
-- a write go unlogged, put the capture triggers on new partitions, and move open releases to
-- RECONCILIATION_REQUIRED when a column changes (through the SECURITY DEFINER
-- genfill.capture_ddl_check). Only a superuser may create an event trigger, so `genfill
-- migrate` runs as one.

-- The DDL guard, run as the DDL's user. It must never break DDL elsewhere: it leaves at once
-- when nothing is captured, and reads only catalogs until it knows a captured table is
-- concerned. A captured table's root R is recognised by genfill.capture_<R>_insert.
CREATE OR REPLACE FUNCTION genfill.capture_ddl_end() RETURNS event_trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  ns oid;
  cmd record;
  rel oid;
  root oid;
  roots oid[] := '{}';
  all_roots oid[];
  only_triggers boolean := true;
  check_all boolean := false;
  m record;
  rec record;
  want oid;
  want_type integer;
  nonempty boolean;
  checker oid;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'genfill_capture_insert') THEN
    RETURN;
  END IF;
  ns := (SELECT oid FROM pg_namespace WHERE nspname = 'genfill');
  all_roots := ARRAY(SELECT tr.tgrelid FROM pg_trigger tr JOIN pg_proc p ON p.oid = tr.tgfoid
                      WHERE tr.tgname = 'genfill_capture_insert' AND p.pronamespace = ns AND p.proname = format('capture_%s_insert', tr.tgrelid));

  FOR cmd IN SELECT * FROM pg_event_trigger_ddl_commands() LOOP
    IF cmd.command_tag <> 'CREATE TRIGGER' THEN
      only_triggers := false;
    END IF;
    IF cmd.command_tag = 'REVOKE' THEN
      -- GRANT/REVOKE name no object here. Only REVOKE can hurt: the triggers read the table
      -- as genfill_owner, so losing that would fail every write.
      FOR rec IN SELECT r::regclass AS rel, c.relnamespace FROM unnest(all_roots) AS r JOIN pg_class c ON c.oid = r LOOP
        IF NOT has_table_privilege('genfill_owner', rec.rel, 'SELECT') OR NOT has_schema_privilege('genfill_owner', rec.relnamespace, 'USAGE') THEN
          RAISE EXCEPTION 'refused: REVOKE would stop genfill_owner reading %, which is captured: its capture triggers read it on every write, which would then fail', rec.rel
            USING ERRCODE = 'GFR01', HINT = 'Keep SELECT on the table and USAGE on its schema for genfill_owner, or run `genfill capture remove` first.';
        END IF;
      END LOOP;
      CONTINUE;
    ELSIF cmd.command_tag IN ('CREATE SUBSCRIPTION', 'ALTER SUBSCRIPTION') THEN
      check_all := true;
      CONTINUE;
    END IF;
    rel := NULL;
    IF cmd.classid = 'pg_class'::regclass THEN
      SELECT CASE WHEN c.relkind IN ('i', 'I') THEN (SELECT i.indrelid FROM pg_index i WHERE i.indexrelid = c.oid) ELSE c.oid END
        INTO rel FROM pg_class c WHERE c.oid = cmd.objid;
    ELSIF cmd.classid = 'pg_trigger'::regclass THEN
      SELECT tr.tgrelid INTO rel FROM pg_trigger tr WHERE tr.oid = cmd.objid;
    ELSIF cmd.classid = 'pg_constraint'::regclass THEN
      SELECT x.conrelid INTO rel FROM pg_constraint x WHERE x.oid = cmd.objid;
    ELSIF cmd.classid = 'pg_namespace'::regclass THEN
      roots := roots || ARRAY(SELECT r FROM unnest(all_roots) AS r JOIN pg_class c ON c.oid = r WHERE c.relnamespace = cmd.objid);
      CONTINUE;
    END IF;
    CONTINUE WHEN rel IS NULL OR rel = 0;
    root := coalesce(pg_partition_root(rel)::oid, rel);
    IF EXISTS (SELECT 1 FROM pg_proc p WHERE p.pronamespace = ns AND p.proname = format('capture_%s_insert', root)) THEN
      roots := roots || root;
    END IF;
  END LOOP;
  IF check_all THEN
    roots := roots || all_roots;
  END IF;
  roots := ARRAY(SELECT DISTINCT r FROM unnest(roots) AS r);
  IF cardinality(roots) = 0 THEN
    RETURN;
  END IF;

  IF only_triggers THEN
    -- genfill's own installs create the four triggers one by one, then enable them in one
    -- ALTER TABLE: check only that a trigger with a capture name is genfill's, and that a
    -- CREATE OR REPLACE did not turn one of a working set back to origin-only.
    FOR rec IN SELECT tr.tgname::text AS tgname, tr.tgrelid, tr.tgfoid, tr.tgtype, tr.tgenabled,
                    coalesce(pg_partition_root(tr.tgrelid)::oid, tr.tgrelid) AS root
               FROM pg_event_trigger_ddl_commands() c JOIN pg_trigger tr ON tr.oid = c.objid
              WHERE c.classid = 'pg_trigger'::regclass AND tr.tgname LIKE 'genfill\_capture\_%' LOOP
      CONTINUE WHEN NOT (rec.root = ANY (roots));
      want := (SELECT p.oid FROM pg_proc p WHERE p.pronamespace = ns AND p.proname = CASE rec.tgname
                 WHEN 'genfill_capture_truncate' THEN 'capture_refuse_truncate' ELSE format('capture_%s_%s', rec.root, substr(rec.tgname, 17)) END);
      want_type := CASE rec.tgname WHEN 'genfill_capture_insert' THEN 4 WHEN 'genfill_capture_update' THEN 16
                                 WHEN 'genfill_capture_delete' THEN 8 WHEN 'genfill_capture_truncate' THEN 34 END;
      IF want IS NULL OR rec.tgfoid <> want OR rec.tgtype IS DISTINCT FROM want_type THEN
        RAISE EXCEPTION 'refused: trigger % on % is named as genfill''s capture trigger but is not it; % is captured', rec.tgname, rec.tgrelid::regclass, rec.root::regclass
          USING ERRCODE = 'GFR01', HINT = 'Give your trigger another name.';
      END IF;
      IF rec.tgenabled <> 'A' AND EXISTS (SELECT 1 FROM pg_trigger o WHERE o.tgrelid = rec.tgrelid AND o.tgname LIKE 'genfill\_capture\_%' AND o.tgenabled = 'A') THEN
        RAISE EXCEPTION 'refused: CREATE OR REPLACE TRIGGER % on % would leave it enabled for origin sessions only; % is captured', rec.tgname, rec.tgrelid::regclass, rec.root::regclass
          USING ERRCODE = 'GFR01', HINT = 'Leave genfill''s capture triggers alone; `genfill capture install` repairs them.';
      END IF;
    END LOOP;
    RETURN;
  END IF;

  -- A new partition (CREATE TABLE … PARTITION OF, ATTACH PARTITION) gets the triggers, made
  -- by the DDL's user, who owns it. One with rows is refused: they never reached the log.
  FOREACH root IN ARRAY roots LOOP
    FOR m IN SELECT c.oid::regclass AS rel, c.relkind FROM pg_class c
              WHERE c.oid IN (SELECT pt.relid FROM pg_partition_tree(root::regclass) pt WHERE pt.level > 0)
                AND NOT EXISTS (SELECT 1 FROM pg_trigger tr WHERE tr.tgrelid = c.oid AND tr.tgname LIKE 'genfill\_capture\_%')
              ORDER BY c.oid LOOP
      IF m.relkind = 'r' THEN
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM ONLY %s)', m.rel) INTO nonempty;
        IF nonempty THEN
          RAISE EXCEPTION 'refused: % joins the partition tree of %, which is captured, with rows that never reached the change log', m.rel, root::regclass
            USING ERRCODE = 'GFR01', HINT = format('Attach an empty table, then INSERT the rows through %s (captured).', root::regclass);
        END IF;
      END IF;
      EXECUTE format('CREATE TRIGGER genfill_capture_insert AFTER INSERT ON %s REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION genfill.%I()',
                     m.rel, format('capture_%s_insert', root));
      EXECUTE format('CREATE TRIGGER genfill_capture_update AFTER UPDATE ON %s REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION genfill.%I()',
                     m.rel, format('capture_%s_update', root));
      EXECUTE format('CREATE TRIGGER genfill_capture_delete AFTER DELETE ON %s REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION genfill.%I()',
                     m.rel, format('capture_%s_delete', root));
      EXECUTE format('CREATE TRIGGER genfill_capture_truncate BEFORE TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION genfill.capture_refuse_truncate()', m.rel);
      EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER genfill_capture_insert, ENABLE ALWAYS TRIGGER genfill_capture_update, '
                     'ENABLE ALWAYS TRIGGER genfill_capture_delete, ENABLE ALWAYS TRIGGER genfill_capture_truncate', m.rel);
    END LOOP;
  END LOOP;

  checker := (SELECT p.oid FROM pg_proc p WHERE p.pronamespace = ns AND p.proname = 'capture_ddl_check');
  IF NOT has_schema_privilege(ns, 'USAGE') OR NOT has_function_privilege(checker, 'EXECUTE') THEN
    RAISE EXCEPTION 'refused: % is captured by genfill, and % on it runs genfill''s check, which % may not run',
      (SELECT string_agg(r::regclass::text, ', ') FROM unnest(roots) AS r), TG_TAG, current_user
      USING ERRCODE = 'GFR01',
            HINT = format('Run it as the table''s owner, or GRANT USAGE ON SCHEMA genfill TO %I; GRANT EXECUTE ON FUNCTION genfill.capture_ddl_check(oid[], text[], text) TO %I', current_user, current_user);
  END IF;
  PERFORM genfill.capture_ddl_check(roots, NULL, TG_TAG);
END $$;
ALTER FUNCTION genfill.capture_ddl_end() OWNER TO genfill_owner;

-- DROP TRIGGER and DROP TABLE (of the table or a partition) show up only here.
CREATE OR REPLACE FUNCTION genfill.capture_ddl_drop() RETURNS event_trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  dropped text[];
  checker oid;
BEGIN
  dropped := ARRAY(SELECT DISTINCT format('%I.%I', d.address_names[1], d.address_names[2]) FROM pg_event_trigger_dropped_objects() d
                    WHERE d.object_type = 'trigger' AND d.address_names[3] LIKE 'genfill\_capture\_%');
  IF cardinality(dropped) = 0 THEN
    RETURN;
  END IF;
  checker := (SELECT p.oid FROM pg_proc p WHERE p.pronamespace = 'genfill'::regnamespace AND p.proname = 'capture_ddl_check');
  IF NOT has_schema_privilege('genfill'::regnamespace, 'USAGE') OR NOT has_function_privilege(checker, 'EXECUTE') THEN
    RAISE EXCEPTION 'refused: % drops genfill''s capture triggers on %, which % may not check', TG_TAG, array_to_string(dropped, ', '), current_user
      USING ERRCODE = 'GFR01', HINT = 'Run `genfill capture remove <table>` to stop capturing a table.';
  END IF;
  PERFORM genfill.capture_ddl_check(NULL, dropped, TG_TAG);
END $$;
ALTER FUNCTION genfill.capture_ddl_drop() OWNER TO genfill_owner;

-- DETACH PARTITION … CONCURRENTLY commits its first transaction (the partition leaves every
-- later snapshot of the table) before ddl_command_end can refuse anything: it is refused up
-- front, from the statement's text (the command runs alone, outside a transaction block).
-- Not search_path-pinned: the table name resolves as the DDL's session reads it; every call
-- is schema-qualified instead.
CREATE OR REPLACE FUNCTION genfill.capture_ddl_start() RETURNS event_trigger
LANGUAGE plpgsql AS $$
DECLARE
  m text[];
  rel oid;
  root oid;
BEGIN
  IF TG_TAG <> 'ALTER TABLE' OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger WHERE tgname = 'genfill_capture_insert') THEN
    RETURN;
  END IF;
  m := pg_catalog.regexp_match(pg_catalog.current_query(),
         '^\s*alter\s+table\s+(?:if\s+exists\s+)?(?:only\s+)?((?:"(?:[^"]|"")+"|[^\s."]+)(?:\s*\.\s*(?:"(?:[^"]|"")+"|[^\s."]+))?)\s+detach\s+partition\s.*\mconcurrently\M', 'i');
  IF m IS NULL THEN
    RETURN;
  END IF;
  rel := pg_catalog.to_regclass(pg_catalog.regexp_replace(m[1], '\s*\.\s*', '.'));
  IF rel IS NULL THEN
    RETURN;
  END IF;
  root := coalesce(pg_catalog.pg_partition_root(rel)::oid, rel);
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'genfill'::pg_catalog.regnamespace
                AND p.proname = pg_catalog.format('capture_%s_insert', root)) THEN
    RAISE EXCEPTION 'refused: DETACH PARTITION … CONCURRENTLY on %, which is captured: its first transaction commits before genfill can check it, and the partition''s rows would leave the source without a logged delete',
      (SELECT pg_catalog.format('%I.%I', n.nspname, c.relname) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = root)
      USING ERRCODE = 'GFR01', HINT = 'Run `genfill capture remove` first (refused while a release on the table is open).';
  END IF;
END $$;
ALTER FUNCTION genfill.capture_ddl_start() OWNER TO genfill_owner;

-- Dropped and created again on every migrate (an event trigger has no CREATE OR REPLACE). A
-- session_replication_role = replica session's DDL is guarded too: ENABLE ALWAYS.
DROP EVENT TRIGGER IF EXISTS genfill_capture_ddl_start;
DROP EVENT TRIGGER IF EXISTS genfill_capture_ddl_end;
DROP EVENT TRIGGER IF EXISTS genfill_capture_ddl_drop;
CREATE EVENT TRIGGER genfill_capture_ddl_start ON ddl_command_start WHEN TAG IN ('ALTER TABLE') EXECUTE FUNCTION genfill.capture_ddl_start();
CREATE EVENT TRIGGER genfill_capture_ddl_end ON ddl_command_end EXECUTE FUNCTION genfill.capture_ddl_end();
CREATE EVENT TRIGGER genfill_capture_ddl_drop ON sql_drop EXECUTE FUNCTION genfill.capture_ddl_drop();
ALTER EVENT TRIGGER genfill_capture_ddl_start ENABLE ALWAYS;
ALTER EVENT TRIGGER genfill_capture_ddl_end ENABLE ALWAYS;
ALTER EVENT TRIGGER genfill_capture_ddl_drop ENABLE ALWAYS;
