-- The advisory lock key of a dataset's seal.
CREATE OR REPLACE FUNCTION genfill.seal_key(p_dataset text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN hashtextextended('genfill:seal:' || p_dataset, 0);
ALTER FUNCTION genfill.seal_key(text) OWNER TO genfill_owner;
