-- The DDL guard's privileged half. `p_roots`: captured tables a statement touched;
-- `p_dropped`: tables whose capture triggers a DROP removed (the table itself may be gone).
-- Refuses (raises) when a captured table is left with any capture_problems; otherwise, when
-- its columns changed, moves every open release whose source it is to
-- RECONCILIATION_REQUIRED (logged as 'source-changed') and stores the new column list. A
-- column that kept its number and name but changed its type changed its values without DML
-- (timestamp → timestamptz needs no rewrite, so the table_rewrite trigger of
-- capture_ddl_rewrite.sql does not see it): the dataset is marked too
-- (genfill.mark_source_rewritten, migration 0030).
CREATE OR REPLACE FUNCTION genfill.capture_ddl_check(p_roots oid[], p_dropped text[], p_command text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  roots oid[] := coalesce(p_roots, '{}');
  refusals text[] := '{}';
  names text[] := '{}';
  d text;
  reloid oid;
  cap record;
  p text[];
  cols text[];
  retyped text[];
  r record;
BEGIN
  FOREACH d IN ARRAY coalesce(p_dropped, '{}') LOOP
    SELECT c.relid INTO reloid FROM genfill.captures c WHERE c.source_table = d AND c.mode = 'trigger';
    IF FOUND THEN
      roots := roots || reloid;
      CONTINUE;
    END IF;
    reloid := to_regclass(d);
    IF reloid IS NULL THEN
      -- Capture triggers exist only on captured tables and their partitions (remove drops
      -- them before anything else): a dropped table that carried them was a partition.
      refusals := refusals || format('%s, a partition of a captured table, was dropped: its rows would leave the source without a logged delete', d);
      names := names || d;
    ELSE
      roots := roots || coalesce(pg_partition_root(reloid)::oid, reloid);
    END IF;
  END LOOP;

  FOR cap IN SELECT c.* FROM genfill.captures c WHERE c.mode = 'trigger' AND c.relid = ANY (roots) ORDER BY c.source_table LOOP
    p := genfill.capture_problems(cap.relid, cap.source_table, cap.key_columns);
    IF cardinality(p) > 0 THEN
      refusals := refusals || p;
      names := names || cap.source_table;
      CONTINUE;
    END IF;
    PERFORM genfill.capture_grant_owner(cap.relid);
    cols := genfill.capture_columns(cap.relid::regclass);
    IF cols IS DISTINCT FROM cap.column_snapshot THEN
      FOR r IN SELECT rel.id, rel.state FROM genfill.releases rel JOIN genfill.datasets ds ON ds.name = rel.dataset
                WHERE to_regclass(ds.source_table) = cap.relid AND rel.state NOT IN ('ACTIVE', 'RETIRED', 'ROLLED_BACK', 'CANCELLED')
                ORDER BY rel.id FOR UPDATE OF rel LOOP
        IF r.state <> 'RECONCILIATION_REQUIRED' THEN
          UPDATE genfill.releases SET state = 'RECONCILIATION_REQUIRED', state_changed_at = now() WHERE id = r.id AND state = r.state;
        END IF;
        INSERT INTO genfill.release_log (release, action, from_state, to_state, reason, detail)
        VALUES (r.id, 'source-changed', r.state, 'RECONCILIATION_REQUIRED', 'SOURCE_CHANGED',
                jsonb_build_object('table', cap.source_table, 'command', p_command,
                                   'columnsBefore', to_jsonb(cap.column_snapshot), 'columnsAfter', to_jsonb(cols)));
      END LOOP;
      retyped := ARRAY(SELECT format('%s: %s → %s', a.attname, substr(o.e, length(x.p) + 1), format_type(a.atttypid, a.atttypmod))
                         FROM pg_attribute a
                        CROSS JOIN LATERAL (SELECT format('%s:%s:', a.attnum, a.attname) AS p) AS x
                         JOIN unnest(cap.column_snapshot) AS o (e) ON starts_with(o.e, x.p)
                        WHERE a.attrelid = cap.relid AND a.attnum > 0 AND NOT a.attisdropped
                          AND o.e <> x.p || format_type(a.atttypid, a.atttypmod)
                        ORDER BY a.attnum);
      IF cardinality(retyped) > 0 THEN
        PERFORM genfill.mark_source_rewritten(cap.relid, p_command, ARRAY['column-type'], jsonb_build_object('columns', to_jsonb(retyped)));
      END IF;
      UPDATE genfill.captures c SET column_snapshot = cols
       WHERE c.source_table = cap.source_table AND c.column_snapshot IS NOT DISTINCT FROM cap.column_snapshot;
    END IF;
  END LOOP;

  IF cardinality(refusals) > 0 THEN
    RAISE EXCEPTION 'refused: % on % would let writes to a captured table go unlogged: %', coalesce(p_command, 'this statement'),
      array_to_string(ARRAY(SELECT DISTINCT x FROM unnest(names) AS x ORDER BY 1), ', '), array_to_string(refusals, '; ')
      USING ERRCODE = 'GFR01',
            HINT = 'Nothing was changed. To make this change, run `genfill capture remove <table>` first (refused while a release on it is open), then install the capture again.';
  END IF;
END $$;
ALTER FUNCTION genfill.capture_ddl_check(oid[], text[], text) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.capture_ddl_check(oid[], text[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.capture_ddl_check(oid[], text[], text) TO genfill_service;
