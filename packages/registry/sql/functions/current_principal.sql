-- Who acted. session_user, except that a member of genfill_api (the API, for its token's
-- subject) or genfill_service (executing a person's request) may name the principal with
-- SET LOCAL genfill.principal. A trigger fills every principal column from here: a value the
-- caller passed is overwritten, so no row can name someone else.
CREATE OR REPLACE FUNCTION genfill.current_principal() RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  delegated text := nullif(current_setting('genfill.principal', true), '');
BEGIN
  IF delegated IS NOT NULL
     AND (pg_has_role(session_user, 'genfill_api', 'MEMBER') OR pg_has_role(session_user, 'genfill_service', 'MEMBER')) THEN
    RETURN delegated;
  END IF;
  RETURN session_user::text;
END $$;
ALTER FUNCTION genfill.current_principal() OWNER TO genfill_owner;
