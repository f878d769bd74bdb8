-- A 'schema.table' name as stored in genfill.datasets (target_table), quoted for SQL text.
CREATE OR REPLACE FUNCTION genfill.quote_qualified(p_name text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN format('%I.%I', split_part(p_name, '.', 1), split_part(p_name, '.', 2));

ALTER FUNCTION genfill.quote_qualified(text) OWNER TO genfill_owner;
