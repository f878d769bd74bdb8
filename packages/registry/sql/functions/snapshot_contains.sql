-- Snapshot containment, exactly: B contains A (everything A sees, B sees) iff xmax(A) ≤
-- xmax(B) and every transaction in progress in B below xmax(A) is in progress in A.
CREATE OR REPLACE FUNCTION genfill.snapshot_contains(b pg_snapshot, a pg_snapshot) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN pg_snapshot_xmax(a) <= pg_snapshot_xmax(b)
   AND NOT EXISTS (SELECT 1 FROM pg_snapshot_xip(b) AS x
                    WHERE x < pg_snapshot_xmax(a) AND NOT x = ANY (ARRAY(SELECT pg_snapshot_xip(a))));
ALTER FUNCTION genfill.snapshot_contains(pg_snapshot, pg_snapshot) OWNER TO genfill_owner;
