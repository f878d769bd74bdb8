-- The columns as `attnum:name:type`: a dropped and re-added column, a rename and a type
-- change all change it.
CREATE OR REPLACE FUNCTION genfill.capture_columns(p_rel regclass) RETURNS text[]
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
RETURN ARRAY(SELECT format('%s:%s:%s', a.attnum, a.attname, format_type(a.atttypid, a.atttypmod))
               FROM pg_attribute a WHERE a.attrelid = p_rel AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum);
ALTER FUNCTION genfill.capture_columns(regclass) OWNER TO genfill_owner;
