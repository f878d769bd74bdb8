-- `genfill capture install <table> --ingress` (installIngressMirror in @genfill/capture): the
-- caller has handed the table to genfill_owner in the same transaction (ALTER TABLE … OWNER,
-- which needs the table's owner to be a superuser or a member of genfill_owner). Here: every
-- write privilege of anyone else is revoked (only ingest_apply, running as genfill_owner,
-- writes it), readers keep SELECT, the rows already there get revision 0, and the table is
-- recorded as a capture of mode 'ingress'. No trigger is installed: ingest writes the log.
-- Idempotent: 'unchanged' when it already is this mirror.
CREATE OR REPLACE FUNCTION genfill.ingress_install(p_table regclass, p_reader text)
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
  -- The fleet builds from it; the reader named at install (the people who may read this
  -- source) reads it too. Not every person: a mirror holds an outside source's rows, and SELECT
  -- on it is what genfill.source_events checks before showing its events (issue 28).
  EXECUTE format('GRANT SELECT ON %s TO genfill_service', p_table);
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
ALTER FUNCTION genfill.ingress_install(regclass, text) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.ingress_install(regclass, text) FROM PUBLIC;
