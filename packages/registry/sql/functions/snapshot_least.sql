-- Snapshot arithmetic. The containment-minimum of two snapshots: the largest snapshot both
-- contain — it sees a transaction only when both do (capture's containmentMinimum in SQL).
CREATE OR REPLACE FUNCTION genfill.snapshot_least(a pg_snapshot, b pg_snapshot) RETURNS pg_snapshot
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT format('%s:%s:%s', least(pg_snapshot_xmin(a), pg_snapshot_xmin(b), x.xmax), x.xmax,
                coalesce((SELECT string_agg(u.t::text, ',' ORDER BY u.t)
                            FROM (SELECT pg_snapshot_xip(a) AS t UNION SELECT pg_snapshot_xip(b)) AS u
                           WHERE u.t < x.xmax), ''))::pg_snapshot
    FROM (SELECT least(pg_snapshot_xmax(a), pg_snapshot_xmax(b)) AS xmax) AS x
$$;
ALTER FUNCTION genfill.snapshot_least(pg_snapshot, pg_snapshot) OWNER TO genfill_owner;

-- The containment-minimum of a set of snapshots (genfill.log_horizon and its parts).
CREATE OR REPLACE AGGREGATE genfill.containment_min(pg_snapshot) (SFUNC = genfill.snapshot_least, STYPE = pg_snapshot, PARALLEL = SAFE);
ALTER AGGREGATE genfill.containment_min(pg_snapshot) OWNER TO genfill_owner;
