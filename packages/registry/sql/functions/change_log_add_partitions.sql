-- Partitions of `p_width` transaction ids from the one holding the current xid, `p_ahead`
-- of them beyond it. Idempotent; run by the planner service every round (and by
-- `genfill capture install`). A range that already has rows in the DEFAULT partition is
-- skipped (creating it would fail): those rows stay in DEFAULT until pruned.
--
-- 0009's genfill.change_log_add_partitions took the current bucket as round(xid / width) (a
-- numeric cast to bigint rounds): past the middle of a bucket it started one bucket too late, so
-- the bucket holding the current transactions never got its partition and their events went to
-- the DEFAULT partition, which pruning can only empty by batched deletes. floor() it is.
--
-- Each partition holds row images of captured sources, and SELECT on a partition is checked on
-- the partition itself: whatever default privileges the installation gives genfill_owner's new
-- tables (0006 gave people SELECT; 0025 took that back), a new partition is revoked from PUBLIC
-- and every people role here, in the transaction that makes it (migration 0025).
CREATE OR REPLACE FUNCTION genfill.change_log_add_partitions(p_ahead integer DEFAULT 4, p_width bigint DEFAULT 10000000)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  first_bucket bigint := floor(pg_current_xact_id()::text::numeric / p_width)::bigint;
  b bigint;
  made integer := 0;
  name text;
BEGIN
  IF p_width < 1000 OR p_ahead < 1 THEN
    RAISE EXCEPTION 'change_log_add_partitions: width % and ahead % must be at least 1000 and 1', p_width, p_ahead USING ERRCODE = 'GFR01';
  END IF;
  FOR b IN first_bucket .. first_bucket + p_ahead LOOP
    name := format('change_log_%s', lpad(b::text, 12, '0'));
    CONTINUE WHEN to_regclass(format('genfill.%I', name)) IS NOT NULL;
    CONTINUE WHEN EXISTS (SELECT 1 FROM genfill.change_log_default d
                           WHERE d.txid >= (b * p_width)::text::xid8 AND d.txid < ((b + 1) * p_width)::text::xid8);
    EXECUTE format('CREATE TABLE genfill.%I PARTITION OF genfill.change_log FOR VALUES FROM (%L) TO (%L)',
                   name, (b * p_width)::text, ((b + 1) * p_width)::text);
    EXECUTE format('REVOKE ALL ON genfill.%I FROM PUBLIC, genfill_operator, genfill_approver, genfill_reader, genfill_api', name);
    made := made + 1;
  END LOOP;
  RETURN made;
END $$;
ALTER FUNCTION genfill.change_log_add_partitions(integer, bigint) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.change_log_add_partitions(integer, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.change_log_add_partitions(integer, bigint) TO genfill_service;
