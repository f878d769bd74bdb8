-- The locks genfill waits on (SPEC invariant 7 and "Identity and roles": nobody outside genfill
-- can take a lock genfill waits on; every wait has a timeout that ends in a named refusal).
--
-- Each lock is a heavyweight lock on a table of its own in schema genfill_lock (migration 0027),
-- one per (kind, key): the key is a dataset, a release or a source table. An advisory lock, which
-- these replace, can be taken by any login under the same key; these tables belong to
-- genfill_owner, and nobody else holds any privilege on them or USAGE on their schema, so LOCK
-- TABLE (which checks privileges before it queues) refuses every other login, which can neither
-- take nor block them. A login could reach them only through genfill.take_lock, executable by
-- genfill_service alone (the owner-side verbs call it as the owner).
--
-- The mode table, the one place it lives:
--   shared         ROW SHARE    seal: a projector batch's tail; ingress: an ingest
--   exclusive      EXCLUSIVE    seal: the seal and the rollback's seal; ingress: tombstone
--                               compaction (try-); plan, dispatch, catchup, adopt, dataset
--   try-exclusive  EXCLUSIVE NOWAIT: false at once when it is held (housekeeping, a top-up)
-- ROW SHARE does not conflict with itself and conflicts with EXCLUSIVE, which conflicts with
-- both: a shared/exclusive pair. The lock manager queues fairly — a request that conflicts with
-- a waiting one waits behind it —, so a stream of batches cannot starve the seal.
--
-- Every wait ends after p_timeout_ms, or else the session's lock_timeout, or else 10 s (the
-- fleet's default, FLEET_TIMEOUTS.lockMs), with SQLSTATE GFK01 whose message names the lock, its
-- holders and what to do (DETAIL: {lock, key, mode, timeoutMs, holders}, JSON). The session's
-- lock_timeout is restored afterwards. The lock's table is created here the first time its
-- (kind, key) is locked; a concurrent first use waits for that creation and then locks it.
--
-- Locks are transaction-scoped: they end with the caller's transaction. (A session-scoped
-- advisory lock has no LOCK TABLE equivalent; its two former users hold a transaction open on
-- a connection of their own instead: @genfill/registry withLockHeld.)

-- The lock table's name within 63 bytes: `<kind>:<key>` when it fits (readable in pg_locks),
-- else `<kind>#<md5 of the key>` — also for a key holding '#', so the two forms never meet.
CREATE OR REPLACE FUNCTION genfill.lock_relation_name(p_kind text, p_key text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN CASE WHEN octet_length(p_kind || ':' || p_key) <= 63 AND strpos(p_key, '#') = 0 THEN p_kind || ':' || p_key
            ELSE p_kind || '#' || md5(p_key) END;
ALTER FUNCTION genfill.lock_relation_name(text, text) OWNER TO genfill_owner;
COMMENT ON FUNCTION genfill.lock_relation_name(text, text) IS 'The name in schema genfill_lock of the table whose lock is genfill''s lock (kind, key)';

CREATE OR REPLACE FUNCTION genfill.take_lock(p_kind text, p_key text, p_mode text, p_timeout_ms integer DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_lockmode text := CASE p_mode WHEN 'shared' THEN 'ROW SHARE' WHEN 'exclusive' THEN 'EXCLUSIVE' WHEN 'try-exclusive' THEN 'EXCLUSIVE' END;
  v_nowait boolean := p_mode = 'try-exclusive';
  v_what text := CASE p_kind
    WHEN 'seal' THEN 'projector batches in their tail (shared), a seal or a rollback''s seal (exclusive) of this dataset'
    WHEN 'ingress' THEN 'ingests of this source (shared) or its tombstone compaction (exclusive)'
    WHEN 'plan' THEN 'the plan of this release or the start of its build'
    WHEN 'dispatch' THEN 'another dispatch of this release''s jobs (the planner, genfill plan or a worker topping up)'
    WHEN 'catchup' THEN 'a catch-up round or a repair of this release'
    WHEN 'adopt' THEN 'another adopt of this dataset'
    WHEN 'dataset' THEN 'another submission to this dataset'
  END;
  v_old text := current_setting('lock_timeout');
  v_ms integer;
  v_name text;
  v_rel regclass;
  v_holders jsonb;
BEGIN
  IF v_what IS NULL OR v_lockmode IS NULL OR p_key IS NULL OR p_key = ''
     OR (p_mode = 'shared' AND p_kind NOT IN ('seal', 'ingress')) THEN
    RAISE EXCEPTION 'no genfill lock % of % in mode %', p_kind, p_key, p_mode USING ERRCODE = '22023';
  END IF;
  v_ms := coalesce(p_timeout_ms, nullif((SELECT s.setting::integer FROM pg_settings s WHERE s.name = 'lock_timeout'), 0), 10000);
  IF v_ms <= 0 THEN
    RAISE EXCEPTION 'a lock timeout is a number of milliseconds > 0, not %', v_ms USING ERRCODE = '22023';
  END IF;
  v_name := genfill.lock_relation_name(p_kind, p_key);
  PERFORM set_config('lock_timeout', v_ms::text || 'ms', true);
  BEGIN
    IF to_regclass(format('genfill_lock.%I', v_name)) IS NULL THEN
      BEGIN
        EXECUTE format('CREATE TABLE genfill_lock.%I ()', v_name);
        EXECUTE format('COMMENT ON TABLE genfill_lock.%I IS %L', v_name, format('genfill''s %s lock of %s', p_kind, p_key));
      EXCEPTION WHEN unique_violation OR duplicate_table THEN
        NULL; -- created meanwhile by the other first user, which committed
      END;
    END IF;
    EXECUTE format('LOCK TABLE genfill_lock.%I IN %s MODE%s', v_name, v_lockmode, CASE WHEN v_nowait THEN ' NOWAIT' ELSE '' END);
  EXCEPTION WHEN lock_not_available THEN
    PERFORM set_config('lock_timeout', v_old, true);
    IF v_nowait THEN
      RETURN false;
    END IF;
    v_rel := to_regclass(format('genfill_lock.%I', v_name));
    SELECT coalesce(jsonb_agg(jsonb_build_object('pid', l.pid, 'mode', l.mode, 'application', a.application_name) ORDER BY l.pid), '[]')
      INTO v_holders
      FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
     WHERE l.locktype = 'relation' AND l.relation = v_rel AND l.granted
       AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database());
    RAISE EXCEPTION 'the % lock of % was not granted within % ms: held by %. It is held only by genfill''s own work (%), and nothing was changed by this step: run it again; a holder that stays is a stuck session (pg_terminate_backend(<pid>) ends it)',
      p_kind, p_key, v_ms,
      coalesce((SELECT string_agg(format('pid %s (%s, %s)', h->>'pid', h->>'mode', coalesce(nullif(h->>'application', ''), '?')), '; ')
                  FROM jsonb_array_elements(v_holders) h), 'no holder any more'),
      v_what
      USING ERRCODE = 'GFK01',
            DETAIL = jsonb_build_object('lock', p_kind, 'key', p_key, 'mode', v_lockmode, 'timeoutMs', v_ms, 'holders', v_holders)::text;
  END;
  PERFORM set_config('lock_timeout', v_old, true);
  RETURN true;
END $$;
ALTER FUNCTION genfill.take_lock(text, text, text, integer) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.take_lock(text, text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.take_lock(text, text, text, integer) TO genfill_service;
COMMENT ON FUNCTION genfill.take_lock(text, text, text, integer) IS 'Take genfill''s lock (kind, key) in mode shared, exclusive or try-exclusive, for the rest of the transaction; GFK01 past the timeout';
