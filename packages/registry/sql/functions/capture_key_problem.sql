-- NULL when `p_key` is exactly the columns of a NOT DEFERRABLE primary key or unique
-- constraint on NOT NULL columns; otherwise why not. The row lock on the key is what orders
-- two writers of one key, so their event ids follow commit order (SPEC invariant 5): a
-- deferred uniqueness check lets both insert and inverts it.
CREATE OR REPLACE FUNCTION genfill.capture_key_problem(p_rel regclass, p_key text[]) RETURNS text
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
ALTER FUNCTION genfill.capture_key_problem(regclass, text[]) OWNER TO genfill_owner;
