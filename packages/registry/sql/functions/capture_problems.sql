-- What would let a write to the captured table `p_relid` go unlogged, from the catalogs alone
-- (`genfill capture status` shows it; the DDL guard refuses any statement that leaves one).
CREATE OR REPLACE FUNCTION genfill.capture_problems(p_relid oid, p_source text, p_key text[]) RETURNS text[]
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  problems text[] := '{}';
  problem text;
  fns oid[];
  t record;
BEGIN
  SELECT c.oid, c.relkind, c.relrowsecurity, c.relnamespace, n.nspname, format('%I.%I', n.nspname, c.relname) AS name
    INTO rel FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = p_relid;
  IF NOT FOUND THEN
    RETURN ARRAY[format('%s was dropped', p_source)];
  END IF;
  IF rel.name <> p_source THEN
    problems := problems || format('%s was renamed to %s (its events, datasets and releases name it %s)', p_source, rel.name, p_source);
  END IF;
  problem := genfill.capture_key_problem(p_relid::regclass, p_key);
  IF problem IS NOT NULL THEN
    problems := problems || format('%s: %s', p_source, problem);
  END IF;
  IF rel.relrowsecurity THEN
    problems := problems || format('%s has row-level security enabled: the capture''s delete check reads it as genfill_owner and must see every row', p_source);
  END IF;
  IF NOT has_schema_privilege('genfill_owner', rel.relnamespace, 'USAGE') OR NOT has_table_privilege('genfill_owner', p_relid, 'SELECT') THEN
    problems := problems || format('genfill_owner may not read %s, which its capture triggers do on every write: GRANT USAGE ON SCHEMA %I TO genfill_owner; GRANT SELECT ON %s TO genfill_owner',
                                   p_source, rel.nspname, rel.name);
  END IF;
  IF rel.relkind = 'r' AND EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhparent = p_relid) THEN
    problems := problems || format('%s has inheritance children: a write naming a child fires only the child''s triggers', p_source);
  END IF;
  FOR t IN SELECT i.inhparent::regclass::text AS parent FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
            WHERE i.inhrelid = p_relid AND NOT c.relispartition LOOP
    problems := problems || format('%s inherits from %s: a write naming %s fires only its triggers', p_source, t.parent, t.parent);
  END LOOP;

  fns := ARRAY(SELECT p.oid FROM pg_proc p WHERE p.pronamespace = 'genfill'::regnamespace
                  AND p.proname IN (format('capture_%s_insert', p_relid), format('capture_%s_update', p_relid), format('capture_%s_delete', p_relid)));
  FOR t IN
    WITH members AS (SELECT p_relid AS m UNION SELECT pt.relid::oid FROM pg_partition_tree(p_relid::regclass) pt),
         spec (ev, want_type, want_fn, new_table, old_table) AS (
           VALUES ('insert', 4, format('capture_%s_insert', p_relid), 'new_rows', NULL),
                  ('update', 16, format('capture_%s_update', p_relid), 'new_rows', 'old_rows'),
                  ('delete', 8, format('capture_%s_delete', p_relid), NULL, 'old_rows'),
                  ('truncate', 34, 'capture_refuse_truncate', NULL, NULL))
    SELECT m.m::regclass::text AS member, s.ev, s.want_type, tr.tgtype, tr.tgenabled, tr.tgnewtable::text AS new_table, tr.tgoldtable::text AS old_table,
           s.new_table AS want_new, s.old_table AS want_old,
           (SELECT p.oid FROM pg_proc p WHERE p.pronamespace = 'genfill'::regnamespace AND p.proname = s.want_fn) AS want_fn,
           tr.tgfoid, tr.oid IS NOT NULL AS present
      FROM members m CROSS JOIN spec s
      LEFT JOIN pg_trigger tr ON tr.tgrelid = m.m AND tr.tgname = 'genfill_capture_' || s.ev
     ORDER BY m.m, s.ev
  LOOP
    IF NOT t.present THEN
      problems := problems || format('trigger genfill_capture_%s is missing on %s', t.ev, t.member);
    ELSIF t.tgfoid IS DISTINCT FROM t.want_fn OR t.tgtype <> t.want_type
          OR t.new_table IS DISTINCT FROM t.want_new OR t.old_table IS DISTINCT FROM t.want_old THEN
      problems := problems || format('trigger genfill_capture_%s on %s is not genfill''s capture trigger', t.ev, t.member);
    ELSIF t.tgenabled <> 'A' THEN
      problems := problems || format('trigger genfill_capture_%s on %s is %s, not ENABLE ALWAYS', t.ev, t.member,
                                     CASE t.tgenabled WHEN 'D' THEN 'disabled' WHEN 'O' THEN 'enabled for origin sessions only' WHEN 'R' THEN 'enabled for replica sessions only' END);
    END IF;
  END LOOP;
  FOR t IN SELECT DISTINCT sr.srrelid::regclass::text AS member
             FROM pg_subscription_rel sr
            WHERE sr.srrelid IN (SELECT p_relid UNION SELECT pt.relid::oid FROM pg_partition_tree(p_relid::regclass) pt) LOOP
    problems := problems || format('%s is fed by logical replication (pg_subscription_rel): the apply worker fires no statement triggers', t.member);
  END LOOP;
  FOR t IN SELECT DISTINCT tr.tgrelid::regclass::text AS member FROM pg_trigger tr
            WHERE tr.tgfoid = ANY (fns)
              AND tr.tgrelid NOT IN (SELECT p_relid UNION SELECT pt.relid::oid FROM pg_partition_tree(p_relid::regclass) pt) LOOP
    problems := problems || format('%s left the partition tree of %s (DETACH PARTITION): its rows would leave the source without a logged delete', t.member, p_source);
  END LOOP;
  RETURN problems;
END $$;
ALTER FUNCTION genfill.capture_problems(oid, text, text[]) OWNER TO genfill_owner;
