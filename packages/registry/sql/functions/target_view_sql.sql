-- The name users query becomes a view of the active generation through the pointer row, so
-- a cutover is an UPDATE of genfill.datasets, never DDL on the view. The subquery is an
-- initplan: run-time partition pruning leaves a one-partition scan.
CREATE OR REPLACE FUNCTION genfill.target_view_sql(p_dataset text) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  cols text;
BEGIN
  SELECT string_agg(format('%I', attname), ', ' ORDER BY attnum) INTO cols
    FROM pg_attribute
   WHERE attrelid = format('genfill_data.%I', p_dataset)::regclass AND attnum > 0 AND NOT attisdropped
     AND attname NOT IN ('generation', '_gf_rev', '_gf_deleted');
  RETURN format(
    'SELECT %s FROM genfill_data.%I WHERE generation = (SELECT active_generation FROM genfill.datasets WHERE name = %L) AND NOT _gf_deleted',
    cols, p_dataset, p_dataset);
END $$;
ALTER FUNCTION genfill.target_view_sql(text) OWNER TO genfill_owner;
