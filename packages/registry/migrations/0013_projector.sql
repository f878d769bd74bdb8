-- 0013_projector: the live writer of a dataset (SPEC invariants 6 and 7, the projector row of
-- "Parts"), the seal that fences it, and the records both keep. Add-only: never edit this file
-- once landed; add 0014_… instead.
--
-- The projector (packages/projector) applies change-log events to the active generation in
-- batches: one REPEATABLE READ transaction takes S, applies the latest event per key visible
-- in S and not in the frontier F, then runs a short fenced tail — pg_advisory_xact_lock_shared
-- (genfill.seal_key(dataset)), SELECT … FOR SHARE of the dataset row (epoch, OPEN, active
-- generation) and of its lease row (token), and the in-place update of the frontier row from F
-- to S. The seal takes pg_advisory_xact_lock(seal_key) — queued behind batches already in
-- their tail, ahead of every later one — CASes OPEN → SEALED, and only then reads the barrier B
-- = the committed frontier. So a batch racing the seal either commits inside B or, finding
-- the dataset row changed under its snapshot, fails its FOR SHARE and writes nothing.
-- The dataset row stays cold: only seal, unseal and cutover update it (each update fails every
-- batch in flight, which is the point for them and a stall for anything else).

-- The advisory lock key of a dataset's seal.
CREATE FUNCTION genfill.seal_key(p_dataset text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN hashtextextended('genfill:seal:' || p_dataset, 0);

-- Unseal returns a release to the state it was sealed from; the seed order seals at BUILT.
ALTER TABLE genfill.release_transitions DISABLE TRIGGER release_transitions_frozen;
INSERT INTO genfill.release_transitions (from_state, to_state) VALUES ('INGRESS_SEALED', 'BUILT'), ('CAUGHT_UP', 'BUILT')
  ON CONFLICT DO NOTHING;
ALTER TABLE genfill.release_transitions ENABLE TRIGGER release_transitions_frozen;

-- Every ingress epoch of a dataset: which generation it wrote, when it opened, and — once
-- sealed — the barrier B, by whom, for which release and from which release state.
CREATE TABLE genfill.epochs (
  dataset      text NOT NULL REFERENCES genfill.datasets (name),
  epoch        bigint NOT NULL CHECK (epoch >= 1),
  generation   text NOT NULL,
  opened_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
  opened_by    text NOT NULL DEFAULT session_user,
  -- Why it opened: adopt, unseal (of release …), cutover, rollback, or the migration.
  opened_for   text NOT NULL,
  release      text REFERENCES genfill.releases (id),
  sealed_from  text,
  sealed_at    timestamptz,
  sealed_by    text,
  barrier      pg_snapshot,
  closed_at    timestamptz,
  PRIMARY KEY (dataset, epoch),
  FOREIGN KEY (dataset, generation) REFERENCES genfill.generations (dataset, generation),
  CHECK ((sealed_at IS NULL) = (barrier IS NULL))
);
CREATE TRIGGER epochs_no_truncate BEFORE TRUNCATE ON genfill.epochs
  FOR EACH STATEMENT EXECUTE FUNCTION genfill.refuse_change();
INSERT INTO genfill.epochs (dataset, epoch, generation, opened_for)
SELECT d.name, d.ingress_epoch, d.active_generation, 'migration 0013'
  FROM genfill.datasets d WHERE d.active_generation IS NOT NULL;

-- One projector per dataset: the holder and its token. Renewed by the holder between its
-- batches (never during one: a renewal would fail the holder's own batch in flight); taken
-- over, with a new token, only once expired. A batch checks its token FOR SHARE in its tail:
-- a zombie's late commit either lands before the takeover (which waits for its lock) or finds
-- the row changed and writes nothing.
CREATE TABLE genfill.projector_leases (
  dataset      text PRIMARY KEY REFERENCES genfill.datasets (name),
  holder       text NOT NULL,
  token        bigint NOT NULL,
  acquired_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  expires_at   timestamptz NOT NULL
);

-- The lease: a new token when taken — expired, or p_holder's own (a restarted holder with the
-- same id fences its earlier self) —, NULL while another holder's is current.
CREATE FUNCTION genfill.projector_acquire(p_dataset text, p_holder text, p_ttl_ms integer)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_token bigint;
BEGIN
  INSERT INTO genfill.projector_leases AS l (dataset, holder, token, expires_at)
  VALUES (p_dataset, p_holder, 1, clock_timestamp() + p_ttl_ms * interval '1 millisecond')
  ON CONFLICT (dataset) DO UPDATE
     SET holder = EXCLUDED.holder, token = l.token + 1, acquired_at = clock_timestamp(), expires_at = EXCLUDED.expires_at
   WHERE l.expires_at < clock_timestamp() OR l.holder = EXCLUDED.holder
  RETURNING l.token INTO v_token;
  RETURN v_token;
END $$;

-- Extend a held lease; false when it is no longer p_holder's under p_token.
CREATE FUNCTION genfill.projector_renew(p_dataset text, p_holder text, p_token bigint, p_ttl_ms integer)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  UPDATE genfill.projector_leases l SET expires_at = clock_timestamp() + p_ttl_ms * interval '1 millisecond'
   WHERE l.dataset = p_dataset AND l.holder = p_holder AND l.token = p_token;
  RETURN FOUND;
END $$;

-- Let the lease go at shutdown, so the next holder need not wait for it to expire.
CREATE FUNCTION genfill.projector_release(p_dataset text, p_holder text, p_token bigint)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  UPDATE genfill.projector_leases l SET expires_at = clock_timestamp() - interval '1 millisecond'
   WHERE l.dataset = p_dataset AND l.holder = p_holder AND l.token = p_token;
  RETURN FOUND;
END $$;

-- Keys the projector deleted (or the transform filtered) that its generation held no row for:
-- nothing to flag, no image to keep, yet an older event of the key must not resurrect it. The
-- version check of an insert consults this table; a key's later live row supersedes it.
CREATE TABLE genfill.projector_tombstones (
  dataset     text NOT NULL,
  generation  text NOT NULL,
  key         jsonb NOT NULL,
  revision    bigint NOT NULL,
  at          timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (dataset, generation, key),
  FOREIGN KEY (dataset, generation) REFERENCES genfill.generations (dataset, generation)
);

-- A poison event stops the projector of its dataset (never a silent skip): the key, the event
-- and the error, until an operator quarantines the key (genfill.quarantine_key).
CREATE TABLE genfill.projector_stops (
  dataset     text PRIMARY KEY REFERENCES genfill.datasets (name),
  generation  text NOT NULL,
  key         jsonb NOT NULL,
  event_id    bigint NOT NULL,
  revision    bigint NOT NULL,
  error       text NOT NULL,
  at          timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Quarantined keys: the projector skips their events up to `up_to_revision`, and the
-- reconciler reads this table (a quarantined key is a known, recorded difference).
CREATE TABLE genfill.quarantined_keys (
  id              bigserial PRIMARY KEY,
  dataset         text NOT NULL REFERENCES genfill.datasets (name),
  key             jsonb NOT NULL,
  up_to_revision  bigint NOT NULL,
  reason          text NOT NULL CHECK (length(trim(reason)) > 0),
  stopped_by      jsonb,
  principal       text NOT NULL DEFAULT session_user,
  at              timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX quarantined_keys_dataset_idx ON genfill.quarantined_keys (dataset, key);
CREATE TRIGGER quarantined_keys_principal BEFORE INSERT ON genfill.quarantined_keys
  FOR EACH ROW EXECUTE FUNCTION genfill.fill_principal();
CREATE TRIGGER quarantined_keys_append_only BEFORE UPDATE OR DELETE ON genfill.quarantined_keys
  FOR EACH ROW EXECUTE FUNCTION genfill.refuse_change();

-- What a dataset's transform reads besides its source (e.g. public.tax_rates): captured, and
-- a change marks the dataset stale (genfill.dataset_flags).
CREATE TABLE genfill.dataset_dependencies (
  dataset   text NOT NULL REFERENCES genfill.datasets (name),
  relation  text NOT NULL,
  PRIMARY KEY (dataset, relation)
);

-- Flags of a dataset kept off its row (which stays cold): DEPENDENCY_STALE since a captured
-- dependency changed (a rebuild release clears it), and the adopt ranges not yet compared with
-- the transform (a drift check, `genfill reconcile --dataset`, clears it).
CREATE TABLE genfill.dataset_flags (
  dataset                 text PRIMARY KEY REFERENCES genfill.datasets (name),
  dependency_stale_since  timestamptz,
  stale_relations         text[] NOT NULL DEFAULT '{}',
  adopt_unverified        boolean NOT NULL DEFAULT false,
  adopt_snapshot          pg_snapshot,
  drift_checked_at        timestamptz,
  drift_result            jsonb
);

-- The operator's way past a poison event: record the key (up to its latest logged revision),
-- clear the stop. The projector skips those events and says so in every status.
CREATE FUNCTION genfill.quarantine_key(p_dataset text, p_key jsonb, p_reason text)
RETURNS TABLE (id bigint, up_to_revision bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  ds record;
  stop record;
  v_top bigint;
  v_id bigint;
BEGIN
  SELECT d.name, d.source_table INTO ds FROM genfill.datasets d WHERE d.name = p_dataset;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'dataset % does not exist', p_dataset USING ERRCODE = 'GFN01';
  END IF;
  IF p_reason IS NULL OR length(trim(p_reason)) = 0 THEN
    RAISE EXCEPTION 'quarantining a key needs a reason (--reason): it is recorded and read by the reconciler' USING ERRCODE = 'GFR01';
  END IF;
  IF jsonb_typeof(p_key) IS DISTINCT FROM 'object' THEN
    RAISE EXCEPTION 'the key must be a JSON object of the key columns, e.g. {"order_id": 7}' USING ERRCODE = 'GFR01';
  END IF;
  SELECT max(l.revision) INTO v_top FROM genfill.change_log l
   WHERE l.source_table = (SELECT c.source_table FROM genfill.captures c WHERE c.relid = to_regclass(ds.source_table)) AND l.key = p_key;
  IF v_top IS NULL THEN
    RAISE EXCEPTION 'the change log holds no event of % for key %: nothing to quarantine', ds.source_table, p_key USING ERRCODE = 'GFR01';
  END IF;
  SELECT * INTO stop FROM genfill.projector_stops s WHERE s.dataset = p_dataset;
  INSERT INTO genfill.quarantined_keys (dataset, key, up_to_revision, reason, stopped_by)
  VALUES (p_dataset, p_key, v_top, p_reason, CASE WHEN stop.dataset IS NULL THEN NULL ELSE to_jsonb(stop) END)
  RETURNING quarantined_keys.id INTO v_id;
  DELETE FROM genfill.projector_stops s WHERE s.dataset = p_dataset AND s.key = p_key;
  INSERT INTO genfill.dataset_log (dataset, action, detail)
  VALUES (p_dataset, 'quarantine-key', jsonb_build_object('key', p_key, 'upToRevision', v_top, 'reason', p_reason, 'quarantine', v_id));
  RETURN QUERY SELECT v_id, v_top;
END $$;

-- A captured dependency changed: flag the dataset and move its open releases to
-- RECONCILIATION_REQUIRED (their pinned dependency hashes no longer hold). Called by the
-- projector in its own short transaction.
CREATE FUNCTION genfill.mark_dependency_stale(p_dataset text, p_relations text[])
RETURNS text[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  moved text[] := '{}';
BEGIN
  INSERT INTO genfill.dataset_flags AS f (dataset, dependency_stale_since, stale_relations)
  VALUES (p_dataset, clock_timestamp(), p_relations)
  ON CONFLICT (dataset) DO UPDATE
     SET dependency_stale_since = coalesce(f.dependency_stale_since, EXCLUDED.dependency_stale_since),
         stale_relations = ARRAY(SELECT DISTINCT unnest(f.stale_relations || EXCLUDED.stale_relations) ORDER BY 1);
  FOR rel IN SELECT r.id, r.state FROM genfill.releases r
              WHERE r.dataset = p_dataset
                AND EXISTS (SELECT 1 FROM genfill.release_transitions t WHERE t.from_state = r.state AND t.to_state = 'RECONCILIATION_REQUIRED')
              ORDER BY r.id FOR UPDATE LOOP
    UPDATE genfill.releases r SET state = 'RECONCILIATION_REQUIRED', state_changed_at = now() WHERE r.id = rel.id AND r.state = rel.state;
    INSERT INTO genfill.release_log (release, action, from_state, to_state, reason, detail)
    VALUES (rel.id, 'dependency-changed', rel.state, 'RECONCILIATION_REQUIRED', 'DEPENDENCY_STALE',
            jsonb_build_object('dataset', p_dataset, 'relations', to_jsonb(p_relations)));
    moved := moved || rel.id;
  END LOOP;
  INSERT INTO genfill.dataset_log (dataset, action, detail)
  VALUES (p_dataset, 'dependency-stale', jsonb_build_object('relations', to_jsonb(p_relations), 'releases', to_jsonb(moved)));
  RETURN moved;
END $$;

-- ---------------------------------------------------------------------------------------
-- The seal (invariant 7), executed by the projector service for `genfill seal <release>`.
-- Must run in READ COMMITTED: each statement below takes a new snapshot, so B is read after
-- the lock and the CAS, never from an earlier snapshot (a REPEATABLE READ seal read a barrier
-- one batch stale). Raises 55P03 (lock_not_available) past p_lock_timeout_ms — the caller
-- retries with backoff and names the holder —, GFL01 when B does not contain every watermark
-- of the release (DETAIL: the partitions, as JSON; the caller waits for the projector), GFR01
-- for a precondition.
CREATE FUNCTION genfill.seal_epoch(p_release text, p_lock_timeout_ms integer)
RETURNS TABLE (dataset text, epoch bigint, generation text, barrier text, sealed_from text, lock_wait_ms numeric)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  ds record;
  v_unbuilt bigint;
  v_barrier pg_snapshot;
  v_behind jsonb;
  v_other text;
  v_started timestamptz;
  v_waited numeric;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'seal runs in READ COMMITTED (its barrier must come from a statement after the lock), not %', current_setting('transaction_isolation')
      USING ERRCODE = 'GFR01';
  END IF;
  SELECT r.id, r.dataset, r.state, r.expected_active, r.generation INTO rel FROM genfill.releases r WHERE r.id = p_release;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'release % does not exist', p_release USING ERRCODE = 'GFN01';
  END IF;
  IF rel.state NOT IN ('BUILT', 'APPROVED') THEN
    RAISE EXCEPTION 'release % is %: seal needs every partition built (BUILT, or APPROVED for the short freeze)', p_release, rel.state
      USING ERRCODE = 'GFR01';
  END IF;
  SELECT count(*) INTO v_unbuilt FROM genfill.partitions p WHERE p.release = p_release AND p.status <> 'BUILT';
  IF v_unbuilt > 0 THEN
    RAISE EXCEPTION 'release %: % partitions are not built', p_release, v_unbuilt USING ERRCODE = 'GFR01';
  END IF;
  SELECT d.name, d.active_generation, d.ingress_state, d.ingress_epoch INTO ds FROM genfill.datasets d WHERE d.name = rel.dataset;
  IF ds.active_generation IS NULL THEN
    RAISE EXCEPTION 'dataset % has no active generation: there is no live writer to seal', rel.dataset USING ERRCODE = 'GFR01';
  END IF;
  IF rel.expected_active IS DISTINCT FROM ds.active_generation THEN
    RAISE EXCEPTION 'release % expects % to be active, but % is: it cannot be sealed against this generation', p_release,
      coalesce(rel.expected_active, 'no generation'), ds.active_generation USING ERRCODE = 'GFR01';
  END IF;
  IF ds.ingress_state <> 'OPEN' THEN
    SELECT e.release INTO v_other FROM genfill.epochs e WHERE e.dataset = rel.dataset AND e.epoch = ds.ingress_epoch;
    RAISE EXCEPTION 'dataset % is already sealed (epoch %, by release %): one release per dataset is sealed at a time; `genfill unseal %` first',
      rel.dataset, ds.ingress_epoch, coalesce(v_other, '?'), coalesce(v_other, '<release>') USING ERRCODE = 'GFR01';
  END IF;

  PERFORM set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
  v_started := clock_timestamp();
  PERFORM pg_advisory_xact_lock(genfill.seal_key(rel.dataset));
  v_waited := round((extract(epoch FROM clock_timestamp() - v_started) * 1000)::numeric, 1);
  PERFORM set_config('lock_timeout', '0', true);

  UPDATE genfill.datasets d SET ingress_state = 'SEALED'
   WHERE d.name = rel.dataset AND d.ingress_state = 'OPEN' AND d.ingress_epoch = ds.ingress_epoch AND d.active_generation = ds.active_generation;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'dataset % changed while the seal waited for its lock; run seal again', rel.dataset USING ERRCODE = 'GFR01';
  END IF;
  -- A statement after the lock and the CAS: the committed frontier, B.
  SELECT f.snapshot INTO v_barrier FROM genfill.frontiers f WHERE f.dataset = rel.dataset AND f.generation = ds.active_generation;
  IF v_barrier IS NULL THEN
    RAISE EXCEPTION 'dataset % has no projector frontier for %: adopt with capture (or run `genfill projector`) first', rel.dataset, ds.active_generation
      USING ERRCODE = 'GFR01';
  END IF;
  SELECT jsonb_agg(jsonb_build_object('partition', w.partition, 'watermark', w.watermark) ORDER BY w.partition) INTO v_behind
    FROM (SELECT DISTINCT rc.partition, rc.watermark::text AS watermark FROM genfill.receipts rc WHERE rc.release = p_release
           AND NOT genfill.snapshot_contains(v_barrier, rc.watermark)) w;
  IF v_behind IS NOT NULL THEN
    RAISE EXCEPTION 'the projector frontier % of % does not yet contain the watermarks of % partitions', v_barrier, rel.dataset, jsonb_array_length(v_behind)
      USING ERRCODE = 'GFL01', DETAIL = v_behind::text;
  END IF;

  UPDATE genfill.epochs e SET release = p_release, sealed_from = rel.state, sealed_at = clock_timestamp(),
         sealed_by = genfill.current_principal(), barrier = v_barrier
   WHERE e.dataset = rel.dataset AND e.epoch = ds.ingress_epoch;
  IF NOT FOUND THEN
    INSERT INTO genfill.epochs (dataset, epoch, generation, opened_for, release, sealed_from, sealed_at, sealed_by, barrier)
    VALUES (rel.dataset, ds.ingress_epoch, ds.active_generation, 'unrecorded', p_release, rel.state, clock_timestamp(), genfill.current_principal(), v_barrier);
  END IF;
  UPDATE genfill.releases r SET state = 'INGRESS_SEALED', state_changed_at = now() WHERE r.id = p_release AND r.state = rel.state;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'release % changed state while sealing; run seal again', p_release USING ERRCODE = 'GFR01';
  END IF;
  INSERT INTO genfill.release_log (release, action, from_state, to_state, detail)
  VALUES (p_release, 'seal', rel.state, 'INGRESS_SEALED',
          jsonb_build_object('dataset', rel.dataset, 'epoch', ds.ingress_epoch, 'barrier', v_barrier::text, 'lockWaitMs', v_waited));
  RETURN QUERY SELECT rel.dataset, ds.ingress_epoch, ds.active_generation, v_barrier::text, rel.state, v_waited;
END $$;

-- `genfill unseal <release>`: ingress reopens under a new epoch E+1 on the same generation,
-- the release goes back to the state it was sealed from. Writers of epoch E stay fenced.
CREATE FUNCTION genfill.unseal_epoch(p_release text, p_reason text)
RETURNS TABLE (dataset text, epoch bigint, state text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  ds record;
  ep record;
BEGIN
  SELECT r.id, r.dataset, r.state INTO rel FROM genfill.releases r WHERE r.id = p_release FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'release % does not exist', p_release USING ERRCODE = 'GFN01';
  END IF;
  SELECT d.name, d.ingress_state, d.ingress_epoch, d.active_generation INTO ds FROM genfill.datasets d WHERE d.name = rel.dataset FOR UPDATE;
  SELECT * INTO ep FROM genfill.epochs e WHERE e.dataset = rel.dataset AND e.epoch = ds.ingress_epoch;
  IF ds.ingress_state <> 'SEALED' OR ep.release IS DISTINCT FROM p_release THEN
    RAISE EXCEPTION 'dataset % is not sealed by release % (ingress %, epoch %)%', rel.dataset, p_release, ds.ingress_state, ds.ingress_epoch,
      CASE WHEN ep.release IS NOT NULL AND ep.release <> p_release THEN format(', sealed by %s', ep.release) ELSE '' END
      USING ERRCODE = 'GFR01';
  END IF;
  IF rel.state NOT IN ('INGRESS_SEALED', 'CAUGHT_UP') THEN
    RAISE EXCEPTION 'release % is %: only a sealed (or caught-up) release is unsealed', p_release, rel.state USING ERRCODE = 'GFR01';
  END IF;
  UPDATE genfill.epochs e SET closed_at = clock_timestamp() WHERE e.dataset = rel.dataset AND e.epoch = ds.ingress_epoch;
  UPDATE genfill.datasets d SET ingress_state = 'OPEN', ingress_epoch = ds.ingress_epoch + 1 WHERE d.name = rel.dataset;
  INSERT INTO genfill.epochs (dataset, epoch, generation, opened_for, opened_by)
  VALUES (rel.dataset, ds.ingress_epoch + 1, ds.active_generation, format('unseal of %s', p_release), genfill.current_principal());
  UPDATE genfill.releases r SET state = ep.sealed_from, state_changed_at = now() WHERE r.id = p_release AND r.state = rel.state;
  INSERT INTO genfill.release_log (release, action, from_state, to_state, reason, detail)
  VALUES (p_release, 'unseal', rel.state, ep.sealed_from, p_reason,
          jsonb_build_object('dataset', rel.dataset, 'closedEpoch', ds.ingress_epoch, 'epoch', ds.ingress_epoch + 1));
  RETURN QUERY SELECT rel.dataset, ds.ingress_epoch + 1, ep.sealed_from;
END $$;

-- Requests gain the kinds the projector service executes (catchup: migration 0014's rounds).
ALTER TABLE genfill.requests DROP CONSTRAINT requests_kind_check;
ALTER TABLE genfill.requests ADD CONSTRAINT requests_kind_check CHECK (kind IN ('plan', 'reconcile', 'repair', 'seal', 'unseal', 'catchup'));
CREATE OR REPLACE FUNCTION genfill.request(p_kind text, p_release text, p_args jsonb)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_id bigint;
BEGIN
  IF p_kind NOT IN ('plan', 'reconcile', 'repair', 'seal', 'unseal', 'catchup') THEN
    RAISE EXCEPTION 'unknown request kind %', p_kind USING ERRCODE = 'GFR01';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM genfill.releases r WHERE r.id = p_release) THEN
    RAISE EXCEPTION 'release % does not exist: submit it with `genfill release submit <file>`', p_release USING ERRCODE = 'GFN01';
  END IF;
  INSERT INTO genfill.requests (kind, release, args) VALUES (p_kind, p_release, coalesce(p_args, '{}')) RETURNING id INTO v_id;
  PERFORM pg_notify('genfill_requests', p_kind);
  RETURN v_id;
END $$;

-- Ownership, and who may call what.
ALTER TABLE genfill.epochs OWNER TO genfill_owner;
ALTER TABLE genfill.projector_leases OWNER TO genfill_owner;
ALTER TABLE genfill.projector_tombstones OWNER TO genfill_owner;
ALTER TABLE genfill.projector_stops OWNER TO genfill_owner;
ALTER TABLE genfill.quarantined_keys OWNER TO genfill_owner;
ALTER TABLE genfill.dataset_dependencies OWNER TO genfill_owner;
ALTER TABLE genfill.dataset_flags OWNER TO genfill_owner;
ALTER FUNCTION genfill.seal_key(text) OWNER TO genfill_owner;
ALTER FUNCTION genfill.projector_acquire(text, text, integer) OWNER TO genfill_owner;
ALTER FUNCTION genfill.projector_renew(text, text, bigint, integer) OWNER TO genfill_owner;
ALTER FUNCTION genfill.projector_release(text, text, bigint) OWNER TO genfill_owner;
ALTER FUNCTION genfill.quarantine_key(text, jsonb, text) OWNER TO genfill_owner;
ALTER FUNCTION genfill.mark_dependency_stale(text, text[]) OWNER TO genfill_owner;
ALTER FUNCTION genfill.seal_epoch(text, integer) OWNER TO genfill_owner;
ALTER FUNCTION genfill.unseal_epoch(text, text) OWNER TO genfill_owner;
ALTER FUNCTION genfill.request(text, text, jsonb) OWNER TO genfill_owner;
GRANT SELECT ON genfill.epochs, genfill.projector_leases, genfill.projector_tombstones, genfill.projector_stops, genfill.quarantined_keys,
  genfill.dataset_dependencies, genfill.dataset_flags TO genfill_operator, genfill_approver, genfill_reader, genfill_service;
-- The projector's own writes: its tombstones, its stops, the dependencies and flags adopt records.
GRANT INSERT, UPDATE, DELETE ON genfill.projector_tombstones, genfill.projector_stops TO genfill_service;
GRANT INSERT, UPDATE ON genfill.dataset_dependencies, genfill.dataset_flags, genfill.epochs TO genfill_service;
REVOKE ALL ON FUNCTION genfill.projector_acquire(text, text, integer), genfill.projector_renew(text, text, bigint, integer),
  genfill.projector_release(text, text, bigint), genfill.quarantine_key(text, jsonb, text), genfill.mark_dependency_stale(text, text[]),
  genfill.seal_epoch(text, integer), genfill.unseal_epoch(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.projector_acquire(text, text, integer), genfill.projector_renew(text, text, bigint, integer),
  genfill.projector_release(text, text, bigint), genfill.mark_dependency_stale(text, text[]),
  genfill.seal_epoch(text, integer), genfill.unseal_epoch(text, text) TO genfill_service;
GRANT EXECUTE ON FUNCTION genfill.quarantine_key(text, jsonb, text) TO genfill_operator, genfill_service;
