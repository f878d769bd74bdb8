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
CREATE OR REPLACE FUNCTION genfill.capture_prepare(p_root regclass, p_key text[]) RETURNS integer
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
ALTER FUNCTION genfill.capture_prepare(regclass, text[]) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.capture_prepare(regclass, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.capture_prepare(regclass, text[]) TO genfill_service;
