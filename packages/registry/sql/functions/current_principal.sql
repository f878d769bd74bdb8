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

-- What kind of principal genfill.current_principal() names (migration 0028): 'token' when a
-- genfill_api login names it (the API delegates only for its tokens' subjects, so it can never
-- claim a login's identity), 'login' for session_user. A genfill_service login executing a
-- person's request names the kind with SET LOCAL genfill.principal_kind ('login' unless it says
-- 'token'). The persons mapping is keyed by (principal, kind): login alice and a token subject
-- alice are whoever the owner says each is.
CREATE OR REPLACE FUNCTION genfill.current_principal_kind() RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  delegated text := nullif(current_setting('genfill.principal', true), '');
BEGIN
  IF delegated IS NULL THEN
    RETURN 'login';
  END IF;
  IF pg_has_role(session_user, 'genfill_api', 'MEMBER') THEN
    RETURN 'token';
  END IF;
  IF pg_has_role(session_user, 'genfill_service', 'MEMBER') AND current_setting('genfill.principal_kind', true) = 'token' THEN
    RETURN 'token';
  END IF;
  RETURN 'login';
END $$;
ALTER FUNCTION genfill.current_principal_kind() OWNER TO genfill_owner;
