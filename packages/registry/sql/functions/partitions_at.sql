-- The partitions of a release holding these instants (a zone-less time column converts its
-- wall clocks with AT TIME ZONE of the release's region zone first), by binary search.
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
ALTER FUNCTION genfill.partitions_at(text, timestamptz[]) OWNER TO genfill_owner;
