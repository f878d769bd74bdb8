-- A captured table's share of the change log for `genfill capture status`, as counts and ids
-- only (migration 0025: people read the log no more): its events and their bytes, and the
-- oldest event some consumer has not consumed. A consumer's progress is its frontier (SPEC
-- invariant 6): an event is pending for F when F does not see its transaction; per frontier the
-- first by txid among those F cannot see, read by the two index ranges SPEC "Capture rules"
-- gives (txid ≥ xmax(F), or txid in F's xip). No frontier of a dataset on the table yet: the
-- oldest event, basis 'no-consumer'.
CREATE OR REPLACE FUNCTION genfill.capture_log_status(p_source_table text)
RETURNS TABLE (events bigint, bytes bigint, oldest_event_id bigint, oldest_txid xid8, oldest_logged_at timestamptz, basis text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  WITH cap AS (SELECT c.source_table, c.relid FROM genfill.captures c WHERE c.source_table = p_source_table),
       f AS (SELECT fr.snapshot FROM genfill.frontiers fr JOIN genfill.datasets d ON d.name = fr.dataset, cap
              WHERE to_regclass(d.source_table) = cap.relid),
       size AS (SELECT count(*)::bigint AS events, coalesce(sum(pg_column_size(l.*)), 0)::bigint AS bytes
                  FROM genfill.change_log l, cap WHERE l.source_table = cap.source_table),
       oldest AS (
         SELECT e.event_id, e.txid, e.logged_at, e.basis FROM (
           (SELECT l.event_id, l.txid, l.logged_at, 'no-consumer' AS basis FROM genfill.change_log l, cap
             WHERE l.source_table = cap.source_table AND NOT EXISTS (SELECT 1 FROM f) ORDER BY l.txid, l.event_id LIMIT 1)
           UNION ALL
           SELECT p.event_id, p.txid, p.logged_at, 'frontier' FROM f CROSS JOIN LATERAL (
             (SELECT l.event_id, l.txid, l.logged_at FROM genfill.change_log l
               WHERE l.source_table = p_source_table AND l.txid >= pg_snapshot_xmax(f.snapshot) ORDER BY l.txid, l.event_id LIMIT 1)
             UNION ALL
             (SELECT l.event_id, l.txid, l.logged_at FROM genfill.change_log l
               WHERE l.source_table = p_source_table AND l.txid = ANY (ARRAY(SELECT pg_snapshot_xip(f.snapshot))) ORDER BY l.txid, l.event_id LIMIT 1)) p
         ) e ORDER BY e.txid, e.event_id LIMIT 1)
  SELECT size.events, size.bytes, oldest.event_id, oldest.txid, oldest.logged_at, oldest.basis
    FROM size LEFT JOIN oldest ON true
$$;
ALTER FUNCTION genfill.capture_log_status(text) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.capture_log_status(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.capture_log_status(text) TO genfill_operator, genfill_approver, genfill_reader, genfill_service;
