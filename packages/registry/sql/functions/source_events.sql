-- A source's events and conflict images, for a person who may read the source itself (migration
-- 0025: genfill.change_log and genfill.ingress_conflicts are private, their rows are full row
-- images — deleted rows and columns a transform drops included).
--
-- The rule, checked for the login (session_user: a SET ROLE inside the session changes nothing):
--   * the table is a captured source (genfill.captures; an ingress dataset's is its mirror);
--   * the login holds SELECT on the whole table (has_table_privilege: a grant on some columns is
--     not enough, the images carry every column) and USAGE on its schema;
--   * row-level security does not hide rows of it from the login (the log would show them);
--   * the login is not a member of genfill_api: the API acts for token subjects that hold no
--     table privileges of their own, and its login's privileges are not theirs, so there is no
--     sound check to make on its side; a person reads events with their own database login.
-- A refusal is SQLSTATE GFP01 (SourceReadRefusedError) naming the grant that would allow it.
-- The functions are plpgsql returning their rows: a caller's predicates run on what they
-- return, never inside them (the security-barrier property a view would need the option for).

-- The check, and the source as genfill.change_log.source_table spells it. Internal: only the
-- SECURITY DEFINER functions below call it (as genfill_owner).
CREATE OR REPLACE FUNCTION genfill.source_read_check(p_table regclass)
RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  who name := session_user;
  me record;
  src text;
  rel record;
BEGIN
  SELECT r.rolsuper, r.rolbypassrls INTO me FROM pg_roles r WHERE r.rolname = who;
  SELECT c.source_table INTO src FROM genfill.captures c WHERE c.relid = p_table;
  IF p_table IS NULL OR src IS NULL THEN
    RAISE EXCEPTION '% is not a captured source: genfill keeps events only of the tables `genfill capture install` captured (`genfill capture status` lists them)',
      coalesce(p_table::text, '(no table)') USING ERRCODE = 'GFN01';
  END IF;
  IF NOT me.rolsuper AND pg_has_role(who, 'genfill_api', 'MEMBER') THEN
    RAISE EXCEPTION 'refused: % is the API''s login, which reads no events of % on a token subject''s behalf (it holds no per-subject table privilege to check): read them with your own database login',
      who, p_table USING ERRCODE = 'GFP01';
  END IF;
  IF NOT has_table_privilege(who, p_table, 'SELECT')
     OR NOT has_schema_privilege(who, (SELECT c.relnamespace FROM pg_class c WHERE c.oid = p_table), 'USAGE') THEN
    RAISE EXCEPTION 'refused: % may not read %, so not its events either (they are full row images, deleted rows and every column included): ask its owner to GRANT SELECT ON % TO % (and USAGE on its schema)',
      who, p_table, p_table, quote_ident(who) USING ERRCODE = 'GFP01';
  END IF;
  SELECT c.relrowsecurity, c.relforcerowsecurity, c.relowner INTO rel FROM pg_class c WHERE c.oid = p_table;
  IF rel.relrowsecurity AND NOT me.rolsuper AND NOT me.rolbypassrls
     AND (rel.relforcerowsecurity OR NOT pg_has_role(who, rel.relowner, 'USAGE')) THEN
    RAISE EXCEPTION 'refused: % has row-level security, which the change log cannot apply to its images: % may read its rows only through the table itself',
      p_table, who USING ERRCODE = 'GFP01';
  END IF;
  RETURN src;
END $$;
ALTER FUNCTION genfill.source_read_check(regclass) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.source_read_check(regclass) FROM PUBLIC;

-- The events of p_table after event id p_after, oldest first, at most p_limit (1..10,000): page
-- on with the last event_id of a page.
CREATE OR REPLACE FUNCTION genfill.source_events(p_table regclass, p_after bigint DEFAULT 0, p_limit integer DEFAULT 1000)
RETURNS TABLE (event_id bigint, key jsonb, op text, "row" jsonb, revision bigint, txid xid8, logged_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  src text;
BEGIN
  IF p_limit IS NULL OR p_limit < 1 OR p_limit > 10000 THEN
    RAISE EXCEPTION 'source_events: a page is 1 to 10000 events, not %; page on with p_after, the last event_id of the page before', p_limit
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  src := genfill.source_read_check(p_table);
  RETURN QUERY
    SELECT l.event_id, l.key, l.op, l.row, l.revision, l.txid, l.logged_at
      FROM genfill.change_log l
     WHERE l.source_table = src AND l.event_id > coalesce(p_after, 0)
     ORDER BY l.event_id
     LIMIT p_limit;
END $$;
ALTER FUNCTION genfill.source_events(regclass, bigint, integer) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.source_events(regclass, bigint, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.source_events(regclass, bigint, integer) TO genfill_operator, genfill_approver, genfill_reader, genfill_service;

-- The ingress conflicts of a dataset with their key and images, after conflict id p_after, at
-- most p_limit (1..1,000): for a login that may read the dataset's mirror. Without it, the
-- view genfill.ingress_conflict_log says what happened, without the data.
CREATE OR REPLACE FUNCTION genfill.source_conflicts(p_dataset text, p_after bigint DEFAULT 0, p_limit integer DEFAULT 100)
RETURNS TABLE (id bigint, dataset text, source_table text, key jsonb, revision bigint, incoming jsonb, stored jsonb,
               releases text[], principal text, at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  mirror regclass;
  src text;
BEGIN
  IF p_limit IS NULL OR p_limit < 1 OR p_limit > 1000 THEN
    RAISE EXCEPTION 'source_conflicts: a page is 1 to 1000 conflicts, not %; page on with p_after, the last id of the page before', p_limit
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT to_regclass(d.source_table) INTO mirror FROM genfill.datasets d WHERE d.name = p_dataset;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'dataset % does not exist: check the name with `genfill status`', p_dataset USING ERRCODE = 'GFN01';
  END IF;
  src := genfill.source_read_check(mirror);
  RETURN QUERY
    SELECT c.id, c.dataset, c.source_table, c.key, c.revision, c.incoming, c.stored, c.releases, c.principal, c.at
      FROM genfill.ingress_conflicts c
     WHERE c.dataset = p_dataset AND c.source_table = src AND c.id > coalesce(p_after, 0)
     ORDER BY c.id
     LIMIT p_limit;
END $$;
ALTER FUNCTION genfill.source_conflicts(text, bigint, integer) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.source_conflicts(text, bigint, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.source_conflicts(text, bigint, integer) TO genfill_operator, genfill_approver, genfill_reader, genfill_service;
