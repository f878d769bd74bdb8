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
CREATE OR REPLACE FUNCTION genfill.generation_retention(p_dataset text)
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
ALTER FUNCTION genfill.generation_retention(text) OWNER TO genfill_owner;
