-- 0010_capture: statement-level capture triggers and the DDL guard around them (SPEC
-- "Capture rules", invariant 5; docs/capture.md). Add-only: never edit this file once landed.
--
-- Who does what:
--   * `genfill capture install` runs as the table's owner (ENABLE ALWAYS TRIGGER needs
--     ownership) who is a member of genfill_service. It calls capture_prepare, which makes
--     three trigger functions for that table in schema genfill (owned by genfill_owner,
--     SECURITY DEFINER: writers need no privilege on the log), then creates the triggers
--     itself and records the table in genfill.captures.
--   * The trigger functions run as genfill_owner with pinned settings, so a row image never
--     depends on the writer's session; they read the captured table (the delete check), so
--     genfill_owner needs SELECT on it.
--   * Three event triggers (created here: only a superuser may) run as the DDL's user and keep
--     a captured table captured: they refuse what would let a write go unlogged, put the
--     triggers on new partitions, and move open releases to RECONCILIATION_REQUIRED when a
--     column changes (through the SECURITY DEFINER capture_ddl_check).

-- ---------------------------------------------------------------------------------------
-- TRUNCATE fires no row event and has no transition table: a captured table refuses it.
CREATE FUNCTION genfill.capture_refuse_truncate() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RAISE EXCEPTION 'refused: TRUNCATE of %.% is not captured by genfill (no event would reach the change log)', TG_TABLE_SCHEMA, TG_TABLE_NAME
    USING ERRCODE = 'GFR01',
          HINT = 'DELETE the rows instead (captured), or run `genfill capture remove` first (refused while a release on the table is open)';
END $$;

-- The PRIMARY KEY and UNIQUE constraints of a table, primary key first.
CREATE FUNCTION genfill.capture_keys(p_rel regclass)
RETURNS TABLE (constraint_name text, kind text, columns text[], is_deferrable boolean, nullable text[])
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT c.conname::text,
         CASE c.contype WHEN 'p' THEN 'PRIMARY KEY' ELSE 'UNIQUE' END,
         ARRAY(SELECT a.attname::text FROM unnest(c.conkey) WITH ORDINALITY AS k(attnum, i)
                 JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum ORDER BY k.i),
         c.condeferrable,
         ARRAY(SELECT a.attname::text FROM unnest(c.conkey) WITH ORDINALITY AS k(attnum, i)
                 JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
                WHERE NOT a.attnotnull ORDER BY k.i)
    FROM pg_constraint c
   WHERE c.conrelid = p_rel AND c.contype IN ('p', 'u')
   ORDER BY c.contype = 'p' DESC, c.conname
$$;

-- NULL when `p_key` is exactly the columns of a NOT DEFERRABLE primary key or unique
-- constraint on NOT NULL columns; otherwise why not. The row lock on the key is what orders
-- two writers of one key, so their event ids follow commit order (SPEC invariant 5): a
-- deferred uniqueness check lets both insert and inverts it.
CREATE FUNCTION genfill.capture_key_problem(p_rel regclass, p_key text[]) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  k record;
  why text;
BEGIN
  FOR k IN SELECT * FROM genfill.capture_keys(p_rel) c
            WHERE ARRAY(SELECT x FROM unnest(c.columns) AS x ORDER BY x) = ARRAY(SELECT x FROM unnest(p_key) AS x ORDER BY x)
            ORDER BY c.is_deferrable, cardinality(c.nullable) LOOP
    IF NOT k.is_deferrable AND cardinality(k.nullable) = 0 THEN
      RETURN NULL;
    END IF;
    why := coalesce(why, CASE
      WHEN k.is_deferrable THEN format('the key constraint %I on (%s) is DEFERRABLE: a deferred uniqueness check lets two transactions write one key and inverts its order in the log',
                                       k.constraint_name, array_to_string(k.columns, ', '))
      ELSE format('the key constraint %I allows NULL in %s: a key must be NOT NULL', k.constraint_name, array_to_string(k.nullable, ', ')) END);
  END LOOP;
  RETURN coalesce(why, format('no PRIMARY KEY or UNIQUE constraint on exactly (%s)', array_to_string(p_key, ', ')));
END $$;

-- The columns as `attnum:name:type`: a dropped and re-added column, a rename and a type
-- change all change it.
CREATE FUNCTION genfill.capture_columns(p_rel regclass) RETURNS text[]
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
RETURN ARRAY(SELECT format('%s:%s:%s', a.attnum, a.attname, format_type(a.atttypid, a.atttypmod))
               FROM pg_attribute a WHERE a.attrelid = p_rel AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum);

-- What would let a write to the captured table `p_relid` go unlogged, from the catalogs alone
-- (`genfill capture status` shows it; the DDL guard refuses any statement that leaves one).
CREATE FUNCTION genfill.capture_problems(p_relid oid, p_source text, p_key text[]) RETURNS text[]
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  problems text[] := '{}';
  problem text;
  fns oid[];
  t record;
BEGIN
  SELECT c.oid, c.relkind, c.relrowsecurity, c.relnamespace, n.nspname, format('%I.%I', n.nspname, c.relname) AS name
    INTO rel FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = p_relid;
  IF NOT FOUND THEN
    RETURN ARRAY[format('%s was dropped', p_source)];
  END IF;
  IF rel.name <> p_source THEN
    problems := problems || format('%s was renamed to %s (its events, datasets and releases name it %s)', p_source, rel.name, p_source);
  END IF;
  problem := genfill.capture_key_problem(p_relid::regclass, p_key);
  IF problem IS NOT NULL THEN
    problems := problems || format('%s: %s', p_source, problem);
  END IF;
  IF rel.relrowsecurity THEN
    problems := problems || format('%s has row-level security enabled: the capture''s delete check reads it as genfill_owner and must see every row', p_source);
  END IF;
  IF NOT has_schema_privilege('genfill_owner', rel.relnamespace, 'USAGE') OR NOT has_table_privilege('genfill_owner', p_relid, 'SELECT') THEN
    problems := problems || format('genfill_owner may not read %s, which its capture triggers do on every write: GRANT USAGE ON SCHEMA %I TO genfill_owner; GRANT SELECT ON %s TO genfill_owner',
                                   p_source, rel.nspname, rel.name);
  END IF;
  IF rel.relkind = 'r' AND EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhparent = p_relid) THEN
    problems := problems || format('%s has inheritance children: a write naming a child fires only the child''s triggers', p_source);
  END IF;
  FOR t IN SELECT i.inhparent::regclass::text AS parent FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
            WHERE i.inhrelid = p_relid AND NOT c.relispartition LOOP
    problems := problems || format('%s inherits from %s: a write naming %s fires only its triggers', p_source, t.parent, t.parent);
  END LOOP;

  fns := ARRAY(SELECT p.oid FROM pg_proc p WHERE p.pronamespace = 'genfill'::regnamespace
                  AND p.proname IN (format('capture_%s_insert', p_relid), format('capture_%s_update', p_relid), format('capture_%s_delete', p_relid)));
  FOR t IN
    WITH members AS (SELECT p_relid AS m UNION SELECT pt.relid::oid FROM pg_partition_tree(p_relid::regclass) pt),
         spec (ev, want_type, want_fn, new_table, old_table) AS (
           VALUES ('insert', 4, format('capture_%s_insert', p_relid), 'new_rows', NULL),
                  ('update', 16, format('capture_%s_update', p_relid), 'new_rows', 'old_rows'),
                  ('delete', 8, format('capture_%s_delete', p_relid), NULL, 'old_rows'),
                  ('truncate', 34, 'capture_refuse_truncate', NULL, NULL))
    SELECT m.m::regclass::text AS member, s.ev, s.want_type, tr.tgtype, tr.tgenabled, tr.tgnewtable::text AS new_table, tr.tgoldtable::text AS old_table,
           s.new_table AS want_new, s.old_table AS want_old,
           (SELECT p.oid FROM pg_proc p WHERE p.pronamespace = 'genfill'::regnamespace AND p.proname = s.want_fn) AS want_fn,
           tr.tgfoid, tr.oid IS NOT NULL AS present
      FROM members m CROSS JOIN spec s
      LEFT JOIN pg_trigger tr ON tr.tgrelid = m.m AND tr.tgname = 'genfill_capture_' || s.ev
     ORDER BY m.m, s.ev
  LOOP
    IF NOT t.present THEN
      problems := problems || format('trigger genfill_capture_%s is missing on %s', t.ev, t.member);
    ELSIF t.tgfoid IS DISTINCT FROM t.want_fn OR t.tgtype <> t.want_type
          OR t.new_table IS DISTINCT FROM t.want_new OR t.old_table IS DISTINCT FROM t.want_old THEN
      problems := problems || format('trigger genfill_capture_%s on %s is not genfill''s capture trigger', t.ev, t.member);
    ELSIF t.tgenabled <> 'A' THEN
      problems := problems || format('trigger genfill_capture_%s on %s is %s, not ENABLE ALWAYS', t.ev, t.member,
                                     CASE t.tgenabled WHEN 'D' THEN 'disabled' WHEN 'O' THEN 'enabled for origin sessions only' WHEN 'R' THEN 'enabled for replica sessions only' END);
    END IF;
  END LOOP;
  FOR t IN SELECT DISTINCT sr.srrelid::regclass::text AS member
             FROM pg_subscription_rel sr
            WHERE sr.srrelid IN (SELECT p_relid UNION SELECT pt.relid::oid FROM pg_partition_tree(p_relid::regclass) pt) LOOP
    problems := problems || format('%s is fed by logical replication (pg_subscription_rel): the apply worker fires no statement triggers', t.member);
  END LOOP;
  FOR t IN SELECT DISTINCT tr.tgrelid::regclass::text AS member FROM pg_trigger tr
            WHERE tr.tgfoid = ANY (fns)
              AND tr.tgrelid NOT IN (SELECT p_relid UNION SELECT pt.relid::oid FROM pg_partition_tree(p_relid::regclass) pt) LOOP
    problems := problems || format('%s left the partition tree of %s (DETACH PARTITION): its rows would leave the source without a logged delete', t.member, p_source);
  END LOOP;
  RETURN problems;
END $$;

-- ---------------------------------------------------------------------------------------
-- Grants the owner of a captured table what DDL on it needs: the guard runs as the DDL's
-- user, calls capture_ddl_check and creates the triggers on a new partition.
CREATE FUNCTION genfill.capture_grant_owner(p_relid oid) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  owner_role name := (SELECT pg_get_userbyid(c.relowner) FROM pg_class c WHERE c.oid = p_relid);
  f oid;
BEGIN
  IF owner_role IS NULL THEN RETURN; END IF;
  IF NOT has_schema_privilege(owner_role, 'genfill'::regnamespace, 'USAGE') THEN
    EXECUTE format('GRANT USAGE ON SCHEMA genfill TO %I', owner_role);
  END IF;
  FOR f IN SELECT p.oid FROM pg_proc p WHERE p.pronamespace = 'genfill'::regnamespace
              AND p.proname IN (format('capture_%s_insert', p_relid), format('capture_%s_update', p_relid), format('capture_%s_delete', p_relid),
                                'capture_ddl_check') LOOP
    IF NOT has_function_privilege(owner_role, f, 'EXECUTE') THEN
      EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f::regprocedure, owner_role);
    END IF;
  END LOOP;
END $$;

-- Makes (or leaves, when unchanged) the three trigger functions of a captured table and
-- returns how many it (re)made:
-- genfill.capture_<oid>_insert | _update | _delete. Generated per table so every statement is
-- static SQL with the key columns spelled out. Per statement:
--   insert: upsert every NEW row;
--   delete: log a delete for an OLD key only if the key is absent from the table when the
--           trigger runs (a CTE that deletes key 1 and re-inserts it can fire the INSERT's
--           trigger first: unguarded, the log said upsert(1), delete(1) while the table held 1);
--   update: deletes as above for the OLD keys (a key update vacates the old key), then
--           upsert every NEW row.
-- Hash and merge joins are off inside them: plpgsql keeps a plan for the session, made for
-- the transition table's size at the first call; a nested loop probing the key index is
-- right for one row and for a million.
CREATE FUNCTION genfill.capture_prepare(p_root regclass, p_key text[]) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  problem text;
  guard text;
  log_insert text := 'INSERT INTO genfill.change_log (event_id, source_table, key, op, row, revision)';
  key_n text;
  key_o text;
  key_match text;
  upserts text;
  deletes text;
  bodies text[];
  events text[] := ARRAY['insert', 'update', 'delete'];
  i integer;
  fname text;
  existing text;
  made integer := 0;
BEGIN
  SELECT c.oid, c.relkind, c.relispartition, format('%I.%I', n.nspname, c.relname) AS name
    INTO rel FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = p_root;
  IF NOT FOUND OR rel.relkind NOT IN ('r', 'p') OR rel.relispartition THEN
    RAISE EXCEPTION 'capture_prepare: % is not a table at the root of its partition tree', p_root USING ERRCODE = 'GFR01';
  END IF;
  problem := genfill.capture_key_problem(p_root, p_key);
  IF problem IS NOT NULL THEN
    RAISE EXCEPTION 'capture of %: %', rel.name, problem USING ERRCODE = 'GFR01';
  END IF;
  IF NOT has_table_privilege(p_root, 'SELECT') THEN
    RAISE EXCEPTION 'capture of %: genfill_owner may not read it, and its capture triggers must (the delete check): GRANT SELECT ON % TO genfill_owner', rel.name, rel.name
      USING ERRCODE = 'GFR01';
  END IF;

  key_n := (SELECT string_agg(format('%L, n.%I', k, k), ', ' ORDER BY pos) FROM unnest(p_key) WITH ORDINALITY AS u(k, pos));
  key_o := (SELECT string_agg(format('%L, o.%I', k, k), ', ' ORDER BY pos) FROM unnest(p_key) WITH ORDINALITY AS u(k, pos));
  key_match := (SELECT string_agg(format('t.%I = o.%I', k, k), ' AND ' ORDER BY pos) FROM unnest(p_key) WITH ORDINALITY AS u(k, pos));
  -- Names enter the body only quoted (%I, %L): the body runs as genfill_owner.
  guard := format($g$
  -- genfill capture v1 (relid %1$s)
  IF TG_RELID <> %1$s::oid AND pg_partition_root(TG_RELID) IS DISTINCT FROM %1$s::oid::regclass THEN
    RAISE EXCEPTION 'genfill capture of %%: %% is not in its partition tree', %2$L, TG_RELID::regclass USING ERRCODE = 'GFR01';
  END IF;$g$, rel.oid, rel.name);
  -- nextval in the subquery's target list runs once per row that passed its WHERE.
  upserts := format($u$
  %s
  SELECT e.id, %L, e.key, 'upsert', e.img, e.id
    FROM (SELECT nextval('genfill.change_log_event_seq'::regclass) AS id, jsonb_build_object(%s) AS key, to_jsonb(n) AS img
            FROM new_rows n) AS e;$u$, log_insert, rel.name, key_n);
  deletes := format($d$
  %s
  SELECT e.id, %L, e.key, 'delete', e.img, e.id
    FROM (SELECT nextval('genfill.change_log_event_seq'::regclass) AS id, jsonb_build_object(%s) AS key, to_jsonb(o) AS img
            FROM old_rows o
           WHERE NOT EXISTS (SELECT 1 FROM %s t WHERE %s)) AS e;$d$, log_insert, rel.name, key_o, rel.name, key_match);
  bodies := ARRAY[
    format(E'BEGIN%s%s\n  RETURN NULL;\nEND', guard, upserts),
    format(E'BEGIN%s%s%s\n  RETURN NULL;\nEND', guard, deletes, upserts),
    format(E'BEGIN%s%s\n  RETURN NULL;\nEND', guard, deletes)];

  FOR i IN 1 .. 3 LOOP
    fname := format('capture_%s_%s', rel.oid, events[i]);
    SELECT p.prosrc INTO existing FROM pg_proc p WHERE p.pronamespace = 'genfill'::regnamespace AND p.proname = fname;
    IF existing IS DISTINCT FROM bodies[i] THEN
      EXECUTE format($f$CREATE OR REPLACE FUNCTION genfill.%I() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp
        SET extra_float_digits = 1 SET "DateStyle" = 'ISO, MDY' SET "IntervalStyle" = 'postgres' SET "TimeZone" = 'UTC'
        SET lc_monetary = 'C' SET bytea_output = 'hex'
        SET enable_hashjoin = off SET enable_mergejoin = off
        AS %L$f$, fname, bodies[i]);
      EXECUTE format('REVOKE ALL ON FUNCTION genfill.%I() FROM PUBLIC', fname);
      EXECUTE format('GRANT EXECUTE ON FUNCTION genfill.%I() TO genfill_service', fname);
      made := made + 1;
    END IF;
  END LOOP;
  PERFORM genfill.capture_grant_owner(rel.oid);
  RETURN made;
END $$;

-- After `genfill capture remove` dropped the triggers and the captures row.
CREATE FUNCTION genfill.capture_drop_functions(p_relid oid) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  f regprocedure;
  n integer := 0;
BEGIN
  IF EXISTS (SELECT 1 FROM genfill.captures c WHERE c.relid = p_relid) THEN
    RAISE EXCEPTION 'capture_drop_functions: % is still captured', p_relid::regclass USING ERRCODE = 'GFR01';
  END IF;
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p WHERE p.pronamespace = 'genfill'::regnamespace
              AND p.proname IN (format('capture_%s_insert', p_relid), format('capture_%s_update', p_relid), format('capture_%s_delete', p_relid)) LOOP
    IF EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgfoid = f) THEN
      RAISE EXCEPTION 'capture_drop_functions: % still fires %: drop the triggers first', f,
        (SELECT string_agg(format('%s on %s', t.tgname, t.tgrelid::regclass), ', ') FROM pg_trigger t WHERE t.tgfoid = f) USING ERRCODE = 'GFR01';
    END IF;
    EXECUTE format('DROP FUNCTION %s', f);
    n := n + 1;
  END LOOP;
  RETURN n;
END $$;

-- ---------------------------------------------------------------------------------------
-- The DDL guard's privileged half. `p_roots`: captured tables a statement touched;
-- `p_dropped`: tables whose capture triggers a DROP removed (the table itself may be gone).
-- Refuses (raises) when a captured table is left with any capture_problems; otherwise, when
-- its columns changed, moves every open release whose source it is to
-- RECONCILIATION_REQUIRED (logged as 'source-changed') and stores the new column list.
CREATE FUNCTION genfill.capture_ddl_check(p_roots oid[], p_dropped text[], p_command text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  roots oid[] := coalesce(p_roots, '{}');
  refusals text[] := '{}';
  names text[] := '{}';
  d text;
  reloid oid;
  cap record;
  p text[];
  cols text[];
  r record;
BEGIN
  FOREACH d IN ARRAY coalesce(p_dropped, '{}') LOOP
    SELECT c.relid INTO reloid FROM genfill.captures c WHERE c.source_table = d AND c.mode = 'trigger';
    IF FOUND THEN
      roots := roots || reloid;
      CONTINUE;
    END IF;
    reloid := to_regclass(d);
    IF reloid IS NULL THEN
      -- Capture triggers exist only on captured tables and their partitions (remove drops
      -- them before anything else): a dropped table that carried them was a partition.
      refusals := refusals || format('%s, a partition of a captured table, was dropped: its rows would leave the source without a logged delete', d);
      names := names || d;
    ELSE
      roots := roots || coalesce(pg_partition_root(reloid)::oid, reloid);
    END IF;
  END LOOP;

  FOR cap IN SELECT c.* FROM genfill.captures c WHERE c.mode = 'trigger' AND c.relid = ANY (roots) ORDER BY c.source_table LOOP
    p := genfill.capture_problems(cap.relid, cap.source_table, cap.key_columns);
    IF cardinality(p) > 0 THEN
      refusals := refusals || p;
      names := names || cap.source_table;
      CONTINUE;
    END IF;
    PERFORM genfill.capture_grant_owner(cap.relid);
    cols := genfill.capture_columns(cap.relid::regclass);
    IF cols IS DISTINCT FROM cap.column_snapshot THEN
      FOR r IN SELECT rel.id, rel.state FROM genfill.releases rel JOIN genfill.datasets ds ON ds.name = rel.dataset
                WHERE to_regclass(ds.source_table) = cap.relid AND rel.state NOT IN ('ACTIVE', 'RETIRED', 'ROLLED_BACK', 'CANCELLED')
                ORDER BY rel.id FOR UPDATE OF rel LOOP
        IF r.state <> 'RECONCILIATION_REQUIRED' THEN
          UPDATE genfill.releases SET state = 'RECONCILIATION_REQUIRED', state_changed_at = now() WHERE id = r.id AND state = r.state;
        END IF;
        INSERT INTO genfill.release_log (release, action, from_state, to_state, reason, detail)
        VALUES (r.id, 'source-changed', r.state, 'RECONCILIATION_REQUIRED', 'SOURCE_CHANGED',
                jsonb_build_object('table', cap.source_table, 'command', p_command,
                                   'columnsBefore', to_jsonb(cap.column_snapshot), 'columnsAfter', to_jsonb(cols)));
      END LOOP;
      UPDATE genfill.captures c SET column_snapshot = cols
       WHERE c.source_table = cap.source_table AND c.column_snapshot IS NOT DISTINCT FROM cap.column_snapshot;
    END IF;
  END LOOP;

  IF cardinality(refusals) > 0 THEN
    RAISE EXCEPTION 'refused: % on % would let writes to a captured table go unlogged: %', coalesce(p_command, 'this statement'),
      array_to_string(ARRAY(SELECT DISTINCT x FROM unnest(names) AS x ORDER BY 1), ', '), array_to_string(refusals, '; ')
      USING ERRCODE = 'GFR01',
            HINT = 'Nothing was changed. To make this change, run `genfill capture remove <table>` first (refused while a release on it is open), then install the capture again.';
  END IF;
END $$;

-- ---------------------------------------------------------------------------------------
-- The DDL guard, run as the DDL's user. It must never break DDL elsewhere: it leaves at once
-- when nothing is captured, and reads only catalogs until it knows a captured table is
-- concerned. A captured table's root R is recognised by genfill.capture_<R>_insert.
CREATE FUNCTION genfill.capture_ddl_end() RETURNS event_trigger
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

-- DROP TRIGGER and DROP TABLE (of the table or a partition) show up only here.
CREATE FUNCTION genfill.capture_ddl_drop() RETURNS event_trigger
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

-- DETACH PARTITION … CONCURRENTLY commits its first transaction (the partition leaves every
-- later snapshot of the table) before ddl_command_end can refuse anything: it is refused up
-- front, from the statement's text (the command runs alone, outside a transaction block).
-- Not search_path-pinned: the table name resolves as the DDL's session reads it; every call
-- is schema-qualified instead.
CREATE FUNCTION genfill.capture_ddl_start() RETURNS event_trigger
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

CREATE EVENT TRIGGER genfill_capture_ddl_start ON ddl_command_start WHEN TAG IN ('ALTER TABLE') EXECUTE FUNCTION genfill.capture_ddl_start();
CREATE EVENT TRIGGER genfill_capture_ddl_end ON ddl_command_end EXECUTE FUNCTION genfill.capture_ddl_end();
CREATE EVENT TRIGGER genfill_capture_ddl_drop ON sql_drop EXECUTE FUNCTION genfill.capture_ddl_drop();
-- A session_replication_role = replica session's DDL is guarded too.
ALTER EVENT TRIGGER genfill_capture_ddl_start ENABLE ALWAYS;
ALTER EVENT TRIGGER genfill_capture_ddl_end ENABLE ALWAYS;
ALTER EVENT TRIGGER genfill_capture_ddl_drop ENABLE ALWAYS;

-- ---------------------------------------------------------------------------------------
DO $$
DECLARE f regprocedure;
BEGIN
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
            WHERE p.pronamespace = 'genfill'::regnamespace AND p.proname LIKE 'capture\_%' LOOP
    EXECUTE format('ALTER FUNCTION %s OWNER TO genfill_owner', f);
  END LOOP;
END $$;
REVOKE ALL ON FUNCTION genfill.capture_prepare(regclass, text[]), genfill.capture_drop_functions(oid),
  genfill.capture_ddl_check(oid[], text[], text), genfill.capture_grant_owner(oid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.capture_prepare(regclass, text[]), genfill.capture_drop_functions(oid),
  genfill.capture_ddl_check(oid[], text[], text) TO genfill_service;
-- `genfill capture install|remove` record and forget a table; the column list changes only
-- through capture_ddl_check.
GRANT INSERT, DELETE ON genfill.captures TO genfill_service;
