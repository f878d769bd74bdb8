-- 0019_partitions: the partitions of a release holding a set of instants, by binary search; and
-- the change log's partitions made for the bucket that holds the current transaction id.
-- Add-only: never edit this file once landed; add 0020_… instead.
--
-- 0014's genfill.partitions_at joined every instant to every partition with an OR for the carry
-- chunks' open ends: a nested loop, 7.3 million comparisons and ~0.6 s for the 20,000 before and
-- after times of a 10,000-key catch-up round over 367 partitions (bench/reconcile-incremental),
-- more than the round's apply. The manifest's partitions are contiguous and disjoint (the
-- coverage proof), so width_bucket over their sorted lower bounds finds each instant's partition
-- in O(log n); the carry chunks' sentinel ends (0001-01-01 and 9999-12-31) still take every
-- instant before or after them, as before.
CREATE OR REPLACE FUNCTION genfill.partitions_at(p_release text, p_times timestamptz[])
RETURNS SETOF text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  WITH b AS MATERIALIZED (
         SELECT array_agg(p.lower ORDER BY p.lower) AS lo, array_agg(p.upper ORDER BY p.lower) AS hi,
                array_agg(p.id ORDER BY p.lower) AS ids, array_agg(p.kind ORDER BY p.lower) AS kinds
           FROM genfill.partitions p WHERE p.release = p_release),
       t AS (SELECT DISTINCT x FROM unnest(p_times) AS x WHERE x IS NOT NULL),
       w AS (SELECT t.x, CASE WHEN width_bucket(t.x, b.lo) = 0 AND b.kinds[1] = 'carry' AND b.lo[1] = '0001-01-01 00:00:00+00'
                              THEN 1 ELSE width_bucket(t.x, b.lo) END AS i
               FROM t, b WHERE b.lo IS NOT NULL)
  SELECT DISTINCT b.ids[w.i] FROM w, b
   WHERE w.i >= 1 AND (w.x < b.hi[w.i] OR (b.kinds[w.i] = 'carry' AND b.hi[w.i] = '9999-12-31 00:00:00+00'))
$$;

-- 0009's genfill.change_log_add_partitions took the current bucket as round(xid / width) (a
-- numeric cast to bigint rounds): past the middle of a bucket it started one bucket too late, so
-- the bucket holding the current transactions never got its partition and their events went to
-- the DEFAULT partition, which pruning can only empty by batched deletes. floor() it is.
CREATE OR REPLACE FUNCTION genfill.change_log_add_partitions(p_ahead integer DEFAULT 4, p_width bigint DEFAULT 10000000)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  first_bucket bigint := floor(pg_current_xact_id()::text::numeric / p_width)::bigint;
  b bigint;
  made integer := 0;
  name text;
BEGIN
  IF p_width < 1000 OR p_ahead < 1 THEN
    RAISE EXCEPTION 'change_log_add_partitions: width % and ahead % must be at least 1000 and 1', p_width, p_ahead USING ERRCODE = 'GFR01';
  END IF;
  FOR b IN first_bucket .. first_bucket + p_ahead LOOP
    name := format('change_log_%s', lpad(b::text, 12, '0'));
    CONTINUE WHEN to_regclass(format('genfill.%I', name)) IS NOT NULL;
    CONTINUE WHEN EXISTS (SELECT 1 FROM genfill.change_log_default d
                           WHERE d.txid >= (b * p_width)::text::xid8 AND d.txid < ((b + 1) * p_width)::text::xid8);
    EXECUTE format('CREATE TABLE genfill.%I PARTITION OF genfill.change_log FOR VALUES FROM (%L) TO (%L)',
                   name, (b * p_width)::text, ((b + 1) * p_width)::text);
    made := made + 1;
  END LOOP;
  RETURN made;
END $$;
SELECT genfill.change_log_add_partitions();
