-- 0009_change_log: the persistent log every change of a captured source reaches (SPEC
-- "Capture rules", invariants 5, 6 and 15), the consumers' frontiers, and the registry of
-- captured tables. Add-only: never edit this file once landed; add 0010_… instead.

-- Event ids come from a sequence with CACHE 1: for one key they follow commit order because
-- the row lock orders the writers (verified; CACHE 50 inverted it across sessions).
CREATE SEQUENCE genfill.change_log_event_seq CACHE 1;

-- One row per change of one key. Range-partitioned by the writing transaction's id, so the
-- part of the log below a pruning horizon (the xmin of the oldest snapshot still needed) is
-- whole partitions: a DETACH + DROP, never a mass DELETE. Partitions are made ahead by
-- genfill.change_log_add_partitions; the DEFAULT partition is the safety net that keeps a log
-- insert from ever failing a user's write.
CREATE TABLE genfill.change_log (
  event_id      bigint NOT NULL DEFAULT nextval('genfill.change_log_event_seq'),
  -- The captured table, as its regclass text (schema-qualified): two datasets may share one.
  source_table  text NOT NULL,
  key           jsonb NOT NULL,
  op            text NOT NULL CHECK (op IN ('upsert', 'delete')),
  -- The full row image (pinned session settings): for a delete, the last image.
  row           jsonb,
  -- Capture: the event id. Ingress: the source's revision (> 0), chosen by the source.
  revision      bigint NOT NULL CHECK (revision > 0),
  txid          xid8 NOT NULL DEFAULT pg_current_xact_id(),
  logged_at     timestamptz NOT NULL DEFAULT clock_timestamp()
) PARTITION BY RANGE (txid);
CREATE TABLE genfill.change_log_default PARTITION OF genfill.change_log DEFAULT;
-- Consumers read a table's events by txid ranges; "latest per key" reads by key.
CREATE INDEX change_log_table_txid_idx ON genfill.change_log (source_table, txid);
CREATE INDEX change_log_table_key_idx ON genfill.change_log (source_table, key, revision);

-- Partitions of `p_width` transaction ids from the one holding the current xid, `p_ahead`
-- of them beyond it. Idempotent; run by the planner service every round (and by
-- `genfill capture install`). A range that already has rows in the DEFAULT partition is
-- skipped (creating it would fail): those rows stay in DEFAULT until pruned.
CREATE FUNCTION genfill.change_log_add_partitions(p_ahead integer DEFAULT 4, p_width bigint DEFAULT 10000000)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  first_bucket bigint := (pg_current_xact_id()::text::numeric / p_width)::bigint;
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
    made := made + 1;
  END LOOP;
  RETURN made;
END $$;
SELECT genfill.change_log_add_partitions();

-- What a consumer has consumed, per (dataset, generation): the snapshot S of its last batch
-- or round, updated in place in the same commit as what it applied (invariant 6). Written by
-- the projector (a later step) under the service role.
CREATE TABLE genfill.frontiers (
  dataset     text NOT NULL,
  generation  text NOT NULL,
  snapshot    pg_snapshot NOT NULL,
  updated_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (dataset, generation),
  FOREIGN KEY (dataset, generation) REFERENCES genfill.generations (dataset, generation)
);

-- Captured tables: `trigger` (statement-level AFTER triggers write the log) or `ingress` (a
-- mirror only genfill writes; ingest writes the log itself).
CREATE TABLE genfill.captures (
  source_table  text PRIMARY KEY,
  relid         oid NOT NULL UNIQUE,
  mode          text NOT NULL CHECK (mode IN ('trigger', 'ingress')),
  key_columns   text[] NOT NULL CHECK (cardinality(key_columns) > 0),
  -- Trigger mode: the columns as `attnum:name:type` when last checked; the DDL event trigger
  -- (0010) compares it after every ALTER of the table (a change blocks open releases).
  column_snapshot text[],
  -- The installing transaction: a snapshot that does not see it predates the capture.
  installed_txid xid8 NOT NULL DEFAULT pg_current_xact_id(),
  installed_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  installed_by  text NOT NULL DEFAULT session_user
);

-- Snapshot containment, exactly: B contains A (everything A sees, B sees) iff xmax(A) ≤
-- xmax(B) and every transaction in progress in B below xmax(A) is in progress in A.
CREATE FUNCTION genfill.snapshot_contains(b pg_snapshot, a pg_snapshot) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN pg_snapshot_xmax(a) <= pg_snapshot_xmax(b)
   AND NOT EXISTS (SELECT 1 FROM pg_snapshot_xip(b) AS x
                    WHERE x < pg_snapshot_xmax(a) AND NOT x = ANY (ARRAY(SELECT pg_snapshot_xip(a))));

ALTER SEQUENCE genfill.change_log_event_seq OWNER TO genfill_owner;
ALTER TABLE genfill.change_log OWNER TO genfill_owner;
ALTER TABLE genfill.change_log_default OWNER TO genfill_owner;
ALTER TABLE genfill.frontiers OWNER TO genfill_owner;
ALTER TABLE genfill.captures OWNER TO genfill_owner;
ALTER FUNCTION genfill.change_log_add_partitions(integer, bigint) OWNER TO genfill_owner;
ALTER FUNCTION genfill.snapshot_contains(pg_snapshot, pg_snapshot) OWNER TO genfill_owner;
DO $$
DECLARE t regclass;
BEGIN
  FOR t IN SELECT c.oid::regclass FROM pg_class c WHERE c.relnamespace = 'genfill'::regnamespace AND c.relname ~ '^change_log_\d+$' LOOP
    EXECUTE format('ALTER TABLE %s OWNER TO genfill_owner', t);
  END LOOP;
END $$;
REVOKE ALL ON FUNCTION genfill.change_log_add_partitions(integer, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.change_log_add_partitions(integer, bigint) TO genfill_service;
GRANT SELECT ON genfill.change_log, genfill.frontiers, genfill.captures
  TO genfill_operator, genfill_approver, genfill_reader, genfill_service;
GRANT INSERT, UPDATE ON genfill.frontiers TO genfill_service;
