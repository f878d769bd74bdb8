-- Drop the mirror's tombstones older than the owner's retention (the setting
-- ingress.tombstone_retention, genfill.settings; the caller's argument before migration 0026);
-- the mirror remembers the highest revision dropped (the watermark ingest_apply refuses unseen
-- keys at or below). Skipped (NULL) while an ingest of the mirror runs: it is housekeeping,
-- never worth a wait.
--
-- The watermark refuses every key genfill holds nothing for at or below it, so one event at an
-- outlandish revision (a delete at 9e18) must not raise it: before 0026 it did, for good, once
-- its tombstone was dropped. Revisions are the source's; what says the source has moved past a
-- revision is a later delete that reached it. So a tombstone that would raise the watermark is
-- dropped only when a tombstone changed strictly after it (a later ingest; one still kept) has
-- a revision at least as high: the watermark never exceeds the revisions of the tombstones
-- retention keeps, and an event alone never moves it. A tombstone no later delete has passed
-- stays (it costs a row). Those at or below the watermark go as before.
CREATE OR REPLACE FUNCTION genfill.ingress_compact_tombstones(p_dataset text)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  m record;
  n bigint;
  top bigint;
  v_retention interval;
  v_cutoff timestamptz;
  v_watermark bigint;
  v_youngest timestamptz;
  v_cap bigint;
BEGIN
  SELECT * INTO m FROM genfill.ingress_mirror_of(p_dataset);
  v_retention := genfill.setting('ingress.tombstone_retention')::interval;
  IF NOT genfill.take_lock('ingress', m.source_table, 'try-exclusive') THEN
    RETURN NULL;
  END IF;
  v_cutoff := now() - v_retention;
  SELECT coalesce(im.compacted_revision, 0) INTO v_watermark FROM genfill.ingress_mirrors im WHERE im.source_table = m.source_table;
  v_watermark := coalesce(v_watermark, 0);
  -- The cap: the highest revision of the tombstones changed after the youngest one that would
  -- raise the watermark (every one of those is later than each candidate: a conservative cap).
  SELECT max(k.changed_at) INTO v_youngest FROM genfill.ingress_keys k
   WHERE k.source_table = m.source_table AND k.deleted AND k.changed_at < v_cutoff AND k.revision > v_watermark;
  IF v_youngest IS NOT NULL THEN
    SELECT max(k.revision) INTO v_cap FROM genfill.ingress_keys k
     WHERE k.source_table = m.source_table AND k.deleted AND k.changed_at > v_youngest;
  END IF;
  WITH gone AS (
    DELETE FROM genfill.ingress_keys k
     WHERE k.source_table = m.source_table AND k.deleted AND k.changed_at < v_cutoff
       AND (k.revision <= v_watermark OR k.revision <= v_cap)
    RETURNING k.revision)
  SELECT count(*), max(gone.revision) INTO n, top FROM gone;
  IF n > 0 THEN
    INSERT INTO genfill.ingress_mirrors AS im (source_table, compacted_revision, compacted_keys, compacted_at)
    VALUES (m.source_table, top, n, now())
    ON CONFLICT (source_table) DO UPDATE
      SET compacted_revision = greatest(im.compacted_revision, EXCLUDED.compacted_revision),
          compacted_keys = im.compacted_keys + EXCLUDED.compacted_keys, compacted_at = EXCLUDED.compacted_at;
    INSERT INTO genfill.dataset_log (dataset, action, detail)
    VALUES (p_dataset, 'ingress-compact', jsonb_build_object('tombstones', n, 'upToRevision', top, 'retention', v_retention::text, 'cap', v_cap));
  END IF;
  RETURN n;
END $$;
ALTER FUNCTION genfill.ingress_compact_tombstones(text) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.ingress_compact_tombstones(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.ingress_compact_tombstones(text) TO genfill_operator, genfill_service, genfill_api;
