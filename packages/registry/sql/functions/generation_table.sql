-- The name of a generation's table: <dataset>__<generation>, within PostgreSQL's 63 bytes.
CREATE OR REPLACE FUNCTION genfill.generation_table(p_dataset text, p_generation text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN p_dataset || '__' || p_generation;
ALTER FUNCTION genfill.generation_table(text, text) OWNER TO genfill_owner;
