-- The source of `p_dataset` changed without DML (genfill.mark_source_rewritten, migration 0030)
-- and no drift check has verified the active generation since: what changed, when, and the
-- latest drift check's verdict when it ran after that and found a difference. NULL when nothing
-- is pending. One definition for the cutover's 'source-rewrite' precondition and for `status`.
--
-- A drift check (`genfill reconcile --dataset`, packages/reconcile/src/drift.ts) records its
-- verdict on the same dataset_flags row the mark locks, in REPEATABLE READ: it either committed
-- before the rewrite marked the row (so its time is earlier) or fails to serialize after it, so
-- a verdict later than the mark was computed over the rewritten source.
CREATE OR REPLACE FUNCTION genfill.source_rewrite_pending(p_dataset text) RETURNS jsonb
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT f.source_rewrite || jsonb_build_object('at', f.source_rewritten_at,
           'driftCheck', CASE WHEN f.drift_checked_at > f.source_rewritten_at
                              THEN jsonb_build_object('at', f.drift_checked_at, 'missing', f.drift_result->'missing', 'extra', f.drift_result->'extra',
                                                      'sample', f.drift_result->'sample') END)
    FROM genfill.dataset_flags f
   WHERE f.dataset = p_dataset AND f.source_rewritten_at IS NOT NULL
     AND NOT (f.drift_checked_at > f.source_rewritten_at AND coalesce((f.drift_result->>'verified')::boolean, false))
$$;
ALTER FUNCTION genfill.source_rewrite_pending(text) OWNER TO genfill_owner;
