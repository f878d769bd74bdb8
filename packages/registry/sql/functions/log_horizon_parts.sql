-- The log's pruning horizon (invariant 15). Every snapshot the change log is still needed
-- for, with what needs it and since when:
--   frontier           the frontier of every generation not RETIRED or ABANDONED — the active
--                      one's (the projector), a RETAINED one's (at the barrier where the cutover
--                      left it; a rollback replays from it and moves it);
--   catch-up frontier  of every open release (its next round reads from it);
--   release floor      of every open release (every watermark it will record contains it);
--   watermarks         of every open release's receipts (a repair lowers its catch-up frontier
--                      to one; the reconciler reads the events after them);
--   reconciliation     the latest of every open release (the cutover re-verifies the keys
--                      changed since the approved one);
--   barrier            of every DONE switch whose rollback window is open, and of a RUNNING one
--                      (the rollback replays (B, B′]);
--   sealed epoch       the barrier of an epoch sealed now (a cutover or rollback in flight).
-- An open release is one genfill.release_is_open says so of.
CREATE OR REPLACE FUNCTION genfill.log_horizon_parts()
RETURNS TABLE (kind text, dataset text, subject text, snapshot pg_snapshot, since timestamptz)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT 'frontier', f.dataset, format('generation %s (%s)', f.generation, g.state), f.snapshot, f.updated_at
    FROM genfill.frontiers f JOIN genfill.generations g ON g.dataset = f.dataset AND g.generation = f.generation
   WHERE g.state NOT IN ('RETIRED', 'ABANDONED')
  UNION ALL
  SELECT 'catch-up frontier', r.dataset, format('release %s', r.id), c.snapshot, c.updated_at
    FROM genfill.catchup_frontiers c JOIN genfill.releases r ON r.id = c.release
   WHERE genfill.release_is_open(r.state)
  UNION ALL
  SELECT 'release floor', r.dataset, format('release %s', r.id), fl.floor, fl.at
    FROM genfill.release_floors fl JOIN genfill.releases r ON r.id = fl.release
   WHERE genfill.release_is_open(r.state)
  UNION ALL
  SELECT 'watermarks', r.dataset, format('release %s (%s receipts)', r.id, count(*)), genfill.containment_min(rc.watermark), min(rc.created_at)
    FROM genfill.receipts rc JOIN genfill.releases r ON r.id = rc.release
   WHERE genfill.release_is_open(r.state)
   GROUP BY r.dataset, r.id
  UNION ALL
  SELECT 'reconciliation', r.dataset, format('release %s (reconciliation #%s)', r.id, c.id), c.snapshot, c.at
    FROM genfill.releases r
    JOIN LATERAL (SELECT rc.id, rc.snapshot, rc.at FROM genfill.reconciliations rc WHERE rc.release = r.id ORDER BY rc.id DESC LIMIT 1) c ON true
   WHERE genfill.release_is_open(r.state)
  UNION ALL
  SELECT 'barrier', c.dataset, format('%s #%s of %s from generation %s', c.kind, c.id, c.release, c.from_generation), c.barrier,
         coalesce(c.switched_at, c.sealed_at)
    FROM genfill.cutovers c JOIN genfill.releases r ON r.id = c.release
   WHERE c.barrier IS NOT NULL
     AND (c.state = 'RUNNING'
          OR c.state = 'DONE' AND (genfill.rollback_window(r.spec) IS NULL OR c.switched_at + genfill.rollback_window(r.spec) > clock_timestamp()))
  UNION ALL
  SELECT 'sealed epoch', e.dataset, format('epoch %s sealed for %s', e.epoch, e.release), e.barrier, e.sealed_at
    FROM genfill.epochs e
   WHERE e.barrier IS NOT NULL AND e.closed_at IS NULL
$$;
ALTER FUNCTION genfill.log_horizon_parts() OWNER TO genfill_owner;
