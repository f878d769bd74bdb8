-- The end of a build: under the release row lock, fence the partition on its attempt, insert
-- the receipt, and move the release BUILDING → BUILT when this receipt completes the
-- manifest — one statement, so the release row lock is held for one round trip and a worker
-- that stalls (SIGSTOP, a partition) cannot hold it across several. The rows were inserted
-- earlier in the same transaction; a refusal here rolls them back.
-- Raises GFR01 when the release is no longer BUILDING and GFS01 when the attempt is stale.
--
-- `SET enable_seqscan = off` (0020_unbuilt): the completion check `NOT EXISTS (… status <>
-- 'BUILT')` runs under the release row lock, so every commit of the fleet waits for it; the
-- partial index partitions_unbuilt answers it in O(log n) whatever the release's size. The
-- planner's statistics lag a build (autoanalyze sees "most partitions unbuilt" long after most
-- are built), and with them it prefers a sequential scan that stops at the first unbuilt row it
-- meets — the walk over every built row the index exists to avoid. The other statements look
-- rows up by primary key either way.
CREATE OR REPLACE FUNCTION genfill.commit_partition(
  p_release text, p_partition text, p_attempt integer, p_kind text, p_release_digest text, p_transform_digest text,
  p_watermark pg_snapshot, p_dependency_hashes jsonb, p_rows_in bigint, p_rows_out bigint, p_conserved jsonb,
  p_key_root numeric, p_row_root numeric, p_timings jsonb, p_supersedes bigint)
RETURNS TABLE (receipt_id bigint, release_built boolean)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET enable_seqscan = off AS $$
DECLARE
  v_state text;
  v_receipt bigint;
  v_built boolean := false;
  v_started timestamptz := clock_timestamp();
  v_fence numeric;
BEGIN
  -- The release row first, then the partition row: the order claims take them in.
  SELECT r.state INTO v_state FROM genfill.releases r WHERE r.id = p_release FOR NO KEY UPDATE;
  IF v_state IS DISTINCT FROM 'BUILDING' THEN
    RAISE EXCEPTION 'release % is %, no longer BUILDING: partition % wrote nothing', p_release, coalesce(v_state, 'gone'), p_partition
      USING ERRCODE = 'GFR01';
  END IF;
  UPDATE genfill.partitions p
     SET status = 'BUILT', lease_expires_at = NULL, reason = NULL, evidence = NULL, repair_pending = false, updated_at = now()
   WHERE p.release = p_release AND p.id = p_partition AND p.attempt = p_attempt AND p.status = 'RUNNING';
  IF NOT FOUND THEN
    RAISE EXCEPTION 'partition % of % is no longer at attempt %', p_partition, p_release, p_attempt USING ERRCODE = 'GFS01';
  END IF;
  -- The receipt's timings gain the fence: the lock wait and the fenced update, in ms.
  v_fence := round((extract(epoch FROM clock_timestamp() - v_started) * 1000)::numeric, 1);
  INSERT INTO genfill.receipts (release, partition, kind, attempt, release_digest, transform_digest, watermark,
    dependency_hashes, rows_in, rows_out, conserved_sums, key_root, row_root, timings, supersedes)
  VALUES (p_release, p_partition, p_kind, p_attempt, p_release_digest, p_transform_digest, p_watermark,
    p_dependency_hashes, p_rows_in, p_rows_out, p_conserved, p_key_root, p_row_root,
    p_timings || jsonb_build_object('fence', v_fence, 'total', coalesce((p_timings->>'total')::numeric, 0) + v_fence), p_supersedes)
  RETURNING id INTO v_receipt;
  UPDATE genfill.releases r SET state = 'BUILT', state_changed_at = now()
   WHERE r.id = p_release AND r.state = 'BUILDING'
     AND NOT EXISTS (SELECT 1 FROM genfill.partitions q WHERE q.release = p_release AND q.status <> 'BUILT');
  IF FOUND THEN
    v_built := true;
    INSERT INTO genfill.release_log (release, action, from_state, to_state, detail)
    VALUES (p_release, 'built', 'BUILDING', 'BUILT', jsonb_build_object('lastPartition', p_partition, 'receipt', v_receipt));
  END IF;
  RETURN QUERY SELECT v_receipt, v_built;
END $$;
ALTER FUNCTION genfill.commit_partition(text, text, integer, text, text, text, pg_snapshot, jsonb, bigint, bigint, jsonb, numeric, numeric, jsonb, bigint) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.commit_partition(text, text, integer, text, text, text, pg_snapshot, jsonb, bigint, bigint, jsonb, numeric, numeric, jsonb, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.commit_partition(text, text, integer, text, text, text, pg_snapshot, jsonb, bigint, bigint, jsonb, numeric, numeric, jsonb, bigint) TO genfill_service;
