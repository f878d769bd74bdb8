-- The PRIMARY KEY and UNIQUE constraints of a table, primary key first.
CREATE OR REPLACE FUNCTION genfill.capture_keys(p_rel regclass)
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
ALTER FUNCTION genfill.capture_keys(regclass) OWNER TO genfill_owner;
