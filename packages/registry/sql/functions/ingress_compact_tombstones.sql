-- Tombstones older than p_retention (GENFILL_TOMBSTONE_RETENTION) are dropped; the mirror
-- remembers the highest revision dropped (the watermark ingest_apply refuses at or below).
-- Skipped (NULL) while an ingest of the mirror runs: it is housekeeping, never worth a wait.
CREATE OR REPLACE FUNCTION genfill.ingress_compact_tombstones(p_dataset text, p_retention interval)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  m record;
  n bigint;
  top bigint;
BEGIN
  SELECT * INTO m FROM genfill.ingress_mirror_of(p_dataset);
  IF p_retention IS NULL OR p_retention < interval '0' THEN
    RAISE EXCEPTION 'retention must be a duration ≥ 0, not %', p_retention USING ERRCODE = 'GFR01';
  END IF;
  IF NOT pg_try_advisory_xact_lock(hashtextextended('genfill:ingress:' || m.source_table, 0)) THEN
    RETURN NULL;
  END IF;
  WITH gone AS (
    DELETE FROM genfill.ingress_keys k
     WHERE k.source_table = m.source_table AND k.deleted AND k.changed_at < now() - p_retention
    RETURNING k.revision)
  SELECT count(*), max(gone.revision) INTO n, top FROM gone;
  IF n > 0 THEN
    INSERT INTO genfill.ingress_mirrors AS im (source_table, compacted_revision, compacted_keys, compacted_at)
    VALUES (m.source_table, top, n, now())
    ON CONFLICT (source_table) DO UPDATE
      SET compacted_revision = greatest(im.compacted_revision, EXCLUDED.compacted_revision),
          compacted_keys = im.compacted_keys + EXCLUDED.compacted_keys, compacted_at = EXCLUDED.compacted_at;
    INSERT INTO genfill.dataset_log (dataset, action, detail)
    VALUES (p_dataset, 'ingress-compact', jsonb_build_object('tombstones', n, 'upToRevision', top, 'retention', p_retention::text));
  END IF;
  RETURN n;
END $$;
ALTER FUNCTION genfill.ingress_compact_tombstones(text, interval) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.ingress_compact_tombstones(text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.ingress_compact_tombstones(text, interval) TO genfill_operator, genfill_service, genfill_api;
