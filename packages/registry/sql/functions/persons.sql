-- Persons (migration 0028): the owner-written mapping from principals — logins and API token
-- subjects — to the people behind them. genfill.approve and genfill.approval_chain compare
-- persons, never principals, so one person counts once whatever they log in as.

-- The person (principal, kind) maps to, or NULL.
CREATE OR REPLACE FUNCTION genfill.person_of(p_principal text, p_kind text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT m.person FROM genfill.principal_persons m WHERE m.principal = p_principal AND m.kind = p_kind
$$;
ALTER FUNCTION genfill.person_of(text, text) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.person_of(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.person_of(text, text) TO genfill_operator, genfill_approver, genfill_reader, genfill_service;

-- The statements the owner runs to map (principal, kind) to a person: what a refusal quotes.
-- The person is named after the principal; the owner writes the real one.
CREATE OR REPLACE FUNCTION genfill.person_mapping_sql(p_principal text, p_kind text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT format('as the owner (a superuser or a member of genfill_owner): INSERT INTO genfill.persons (person) VALUES (%1$L) ON CONFLICT DO NOTHING; '
                'INSERT INTO genfill.principal_persons (principal, kind, person) VALUES (%2$L, %3$L, %1$L); '
                '(write the real person in place of %1$L: every principal of one person maps to the same person)',
                p_principal, p_principal, p_kind)
$$;
ALTER FUNCTION genfill.person_mapping_sql(text, text) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.person_mapping_sql(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.person_mapping_sql(text, text) TO genfill_operator, genfill_approver, genfill_reader, genfill_service;
