-- The log's partitions with their txid ranges [from_txid, to_txid) (NULL for the DEFAULT).
CREATE OR REPLACE FUNCTION genfill.change_log_partitions()
RETURNS TABLE (partition text, from_txid xid8, to_txid xid8, is_default boolean, rows_estimate bigint, bytes bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT c.oid::regclass::text, m[1]::xid8, m[2]::xid8, c.relpartbound IS NOT NULL AND pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT',
         greatest(c.reltuples, 0)::bigint, pg_total_relation_size(c.oid)
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    LEFT JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid), $re$FROM \('(\d+)'\) TO \('(\d+)'\)$re$) AS m ON true
   WHERE i.inhparent = 'genfill.change_log'::regclass
   ORDER BY m[1]::xid8 NULLS FIRST
$$;
ALTER FUNCTION genfill.change_log_partitions() OWNER TO genfill_owner;
