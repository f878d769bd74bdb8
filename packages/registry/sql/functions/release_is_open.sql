-- A release that may still write, verify or cut over (it needs the log): not yet ACTIVE and
-- not finished.
CREATE OR REPLACE FUNCTION genfill.release_is_open(p_state text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN p_state NOT IN ('ACTIVE', 'SUPERSEDED', 'RETIRED', 'ROLLED_BACK', 'CANCELLED');
ALTER FUNCTION genfill.release_is_open(text) OWNER TO genfill_owner;
