-- Cleanup after verify (seed 004, step 10). A release is past its rollback window when it is
-- RETIRED (its generation went after the window), ROLLED_BACK (from its rollback) or
-- CANCELLED (from its cancel) and that time plus its rollbackWindow has passed. Its queue and
-- Redis keys go (the service), then genfill.record_release_cleanup removes its temporary rows
-- and logs it once; receipts, reconciliations, rounds and logs stay.
CREATE OR REPLACE FUNCTION genfill.releases_due_for_cleanup()
RETURNS TABLE (release text, state text, since timestamptz, window_end timestamptz)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT r.id, r.state, s.since, s.since + genfill.rollback_window(r.spec)
    FROM genfill.releases r
    CROSS JOIN LATERAL (SELECT CASE r.state
                                 WHEN 'ROLLED_BACK' THEN coalesce((SELECT max(c.switched_at) FROM genfill.cutovers c
                                                                    WHERE c.release = r.id AND c.kind = 'rollback' AND c.state = 'DONE'), r.state_changed_at)
                                 ELSE r.state_changed_at END AS since) s
   WHERE r.state IN ('RETIRED', 'ROLLED_BACK', 'CANCELLED')
     AND (r.state = 'RETIRED' OR s.since + genfill.rollback_window(r.spec) <= clock_timestamp())
     AND NOT EXISTS (SELECT 1 FROM genfill.release_log l WHERE l.release = r.id AND l.action = 'cleanup')
   ORDER BY s.since, r.id
$$;
ALTER FUNCTION genfill.releases_due_for_cleanup() OWNER TO genfill_owner;
