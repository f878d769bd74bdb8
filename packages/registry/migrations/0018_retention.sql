-- 0018_retention: retiring old generations and pruning the change log (SPEC invariants 12 and
-- 15, "Storage layout"; issue 18 parts 2–4). Add-only: never edit this file once landed; add
-- 0019_… instead.
--
-- The reconciler service runs three housekeeping steps every round (packages/reconcile:
-- retention.ts, prune.ts, cleanup.ts); this migration holds what they decide with, so the
-- service, `genfill status --dataset` and these functions share one definition:
--
--   retention  genfill.generation_retention says, per generation that no longer serves readers
--              (RETAINED after a cutover or a rollback, ABANDONED after a cancel), until when
--              it is kept and why; genfill.retire_generation is the one writer that retires it.
--              The table then goes on an owner connection (DETACH … CONCURRENTLY cannot run in
--              a function): packages/reconcile/src/retention.ts.
--   pruning    genfill.log_horizon_parts lists every snapshot the log is still needed for;
--              genfill.log_horizon is their containment-minimum. Whole partitions below its
--              xmin are detached and dropped by the service (plain DETACH under a short
--              lock_timeout: the log keeps its DEFAULT partition, which forbids CONCURRENTLY);
--              rows of the DEFAULT partition and projector tombstones below it go here.
--   cleanup    genfill.releases_due_for_cleanup / genfill.record_release_cleanup: a release
--              past its rollback window loses its queue, Redis keys and temporary rows; its
--              receipts, reconciliations and logs stay.

-- ---------------------------------------------------------------------------------------
-- Snapshot arithmetic. The containment-minimum of two snapshots: the largest snapshot both
-- contain — it sees a transaction only when both do (capture's containmentMinimum in SQL).
CREATE FUNCTION genfill.snapshot_least(a pg_snapshot, b pg_snapshot) RETURNS pg_snapshot
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT format('%s:%s:%s', least(pg_snapshot_xmin(a), pg_snapshot_xmin(b), x.xmax), x.xmax,
                coalesce((SELECT string_agg(u.t::text, ',' ORDER BY u.t)
                            FROM (SELECT pg_snapshot_xip(a) AS t UNION SELECT pg_snapshot_xip(b)) AS u
                           WHERE u.t < x.xmax), ''))::pg_snapshot
    FROM (SELECT least(pg_snapshot_xmax(a), pg_snapshot_xmax(b)) AS xmax) AS x
$$;
CREATE AGGREGATE genfill.containment_min(pg_snapshot) (SFUNC = genfill.snapshot_least, STYPE = pg_snapshot, PARALLEL = SAFE);

-- A release's rollbackWindow (ISO 8601, which interval input reads; default PT24H), or NULL
-- when the stored value cannot be read: then nothing it protects is ever retired by itself.
CREATE FUNCTION genfill.rollback_window(p_spec jsonb) RETURNS interval
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN coalesce(nullif(p_spec->>'rollbackWindow', ''), 'PT24H')::interval;
EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow OR invalid_parameter_value THEN
  RETURN NULL;
END $$;

-- A release that may still write, verify or cut over (it needs the log): not yet ACTIVE and
-- not finished.
CREATE FUNCTION genfill.release_is_open(p_state text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN p_state NOT IN ('ACTIVE', 'SUPERSEDED', 'RETIRED', 'ROLLED_BACK', 'CANCELLED');

-- ---------------------------------------------------------------------------------------
-- Retention. One row per generation that no longer serves readers and is not gone yet:
-- RETAINED (a cutover replaced it, or a rollback took readers off it), ABANDONED (the
-- cancel of the last release filling it), or RETIRED with its table still there (the
-- service has not finished detaching and dropping it).
--
-- Its window is counted from what took readers off it last — the latest DONE row of
-- genfill.cutovers (cutover or rollback) whose from_generation it is, or for an ABANDONED
-- generation the cancel that abandoned it — for the rollbackWindow of that row's release. It is retirable when the window has ended, no reader lease on it is
-- live, it is not the active generation, no open release builds into it or expects it as
-- its active generation, and no cutover or rollback of the dataset is running.
CREATE FUNCTION genfill.generation_retention(p_dataset text)
RETURNS TABLE (
  dataset text, generation text, state text,
  -- 'cutover' | 'rollback' | 'cancel' | NULL (nothing recorded)
  left_by text, left_by_release text, left_at timestamptz, rollback_window interval, window_end timestamptz,
  lease_until timestamptz, lease_holder text, leases integer,
  retain_until timestamptz, holds text[], retirable boolean,
  table_name text, table_present boolean, table_attached boolean, detach_pending boolean, bytes bigint)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN QUERY
  WITH g AS (
    SELECT gg.dataset, gg.generation, gg.state, d.active_generation,
           genfill.generation_table(gg.dataset, gg.generation) AS tname,
           to_regclass(format('genfill_data.%I', genfill.generation_table(gg.dataset, gg.generation))) AS rel,
           to_regclass(format('genfill_data.%I', gg.dataset)) AS parent
      FROM genfill.generations gg JOIN genfill.datasets d ON d.name = gg.dataset
     WHERE (p_dataset IS NULL OR gg.dataset = p_dataset)
       AND (gg.state IN ('RETAINED', 'ABANDONED')
            OR gg.state = 'RETIRED' AND to_regclass(format('genfill_data.%I', genfill.generation_table(gg.dataset, gg.generation))) IS NOT NULL)
  ), w AS (
    SELECT g.*, sw.kind AS sw_kind, sw.release AS sw_release, sw.at AS sw_at, genfill.rollback_window(r.spec) AS win
      FROM g
      LEFT JOIN LATERAL (
        SELECT c.kind, c.release, c.switched_at AS at FROM genfill.cutovers c
         WHERE c.dataset = g.dataset AND c.from_generation = g.generation AND c.state = 'DONE' AND c.switched_at IS NOT NULL
        UNION ALL
        SELECT 'cancel', l.release, l.at FROM genfill.release_log l JOIN genfill.releases rr ON rr.id = l.release
         WHERE g.state = 'ABANDONED' AND rr.dataset = g.dataset AND l.action = 'cancel' AND l.detail->>'abandonedGeneration' = g.generation
        ORDER BY 3 DESC LIMIT 1) sw ON true
      LEFT JOIN genfill.releases r ON r.id = sw.release
  ), x AS (
    SELECT w.*,
           w.sw_at + w.win AS wend,
           ls.until AS lease_until, ls.holder AS lease_holder, coalesce(ls.n, 0)::int AS nleases,
           (SELECT string_agg(o.id, ', ' ORDER BY o.id) FROM genfill.releases o
             WHERE o.dataset = w.dataset AND (o.generation = w.generation OR o.expected_active = w.generation)
               AND genfill.release_is_open(o.state) AND o.state <> 'DRAFT') AS open_releases,
           (SELECT format('%s #%s of %s', c.kind, c.id, c.release) FROM genfill.cutovers c
             WHERE c.dataset = w.dataset AND c.state = 'RUNNING' ORDER BY c.id LIMIT 1) AS running,
           EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = w.rel AND i.inhparent = w.parent) AS attached,
           EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = w.rel AND i.inhparent = w.parent AND i.inhdetachpending) AS pending
      FROM w
      LEFT JOIN LATERAL (
        SELECT max(l.expires_at) AS until, (array_agg(l.holder ORDER BY l.expires_at DESC))[1] AS holder, count(*) AS n
          FROM genfill.reader_leases l
         WHERE l.dataset = w.dataset AND l.generation = w.generation AND l.expires_at > clock_timestamp()) ls ON true
  ), h AS (
    SELECT x.*, array_remove(ARRAY[
             CASE WHEN x.state = 'RETIRED' THEN NULL
                  WHEN x.sw_at IS NULL THEN format('no %s of it is recorded: retire it by hand if it is not needed',
                                                   CASE WHEN x.state = 'ABANDONED' THEN 'cancel' ELSE 'cutover or rollback' END)
                  WHEN x.win IS NULL THEN format('the rollbackWindow of %s cannot be read', x.sw_release)
                  WHEN x.sw_at + x.win > clock_timestamp() THEN
                    format('%s until %s', CASE x.sw_kind WHEN 'cutover' THEN format('rollback window of %s', x.sw_release)
                                                         WHEN 'rollback' THEN format('window after the rollback of %s', x.sw_release)
                                                         ELSE format('window after the cancel of %s', x.sw_release) END,
                           to_char((x.sw_at + x.win) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')) END,
             CASE WHEN x.state <> 'RETIRED' AND x.lease_until IS NOT NULL THEN
                    format('reader lease %s until %s%s', x.lease_holder, to_char(x.lease_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                           CASE WHEN x.nleases > 1 THEN format(' (%s live leases)', x.nleases) ELSE '' END) END,
             CASE WHEN x.state <> 'RETIRED' AND x.generation = x.active_generation THEN 'it is the active generation' END,
             CASE WHEN x.state <> 'RETIRED' AND x.open_releases IS NOT NULL THEN format('open release(s) %s build into it or expect it active', x.open_releases) END,
             CASE WHEN x.state <> 'RETIRED' AND x.running IS NOT NULL THEN format('%s is running', x.running) END], NULL) AS hold
      FROM x
  )
  SELECT h.dataset, h.generation, h.state, h.sw_kind, h.sw_release, h.sw_at, h.win, h.wend,
         h.lease_until, h.lease_holder, h.nleases,
         CASE WHEN h.wend IS NULL THEN NULL ELSE greatest(h.wend, h.lease_until) END,
         h.hold, h.state <> 'RETIRED' AND cardinality(h.hold) = 0,
         h.tname, h.rel IS NOT NULL, h.attached, h.pending,
         CASE WHEN h.rel IS NULL THEN NULL ELSE pg_total_relation_size(h.rel) END
    FROM h
   ORDER BY h.dataset, h.sw_at NULLS LAST, h.generation;
END $$;

-- Retire one generation: the one writer of that state. Under the generation's row lock (FOR
-- UPDATE, which waits for every pinned-read page in flight on it: genfill.reader_lease below
-- holds FOR KEY SHARE on the row for the page's transaction), re-checks that it is retirable,
-- marks it RETIRED, moves the SUPERSEDED releases that built it to RETIRED, records a dataset
-- log `retire` row with the reason (what genfill.generation_gone tells a reader, HTTP 410),
-- and removes what only it needed: its frontier, its projector tombstones, its expired reader
-- leases. The table is the caller's next step (on an owner connection). Idempotent: a
-- generation already RETIRED answers 'already-retired'. Refusals are GFR01 naming the holds.
CREATE FUNCTION genfill.retire_generation(p_dataset text, p_generation text)
RETURNS TABLE (outcome text, from_state text, releases text[], reason text, table_name text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_state text;
  r record;
  v_releases text[];
  v_reason text;
  v_last_lease timestamptz;
BEGIN
  -- The release whose switch took readers off it first, then the generation: the order
  -- genfill.rollback_switch locks them in (release row, then the generation's update).
  PERFORM 1 FROM genfill.releases rr
   WHERE rr.id = (SELECT c.release FROM genfill.cutovers c
                   WHERE c.dataset = p_dataset AND c.from_generation = p_generation AND c.state = 'DONE'
                   ORDER BY c.switched_at DESC NULLS LAST LIMIT 1)
     FOR UPDATE;
  SELECT g.state INTO v_state FROM genfill.generations g WHERE g.dataset = p_dataset AND g.generation = p_generation FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'dataset % has no generation %', p_dataset, p_generation USING ERRCODE = 'GFN01';
  END IF;
  IF v_state = 'RETIRED' THEN
    RETURN QUERY SELECT 'already-retired'::text, v_state, ARRAY[]::text[], NULL::text, genfill.generation_table(p_dataset, p_generation);
    RETURN;
  END IF;
  SELECT * INTO r FROM genfill.generation_retention(p_dataset) gr WHERE gr.generation = p_generation;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'generation % of % is %: only a RETAINED or ABANDONED generation is retired', p_generation, p_dataset, v_state
      USING ERRCODE = 'GFR01';
  END IF;
  IF NOT r.retirable THEN
    RAISE EXCEPTION 'generation % of % is kept: %', p_generation, p_dataset, array_to_string(r.holds, '; ') USING ERRCODE = 'GFR01';
  END IF;
  SELECT max(l.expires_at) INTO v_last_lease FROM genfill.reader_leases l WHERE l.dataset = p_dataset AND l.generation = p_generation;
  v_reason := CASE r.left_by
                WHEN 'cutover' THEN format('the rollback window of %s (%s from its cutover at %s) ended at %s', r.left_by_release,
                                           r.rollback_window, to_char(r.left_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                                           to_char(r.window_end AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
                WHEN 'rollback' THEN format('%s was rolled back at %s and kept %s for its readers, until %s', r.left_by_release,
                                            to_char(r.left_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), r.rollback_window,
                                            to_char(r.window_end AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
                ELSE format('abandoned by the cancel of %s at %s, kept %s, until %s', r.left_by_release,
                            to_char(r.left_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), r.rollback_window,
                            to_char(r.window_end AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')) END
              || CASE WHEN v_last_lease IS NULL THEN '; no reader lease was taken on it'
                      ELSE format('; the last reader lease expired at %s', to_char(v_last_lease AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')) END;

  UPDATE genfill.generations g SET state = 'RETIRED' WHERE g.dataset = p_dataset AND g.generation = p_generation AND g.state = v_state;
  WITH moved AS (
    UPDATE genfill.releases rr SET state = 'RETIRED', state_changed_at = now()
     WHERE rr.dataset = p_dataset AND rr.generation = p_generation AND rr.state = 'SUPERSEDED'
    RETURNING rr.id)
  SELECT coalesce(array_agg(moved.id ORDER BY moved.id), '{}') INTO v_releases FROM moved;
  INSERT INTO genfill.release_log (release, action, from_state, to_state, reason, detail)
  SELECT u.id, 'retire', 'SUPERSEDED', 'RETIRED', v_reason, jsonb_build_object('dataset', p_dataset, 'generation', p_generation)
    FROM unnest(v_releases) AS u(id);
  DELETE FROM genfill.frontiers f WHERE f.dataset = p_dataset AND f.generation = p_generation;
  DELETE FROM genfill.projector_tombstones t WHERE t.dataset = p_dataset AND t.generation = p_generation;
  DELETE FROM genfill.reader_leases l WHERE l.dataset = p_dataset AND l.generation = p_generation AND l.expires_at <= clock_timestamp();
  INSERT INTO genfill.dataset_log (dataset, action, generation, detail)
  VALUES (p_dataset, 'retire', p_generation,
          jsonb_build_object('generation', p_generation, 'reason', v_reason, 'from', v_state, 'leftBy', r.left_by,
                             'release', r.left_by_release, 'leftAt', r.left_at, 'windowEnd', r.window_end,
                             'lastLease', v_last_lease, 'releasesRetired', to_jsonb(v_releases),
                             'table', r.table_name, 'bytes', r.bytes));
  RETURN QUERY SELECT 'retired'::text, v_state, v_releases, v_reason, r.table_name;
END $$;

-- The retired generation's table was dropped (by the service, on its owner connection).
CREATE FUNCTION genfill.record_generation_dropped(p_dataset text, p_generation text, p_detail jsonb)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM genfill.generations g WHERE g.dataset = p_dataset AND g.generation = p_generation AND g.state = 'RETIRED') THEN
    RAISE EXCEPTION 'generation % of % is not RETIRED', p_generation, p_dataset USING ERRCODE = 'GFR01';
  END IF;
  IF to_regclass(format('genfill_data.%I', genfill.generation_table(p_dataset, p_generation))) IS NOT NULL THEN
    RAISE EXCEPTION 'the table of generation % of % still exists', p_generation, p_dataset USING ERRCODE = 'GFR01';
  END IF;
  INSERT INTO genfill.dataset_log (dataset, action, generation, detail)
  VALUES (p_dataset, 'generation-dropped', p_generation, jsonb_build_object('generation', p_generation) || coalesce(p_detail, '{}'));
END $$;

-- ---------------------------------------------------------------------------------------
-- genfill.reader_lease of 0016, with one change: the generation's row is read FOR KEY SHARE,
-- held by the page's transaction. A cutover's or rollback's UPDATE of the row (FOR NO KEY
-- UPDATE) still never waits for readers; genfill.retire_generation (FOR UPDATE) waits for
-- every page in flight, and a page that waited for a retirement reads the row as retired (a
-- READ COMMITTED row lock returns the latest version) and is refused (410) before reading.
-- In 0016 an extended lease (ON CONFLICT DO UPDATE) took no lock on the row: a page could pass
-- its check, lose the race to the retirement and find its partition detached (an empty page).
CREATE OR REPLACE FUNCTION genfill.reader_lease(p_dataset text, p_generation text, p_holder text, p_ttl_ms integer)
RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_state text;
  v_gone text;
  v_expires timestamptz;
BEGIN
  IF p_holder IS NULL OR length(p_holder) NOT BETWEEN 1 AND 200 THEN
    RAISE EXCEPTION 'a reader lease needs a holder of 1 to 200 characters' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF p_ttl_ms IS NULL OR p_ttl_ms NOT BETWEEN 1000 AND 86400000 THEN
    RAISE EXCEPTION 'a reader lease lasts 1 s to 24 h, not % ms', p_ttl_ms USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM genfill.datasets d WHERE d.name = p_dataset) THEN
    RAISE EXCEPTION 'dataset % does not exist', p_dataset USING ERRCODE = 'GFN01';
  END IF;
  SELECT g.state INTO v_state FROM genfill.generations g WHERE g.dataset = p_dataset AND g.generation = p_generation FOR KEY SHARE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'dataset % has no generation %', p_dataset, p_generation USING ERRCODE = 'GFN01';
  END IF;
  v_gone := genfill.generation_gone(p_dataset, p_generation);
  IF v_gone IS NOT NULL THEN
    RAISE EXCEPTION '%', v_gone USING ERRCODE = 'GFG01', DETAIL = v_state;
  END IF;
  DELETE FROM genfill.reader_leases l
   WHERE l.dataset = p_dataset AND l.expires_at < clock_timestamp() - interval '1 hour';
  INSERT INTO genfill.reader_leases AS l (dataset, generation, holder, expires_at)
  VALUES (p_dataset, p_generation, p_holder, clock_timestamp() + p_ttl_ms * interval '1 millisecond')
  ON CONFLICT (dataset, generation, holder) DO UPDATE
     SET expires_at = EXCLUDED.expires_at, renewed_at = clock_timestamp(), principal = EXCLUDED.principal,
         taken_at = CASE WHEN l.expires_at < clock_timestamp() THEN clock_timestamp() ELSE l.taken_at END
  RETURNING l.expires_at INTO v_expires;
  RETURN v_expires;
END $$;

-- ---------------------------------------------------------------------------------------
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
CREATE FUNCTION genfill.log_horizon_parts()
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

-- The horizon: the containment-minimum of every part and of the current snapshot (with no
-- part, what every transaction finished before now is below it). Take it on the primary.
CREATE FUNCTION genfill.log_horizon() RETURNS pg_snapshot
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT genfill.containment_min(s.snapshot)
    FROM (SELECT p.snapshot FROM genfill.log_horizon_parts() p UNION ALL SELECT pg_current_snapshot()) AS s
$$;

-- Transactions in progress the horizon waits for (in its xip): a long or prepared transaction
-- holds every frontier — and so the horizon — back until it ends. SECURITY DEFINER to see
-- every session's transaction id (genfill_owner is granted pg_read_all_stats below).
CREATE FUNCTION genfill.log_horizon_transactions(p_horizon pg_snapshot)
RETURNS TABLE (kind text, xid text, pid integer, gid text, role text, application text, session_state text, started timestamptz, database text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT 'backend', a.backend_xid::text, a.pid, NULL::text, a.usename::text, a.application_name, a.state, a.xact_start, a.datname::text
    FROM pg_stat_activity a
   WHERE a.backend_xid IS NOT NULL AND a.backend_xid = ANY (ARRAY(SELECT xid(x) FROM pg_snapshot_xip(p_horizon) AS x))
  UNION ALL
  SELECT 'prepared', p.transaction::text, NULL, p.gid, p.owner::text, NULL, 'prepared', p.prepared, p.database::text
    FROM pg_prepared_xacts p
   WHERE p.transaction = ANY (ARRAY(SELECT xid(x) FROM pg_snapshot_xip(p_horizon) AS x))
   ORDER BY 8
$$;

-- Transactions of genfill's writers (superusers, members of genfill_service or genfill_owner)
-- in this database that began before p_since, and prepared transactions of theirs from before
-- it. Such a transaction may still record a snapshot it read before p_since (a release floor,
-- a carry watermark): a horizon is used for pruning only if it was taken before every one of
-- them began (packages/reconcile/src/horizon.ts).
CREATE FUNCTION genfill.log_horizon_blockers(p_since timestamptz)
RETURNS TABLE (kind text, pid integer, gid text, role text, application text, session_state text, started timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT 'backend', a.pid, NULL::text, a.usename::text, a.application_name, a.state, a.xact_start
    FROM pg_stat_activity a
   WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.xact_start < p_since
     AND a.backend_type = 'client backend'
     AND (pg_has_role(a.usesysid, 'genfill_service', 'USAGE') OR pg_has_role(a.usesysid, 'genfill_owner', 'USAGE'))
  UNION ALL
  SELECT 'prepared', NULL, p.gid, p.owner::text, NULL, 'prepared', p.prepared
    FROM pg_prepared_xacts p JOIN pg_roles o ON o.rolname = p.owner
   WHERE p.database = current_database() AND p.prepared < p_since
     AND (pg_has_role(o.oid, 'genfill_service', 'USAGE') OR pg_has_role(o.oid, 'genfill_owner', 'USAGE'))
   ORDER BY 7
$$;

-- The log's partitions with their txid ranges [from_txid, to_txid) (NULL for the DEFAULT).
CREATE FUNCTION genfill.change_log_partitions()
RETURNS TABLE (partition text, from_txid xid8, to_txid xid8, is_default boolean, rows_estimate bigint, bytes bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT c.oid::regclass::text, m[1]::xid8, m[2]::xid8, c.relpartbound IS NOT NULL AND pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT',
         greatest(c.reltuples, 0)::bigint, pg_total_relation_size(c.oid)
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    LEFT JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid), $re$FROM \('(\d+)'\) TO \('(\d+)'\)$re$) AS m ON true
   WHERE i.inhparent = 'genfill.change_log'::regclass
   ORDER BY m[1]::xid8 NULLS FIRST
$$;

-- Evidence of what pruning removed: a partition detached and dropped, or rows of the DEFAULT
-- partition deleted, and the horizon it was below.
CREATE TABLE genfill.change_log_prunes (
  id           bigserial PRIMARY KEY,
  what         text NOT NULL CHECK (what IN ('partition', 'default-rows', 'tombstones')),
  partition    text,
  from_txid    xid8,
  to_txid      xid8,
  rows         bigint NOT NULL,
  bytes        bigint,
  horizon      pg_snapshot NOT NULL,
  principal    text NOT NULL DEFAULT session_user,
  at           timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TRIGGER change_log_prunes_principal BEFORE INSERT ON genfill.change_log_prunes
  FOR EACH ROW EXECUTE FUNCTION genfill.fill_principal();
CREATE TRIGGER change_log_prunes_append_only BEFORE UPDATE OR DELETE ON genfill.change_log_prunes
  FOR EACH ROW EXECUTE FUNCTION genfill.refuse_change();

-- Rows of the DEFAULT partition below the horizon, at most p_limit of them (a bounded batch:
-- the caller repeats). The horizon used is the smaller of the caller's and the current one,
-- so no caller can delete an event still needed. Returns the rows deleted.
CREATE FUNCTION genfill.change_log_prune_default(p_horizon pg_snapshot, p_limit integer)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_h pg_snapshot := genfill.snapshot_least(p_horizon, genfill.log_horizon());
  n bigint;
BEGIN
  IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000000 THEN
    RAISE EXCEPTION 'a batch is 1 to 1,000,000 rows, not %', p_limit USING ERRCODE = 'invalid_parameter_value';
  END IF;
  WITH doomed AS (
    SELECT d.ctid FROM genfill.change_log_default d WHERE d.txid < pg_snapshot_xmin(v_h) LIMIT p_limit)
  DELETE FROM genfill.change_log_default d USING doomed WHERE d.ctid = doomed.ctid;
  GET DIAGNOSTICS n = ROW_COUNT;
  IF n > 0 THEN
    INSERT INTO genfill.change_log_prunes (what, partition, rows, horizon)
    VALUES ('default-rows', 'genfill.change_log_default', n, v_h);
  END IF;
  RETURN n;
END $$;

-- Projector tombstones below the horizon, at most p_limit: a tombstone keeps an older event of
-- its key from resurrecting the row, so it goes once no event of the key at or below its
-- revision is above the horizon — every consumer's frontier then contains them all, and none
-- applies them again. (A retired generation's tombstones went with it.)
CREATE FUNCTION genfill.compact_projector_tombstones(p_horizon pg_snapshot, p_limit integer)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_h pg_snapshot := genfill.snapshot_least(p_horizon, genfill.log_horizon());
  n bigint;
BEGIN
  IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000000 THEN
    RAISE EXCEPTION 'a batch is 1 to 1,000,000 tombstones, not %', p_limit USING ERRCODE = 'invalid_parameter_value';
  END IF;
  WITH doomed AS (
    SELECT t.dataset, t.generation, t.key
      FROM genfill.projector_tombstones t
      JOIN genfill.datasets d ON d.name = t.dataset
      JOIN genfill.captures c ON c.relid = to_regclass(d.source_table)
     WHERE NOT EXISTS (SELECT 1 FROM genfill.change_log l
                        WHERE l.source_table = c.source_table AND l.key = t.key AND l.revision <= t.revision
                          AND l.txid >= pg_snapshot_xmin(v_h))
     LIMIT p_limit)
  DELETE FROM genfill.projector_tombstones t USING doomed
   WHERE t.dataset = doomed.dataset AND t.generation = doomed.generation AND t.key = doomed.key;
  GET DIAGNOSTICS n = ROW_COUNT;
  IF n > 0 THEN
    INSERT INTO genfill.change_log_prunes (what, rows, horizon) VALUES ('tombstones', n, v_h);
  END IF;
  RETURN n;
END $$;

-- ---------------------------------------------------------------------------------------
-- Cleanup after verify (seed 004, step 10). A release is past its rollback window when it is
-- RETIRED (its generation went after the window), ROLLED_BACK (from its rollback) or
-- CANCELLED (from its cancel) and that time plus its rollbackWindow has passed. Its queue and
-- Redis keys go (the service), then genfill.record_release_cleanup removes its temporary rows
-- and logs it once; receipts, reconciliations, rounds and logs stay.
CREATE FUNCTION genfill.releases_due_for_cleanup()
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

-- Record a release's cleanup (once; false when it was already recorded) and drop its
-- temporary rows: the throttle's fencing row. p_detail says what went from Redis.
CREATE FUNCTION genfill.record_release_cleanup(p_release text, p_detail jsonb)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  n integer;
BEGIN
  PERFORM 1 FROM genfill.releases r WHERE r.id = p_release FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'release % does not exist', p_release USING ERRCODE = 'GFN01';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM genfill.releases_due_for_cleanup() d WHERE d.release = p_release) THEN
    IF EXISTS (SELECT 1 FROM genfill.release_log l WHERE l.release = p_release AND l.action = 'cleanup') THEN
      RETURN false;
    END IF;
    RAISE EXCEPTION 'release % is not past its rollback window: nothing of it is cleaned up yet', p_release USING ERRCODE = 'GFR01';
  END IF;
  DELETE FROM genfill.throttle_leases t WHERE t.release = p_release;
  GET DIAGNOSTICS n = ROW_COUNT;
  INSERT INTO genfill.release_log (release, action, detail)
  VALUES (p_release, 'cleanup', coalesce(p_detail, '{}') || jsonb_build_object('throttleLeaseRows', n));
  RETURN true;
END $$;

-- ---------------------------------------------------------------------------------------
-- The horizon's transactions and blockers are read from pg_stat_activity, which shows other
-- roles' sessions only to pg_read_all_stats. A migration run by a role that cannot grant it
-- goes on; the service then reports that it cannot see them and prunes nothing.
DO $$
BEGIN
  GRANT pg_read_all_stats TO genfill_owner;
EXCEPTION WHEN insufficient_privilege OR invalid_grant_operation THEN
  RAISE NOTICE 'could not GRANT pg_read_all_stats TO genfill_owner (%): pruning of the change log stays off until a superuser does', SQLERRM;
END $$;

ALTER TABLE genfill.change_log_prunes OWNER TO genfill_owner;
ALTER AGGREGATE genfill.containment_min(pg_snapshot) OWNER TO genfill_owner;
DO $$
DECLARE f regprocedure;
BEGIN
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
            WHERE p.pronamespace = 'genfill'::regnamespace AND p.prokind = 'f'
              AND p.proname IN ('snapshot_least', 'rollback_window', 'release_is_open', 'generation_retention', 'retire_generation',
                                'record_generation_dropped', 'reader_lease', 'log_horizon_parts', 'log_horizon', 'log_horizon_transactions',
                                'log_horizon_blockers', 'change_log_partitions', 'change_log_prune_default', 'compact_projector_tombstones',
                                'releases_due_for_cleanup', 'record_release_cleanup') LOOP
    EXECUTE format('ALTER FUNCTION %s OWNER TO genfill_owner', f);
  END LOOP;
END $$;
GRANT SELECT ON genfill.change_log_prunes TO genfill_operator, genfill_approver, genfill_reader, genfill_service;
GRANT INSERT ON genfill.change_log_prunes TO genfill_service;
GRANT USAGE ON SEQUENCE genfill.change_log_prunes_id_seq TO genfill_service;
REVOKE ALL ON FUNCTION genfill.retire_generation(text, text), genfill.record_generation_dropped(text, text, jsonb),
  genfill.log_horizon_transactions(pg_snapshot), genfill.log_horizon_blockers(timestamptz),
  genfill.change_log_prune_default(pg_snapshot, integer), genfill.compact_projector_tombstones(pg_snapshot, integer),
  genfill.record_release_cleanup(text, jsonb) FROM PUBLIC;
-- Read by status (people) and the service alike.
GRANT EXECUTE ON FUNCTION genfill.log_horizon_transactions(pg_snapshot), genfill.log_horizon_blockers(timestamptz)
  TO genfill_operator, genfill_approver, genfill_reader, genfill_service;
-- Written by the reconciler service only.
GRANT EXECUTE ON FUNCTION genfill.retire_generation(text, text), genfill.record_generation_dropped(text, text, jsonb),
  genfill.change_log_prune_default(pg_snapshot, integer), genfill.compact_projector_tombstones(pg_snapshot, integer),
  genfill.record_release_cleanup(text, jsonb) TO genfill_service;
