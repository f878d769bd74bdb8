-- 0006_privileges: the registry guards itself (SPEC "Identity and roles").
-- Add-only: never edit this file once landed; add 0007_… instead.

DO $$
DECLARE r text;
BEGIN
  FOREACH r IN ARRAY ARRAY['genfill_service', 'genfill_reader', 'genfill_api'] LOOP
    BEGIN
      EXECUTE format('CREATE ROLE %I NOLOGIN', r);
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
      NULL; -- roles are cluster-wide: another database (or a concurrent migrate) made it
    END;
  END LOOP;
END $$;

-- The role matrix (README "Roles"):
--   genfill_owner     owns the schemas, every table and every SECURITY DEFINER function; no
--                     login needs it: PostgreSQL demands an owner only for DDL (generation
--                     tables, later DETACH … CONCURRENTLY), which runs through its functions.
--   genfill_service   the fleet (planner, workers, reconciler, projector): the only writer of
--                     partitions, receipts, reconciliations, throttle rows and generation
--                     tables; it moves release states only along the transition table below.
--   genfill_operator  people: SELECT, and EXECUTE on the operator verbs (submit, pause,
--   genfill_approver  resume, cancel, request) or on approve. No INSERT, UPDATE or DELETE.
--   genfill_reader    people or applications reading: SELECT on the registry and generations.
--   genfill_api       the API's login: may name the token's subject as the principal
--                     (SET LOCAL genfill.principal); holds the people's verbs on their behalf.
GRANT genfill_operator, genfill_approver, genfill_reader TO genfill_api;

-- People write nothing directly: 0003–0005 granted INSERT/UPDATE that let an operator set any
-- state, point readers at any generation or forge a principal.
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA genfill FROM genfill_operator, genfill_approver;
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA genfill_data FROM genfill_operator, genfill_approver;
REVOKE USAGE ON ALL SEQUENCES IN SCHEMA genfill FROM genfill_operator, genfill_approver;
REVOKE EXECUTE ON FUNCTION genfill.add_generation(text, text), genfill.create_parent(text, regclass, text[]),
  genfill.create_target_view(text) FROM genfill_operator;

GRANT USAGE ON SCHEMA genfill, genfill_data TO genfill_reader, genfill_service;
GRANT SELECT ON ALL TABLES IN SCHEMA genfill TO genfill_reader, genfill_service;
GRANT SELECT ON ALL TABLES IN SCHEMA genfill_data TO genfill_reader, genfill_operator, genfill_approver;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA genfill_data TO genfill_service;
-- Generation tables made later by genfill_owner's functions get the same grants.
ALTER DEFAULT PRIVILEGES FOR ROLE genfill_owner IN SCHEMA genfill_data
  GRANT SELECT ON TABLES TO genfill_reader, genfill_operator, genfill_approver;
ALTER DEFAULT PRIVILEGES FOR ROLE genfill_owner IN SCHEMA genfill_data
  GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO genfill_service;
ALTER DEFAULT PRIVILEGES FOR ROLE genfill_owner IN SCHEMA genfill
  GRANT SELECT ON TABLES TO genfill_reader, genfill_operator, genfill_approver, genfill_service;

GRANT INSERT, UPDATE ON genfill.datasets, genfill.generations, genfill.manifests, genfill.dependency_pins, genfill.partitions,
  genfill.throttle_leases TO genfill_service;
-- The operator's pause flag is not among them: only genfill.set_operator_pause writes it.
GRANT UPDATE (state, state_changed_at, throttle_paused) ON genfill.releases TO genfill_service;
GRANT INSERT ON genfill.transforms, genfill.receipts,
  genfill.reconciliations, genfill.reconciliation_partitions, genfill.throttle_decisions,
  genfill.release_log, genfill.dataset_log TO genfill_service;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA genfill TO genfill_service;
GRANT EXECUTE ON FUNCTION genfill.add_generation(text, text), genfill.create_parent(text, regclass, text[]),
  genfill.create_target_view(text) TO genfill_service;

-- ---------------------------------------------------------------------------------------
-- Who acted. session_user, except that a member of genfill_api (the API, for its token's
-- subject) or genfill_service (executing a person's request) may name the principal with
-- SET LOCAL genfill.principal. A trigger fills every principal column from here: a value the
-- caller passed is overwritten, so no row can name someone else.
CREATE FUNCTION genfill.current_principal() RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  delegated text := nullif(current_setting('genfill.principal', true), '');
BEGIN
  IF delegated IS NOT NULL
     AND (pg_has_role(session_user, 'genfill_api', 'MEMBER') OR pg_has_role(session_user, 'genfill_service', 'MEMBER')) THEN
    RETURN delegated;
  END IF;
  RETURN session_user::text;
END $$;

CREATE FUNCTION genfill.fill_principal() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  NEW.principal := genfill.current_principal();
  RETURN NEW;
END $$;
CREATE TRIGGER release_log_principal BEFORE INSERT ON genfill.release_log
  FOR EACH ROW EXECUTE FUNCTION genfill.fill_principal();
CREATE TRIGGER dataset_log_principal BEFORE INSERT ON genfill.dataset_log
  FOR EACH ROW EXECUTE FUNCTION genfill.fill_principal();
CREATE TRIGGER approvals_principal BEFORE INSERT ON genfill.approvals
  FOR EACH ROW EXECUTE FUNCTION genfill.fill_principal();
CREATE TRIGGER reconciliations_principal BEFORE INSERT ON genfill.reconciliations
  FOR EACH ROW EXECUTE FUNCTION genfill.fill_principal();

-- ---------------------------------------------------------------------------------------
-- The transition table, equal to packages/contracts/src/states.ts (a test compares them),
-- enforced by a trigger for every writer, the owner included. Entering APPROVED is reserved
-- to genfill.approve (it runs as genfill_owner); the columns a release was submitted with
-- never change.
CREATE TABLE genfill.release_transitions (
  from_state text NOT NULL,
  to_state   text NOT NULL,
  PRIMARY KEY (from_state, to_state)
);
INSERT INTO genfill.release_transitions (from_state, to_state) VALUES
  ('DRAFT', 'SNAPSHOT_PINNED'), ('DRAFT', 'RECONCILIATION_REQUIRED'), ('DRAFT', 'CANCELLED'),
  ('SNAPSHOT_PINNED', 'BUILDING'), ('SNAPSHOT_PINNED', 'RECONCILIATION_REQUIRED'), ('SNAPSHOT_PINNED', 'CANCELLED'),
  ('BUILDING', 'BUILT'), ('BUILDING', 'INGRESS_SEALED'), ('BUILDING', 'RECONCILIATION_REQUIRED'), ('BUILDING', 'CANCELLED'),
  ('BUILT', 'RECONCILED'), ('BUILT', 'INGRESS_SEALED'), ('BUILT', 'RECONCILIATION_REQUIRED'), ('BUILT', 'CANCELLED'),
  ('INGRESS_SEALED', 'CAUGHT_UP'), ('INGRESS_SEALED', 'APPROVED'), ('INGRESS_SEALED', 'RECONCILIATION_REQUIRED'), ('INGRESS_SEALED', 'CANCELLED'),
  ('CAUGHT_UP', 'RECONCILED'), ('CAUGHT_UP', 'ACTIVE'), ('CAUGHT_UP', 'APPROVED'), ('CAUGHT_UP', 'RECONCILIATION_REQUIRED'), ('CAUGHT_UP', 'CANCELLED'),
  ('RECONCILED', 'APPROVED'), ('RECONCILED', 'RECONCILIATION_REQUIRED'), ('RECONCILED', 'CANCELLED'),
  ('APPROVED', 'INGRESS_SEALED'), ('APPROVED', 'ACTIVE'), ('APPROVED', 'RECONCILIATION_REQUIRED'), ('APPROVED', 'CANCELLED'),
  ('ACTIVE', 'RETIRED'), ('ACTIVE', 'ROLLED_BACK'),
  ('RECONCILIATION_REQUIRED', 'BUILDING'), ('RECONCILIATION_REQUIRED', 'RECONCILED'), ('RECONCILIATION_REQUIRED', 'CANCELLED'),
  ('ROLLED_BACK', 'RETIRED');
CREATE TRIGGER release_transitions_frozen BEFORE INSERT OR UPDATE OR DELETE ON genfill.release_transitions
  FOR EACH STATEMENT EXECUTE FUNCTION genfill.refuse_change();
CREATE TRIGGER release_transitions_no_truncate BEFORE TRUNCATE ON genfill.release_transitions
  FOR EACH STATEMENT EXECUTE FUNCTION genfill.refuse_change();

CREATE FUNCTION genfill.guard_release() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF (NEW.id, NEW.dataset, NEW.generation, NEW.expected_active, NEW.digest, NEW.spec, NEW.transform_digest, NEW.range,
      NEW.timezone, NEW.every, NEW.approvals_required, NEW.owner, NEW.deadline, NEW.submitted_by, NEW.submitted_at)
     IS DISTINCT FROM
     (OLD.id, OLD.dataset, OLD.generation, OLD.expected_active, OLD.digest, OLD.spec, OLD.transform_digest, OLD.range,
      OLD.timezone, OLD.every, OLD.approvals_required, OLD.owner, OLD.deadline, OLD.submitted_by, OLD.submitted_at) THEN
    RAISE EXCEPTION 'release %: what a release was submitted with never changes (submit a new release instead)', OLD.id
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF NEW.state IS DISTINCT FROM OLD.state THEN
    IF NOT EXISTS (SELECT 1 FROM genfill.release_transitions t WHERE t.from_state = OLD.state AND t.to_state = NEW.state) THEN
      RAISE EXCEPTION 'release %: % → % is not in the transition table', OLD.id, OLD.state, NEW.state
        USING ERRCODE = 'GFR01';
    END IF;
    IF NEW.state = 'APPROVED' AND current_user <> 'genfill_owner' THEN
      RAISE EXCEPTION 'release %: only genfill.approve moves a release to APPROVED', OLD.id
        USING ERRCODE = 'insufficient_privilege';
    END IF;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER releases_guard BEFORE UPDATE ON genfill.releases
  FOR EACH ROW EXECUTE FUNCTION genfill.guard_release();

-- ---------------------------------------------------------------------------------------
-- Stored transforms are what was validated: the digest is the SHA-256 of the SQL's UTF-8
-- bytes (as the release digest counts it), and a row never changes.
ALTER TABLE genfill.transforms
  ADD CONSTRAINT transforms_digest_is_sha256 CHECK (digest = 'sha256:' || encode(sha256(convert_to(sql, 'UTF8')), 'hex'));
CREATE TRIGGER transforms_immutable BEFORE UPDATE OR DELETE ON genfill.transforms
  FOR EACH ROW EXECUTE FUNCTION genfill.refuse_change();
CREATE TRIGGER transforms_no_truncate BEFORE TRUNCATE ON genfill.transforms
  FOR EACH STATEMENT EXECUTE FUNCTION genfill.refuse_change();

-- ---------------------------------------------------------------------------------------
-- A throttle decision counts only under the lease token current when it is written: one
-- written by a holder that lost the lease (or forged with another token) is refused.
CREATE FUNCTION genfill.guard_throttle_decision() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM genfill.throttle_leases l
                  WHERE l.release = NEW.release AND l.token = NEW.token AND l.holder = NEW.holder) THEN
    RAISE EXCEPTION 'throttle decision for % under token % by % is not the current lease', NEW.release, NEW.token, NEW.holder
      USING ERRCODE = 'GFR01';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER throttle_decisions_current_token BEFORE INSERT ON genfill.throttle_decisions
  FOR EACH ROW EXECUTE FUNCTION genfill.guard_throttle_decision();
CREATE TRIGGER throttle_decisions_no_truncate BEFORE TRUNCATE ON genfill.throttle_decisions
  FOR EACH STATEMENT EXECUTE FUNCTION genfill.refuse_change();

-- ---------------------------------------------------------------------------------------
-- Verbs: a person's state change is one of these functions (SECURITY DEFINER, search_path
-- pinned, no PUBLIC EXECUTE). Each checks its preconditions under the row lock and records
-- genfill.current_principal(). Refusals raise GFR01 (a precondition), GFC01 (the same id with
-- other content), GFO01 (an overlapping range), GFN01 (not found); the CLI maps them to exit 3.

-- `genfill release submit`: the CLI validates the file (zod, static checks, the database
-- probe) and hands over the parsed spec, its digest and the transform SQL; every column is
-- derived here from the spec itself, and the transform's digest from its text.
CREATE FUNCTION genfill.submit_release(p_spec jsonb, p_digest text, p_transform_sql text)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_id text := p_spec->>'release';
  v_dataset text := p_spec->>'dataset';
  v_transform text := 'sha256:' || encode(sha256(convert_to(p_transform_sql, 'UTF8')), 'hex');
  existing text;
  ds record;
  other record;
  mismatches text[];
BEGIN
  IF v_id IS NULL OR v_dataset IS NULL OR p_spec->'source' IS NULL OR p_spec->'target' IS NULL OR p_spec->'range' IS NULL THEN
    RAISE EXCEPTION 'not a dataBackfillRelease.v1 spec: validate it with genfill release validate' USING ERRCODE = 'GFR01';
  END IF;
  PERFORM pg_advisory_xact_lock(hashtextextended('genfill:dataset:' || v_dataset, 0));
  SELECT r.digest INTO existing FROM genfill.releases r WHERE r.id = v_id;
  IF FOUND THEN
    IF existing = p_digest THEN RETURN 'unchanged'; END IF;
    RAISE EXCEPTION 'release % exists with other content (digest %, this file %): a release is immutable; submit the change under a new id', v_id, existing, p_digest
      USING ERRCODE = 'GFC01', DETAIL = existing;
  END IF;

  SELECT * INTO ds FROM genfill.datasets d WHERE d.name = v_dataset;
  IF FOUND THEN
    mismatches := array_remove(ARRAY[
      CASE WHEN ds.source_table <> p_spec#>>'{source,table}' THEN format('source.table is %s', ds.source_table) END,
      CASE WHEN ds.target_table <> p_spec#>>'{target,table}' THEN format('target.table is %s', ds.target_table) END,
      CASE WHEN ds.time_column <> p_spec#>>'{source,time}' THEN format('source.time is %s', ds.time_column) END,
      CASE WHEN ds.key_columns <> ARRAY(SELECT jsonb_array_elements_text(p_spec#>'{source,key}'))
           THEN format('source.key is [%s]', array_to_string(ds.key_columns, ', ')) END], NULL);
    IF cardinality(mismatches) > 0 THEN
      RAISE EXCEPTION 'dataset % is registered with other settings: %', v_dataset, array_to_string(mismatches, '; ') USING ERRCODE = 'GFR01';
    END IF;
  ELSE
    SELECT d.name INTO other FROM genfill.datasets d WHERE d.target_table = p_spec#>>'{target,table}';
    IF FOUND THEN
      RAISE EXCEPTION '% is already the target of dataset %; a release of it must name dataset %', p_spec#>>'{target,table}', other.name, other.name
        USING ERRCODE = 'GFR01';
    END IF;
    INSERT INTO genfill.datasets (name, target_table, source_table, key_columns, time_column, created_by)
    VALUES (v_dataset, p_spec#>>'{target,table}', p_spec#>>'{source,table}',
            ARRAY(SELECT jsonb_array_elements_text(p_spec#>'{source,key}')), p_spec#>>'{source,time}', genfill.current_principal());
  END IF;

  SELECT r.id, r.range::text AS range INTO other FROM genfill.releases r
   WHERE r.dataset = v_dataset AND r.generation = p_spec#>>'{target,generation}' AND r.state <> 'CANCELLED'
     AND r.range && tstzrange((p_spec#>>'{range,from}')::timestamptz, (p_spec#>>'{range,to}')::timestamptz, '[)')
   ORDER BY r.id LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'release % overlaps release % (%) of the same dataset and generation', v_id, other.id, other.range
      USING ERRCODE = 'GFO01', DETAIL = other.id, HINT = other.range;
  END IF;

  INSERT INTO genfill.transforms (digest, sql, created_by) VALUES (v_transform, p_transform_sql, genfill.current_principal())
  ON CONFLICT (digest) DO NOTHING;
  INSERT INTO genfill.releases (id, dataset, generation, expected_active, digest, spec, transform_digest, range, timezone, every,
                                approvals_required, owner, deadline, submitted_by)
  VALUES (v_id, v_dataset, p_spec#>>'{target,generation}', p_spec#>>'{target,expectedActive}', p_digest, p_spec, v_transform,
          tstzrange((p_spec#>>'{range,from}')::timestamptz, (p_spec#>>'{range,to}')::timestamptz, '[)'),
          p_spec->>'timezone', p_spec#>>'{partition,every}', (p_spec->>'approvals')::integer, p_spec->>'owner',
          (p_spec->>'deadline')::timestamptz, genfill.current_principal());
  INSERT INTO genfill.release_log (release, action, to_state, detail)
  VALUES (v_id, 'submit', 'DRAFT', jsonb_build_object('digest', p_digest));
  RETURN 'submitted';
END $$;

-- `genfill pause|resume`: the operator's flag of an open release, fenced on its old value.
CREATE FUNCTION genfill.set_operator_pause(p_release text, p_paused boolean, p_reason text, p_detail jsonb)
RETURNS TABLE (state text, changed boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  verb text := CASE WHEN p_paused THEN 'pause' ELSE 'resume' END;
BEGIN
  -- FOR NO KEY UPDATE waits for claims in flight (they hold FOR SHARE): once this returns,
  -- every later claim sees the flag.
  SELECT r.state, r.operator_paused INTO rel FROM genfill.releases r WHERE r.id = p_release FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'release % does not exist: check the id with `genfill status`', p_release USING ERRCODE = 'GFN01';
  END IF;
  IF rel.state IN ('ACTIVE', 'RETIRED', 'ROLLED_BACK', 'CANCELLED') THEN
    RAISE EXCEPTION 'release % is %: % applies only to open releases, nothing was changed', p_release, rel.state, verb
      USING ERRCODE = 'GFR01';
  END IF;
  IF rel.operator_paused = p_paused THEN
    RETURN QUERY SELECT rel.state::text, false;
    RETURN;
  END IF;
  UPDATE genfill.releases r SET operator_paused = p_paused WHERE r.id = p_release AND r.operator_paused = NOT p_paused;
  INSERT INTO genfill.release_log (release, action, reason, detail)
  VALUES (p_release, verb, p_reason, jsonb_build_object('operatorPaused', p_paused) || coalesce(p_detail, '{}'));
  RETURN QUERY SELECT rel.state::text, true;
END $$;

-- `genfill cancel`: any open state → CANCELLED.
CREATE FUNCTION genfill.cancel_release(p_release text, p_reason text, p_detail jsonb)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  counts jsonb;
  generation_detail jsonb := '{}';
BEGIN
  SELECT r.state, r.dataset, r.generation INTO rel FROM genfill.releases r WHERE r.id = p_release FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'release % does not exist: check the id with `genfill status`', p_release USING ERRCODE = 'GFN01';
  END IF;
  IF rel.state = 'CANCELLED' THEN
    RAISE EXCEPTION 'release % is already CANCELLED', p_release USING ERRCODE = 'GFR01';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM genfill.release_transitions t WHERE t.from_state = rel.state AND t.to_state = 'CANCELLED') THEN
    RAISE EXCEPTION 'release % is %: only an open release can be cancelled%', p_release, rel.state,
      CASE WHEN rel.state = 'ACTIVE' THEN format('; to undo a cutover use `genfill rollback %s`', p_release) ELSE '' END
      USING ERRCODE = 'GFR01';
  END IF;
  SELECT coalesce(jsonb_object_agg(s.status, s.n), '{}') INTO counts
    FROM (SELECT p.status, count(*) AS n FROM genfill.partitions p WHERE p.release = p_release GROUP BY p.status) s;
  UPDATE genfill.releases r SET state = 'CANCELLED', state_changed_at = now() WHERE r.id = p_release AND r.state = rel.state;
  -- The cancelled release's rows stay in its candidate generation, where a later release would
  -- inherit them (issue 13): the candidate is ABANDONED unless another open release still fills
  -- it. The row lock orders this against a plan adding a release to it (upsertCandidateGeneration).
  PERFORM 1 FROM genfill.generations g
    WHERE g.dataset = rel.dataset AND g.generation = rel.generation AND g.state = 'CANDIDATE' FOR UPDATE;
  IF FOUND THEN
    SELECT CASE WHEN count(*) = 0 THEN jsonb_build_object('abandonedGeneration', rel.generation)
                ELSE jsonb_build_object('generationKeptFor', jsonb_agg(o.id ORDER BY o.id)) END
      INTO generation_detail
      FROM genfill.releases o
     WHERE o.dataset = rel.dataset AND o.generation = rel.generation AND o.id <> p_release
       AND o.state NOT IN ('ACTIVE', 'RETIRED', 'ROLLED_BACK', 'CANCELLED');
    IF generation_detail ? 'abandonedGeneration' THEN
      UPDATE genfill.generations g SET state = 'ABANDONED'
       WHERE g.dataset = rel.dataset AND g.generation = rel.generation AND g.state = 'CANDIDATE';
    END IF;
  END IF;
  INSERT INTO genfill.release_log (release, action, from_state, to_state, reason, detail)
  VALUES (p_release, 'cancel', rel.state, 'CANCELLED', p_reason,
          jsonb_build_object('partitions', counts) || coalesce(p_detail, '{}') || generation_detail);
  RETURN rel.state;
END $$;

-- `genfill approve <release> --reconciliation <id>`: an approval is bound to what was reviewed.
-- It refuses an id that is not the release's latest reconciliation, a latest that did not
-- pass, and the submitter. Replaces 0004's approve(text), which bound to whatever was latest.
DROP FUNCTION genfill.approve(text);
CREATE FUNCTION genfill.approve(p_release text, p_reconciliation bigint)
RETURNS TABLE (outcome text, reconciliation_id bigint, approvals integer, required integer, state text, principal text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  latest record;
  me text := genfill.current_principal();
  n integer;
BEGIN
  SELECT r.id, r.state, r.submitted_by, r.approvals_required INTO rel
    FROM genfill.releases r WHERE r.id = p_release FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'release % does not exist', p_release USING ERRCODE = 'GFN01';
  END IF;
  IF rel.submitted_by = me THEN
    RAISE EXCEPTION 'release % was submitted by %: the submitter cannot approve it; another principal must', p_release, me
      USING ERRCODE = 'GFR01';
  END IF;
  SELECT c.id, c.state INTO latest FROM genfill.reconciliations c WHERE c.release = p_release ORDER BY c.id DESC LIMIT 1;
  IF latest.id IS NOT NULL AND p_reconciliation = latest.id
     AND EXISTS (SELECT 1 FROM genfill.approvals a
                  WHERE a.release = p_release AND a.reconciliation_id = latest.id AND a.principal = me) THEN
    SELECT count(DISTINCT a.principal) INTO n FROM genfill.approvals a
     WHERE a.release = p_release AND a.reconciliation_id = latest.id AND a.principal <> rel.submitted_by;
    RETURN QUERY SELECT 'already-approved'::text, latest.id, n, rel.approvals_required, rel.state::text, me;
    RETURN;
  END IF;
  IF rel.state <> 'RECONCILED' THEN
    RAISE EXCEPTION 'release % is %, not RECONCILED: only a reconciled release can be approved (genfill reconcile %)', p_release, rel.state, p_release
      USING ERRCODE = 'GFR01';
  END IF;
  IF latest.id IS NULL THEN
    RAISE EXCEPTION 'release % has no reconciliation: run genfill reconcile % first', p_release, p_release USING ERRCODE = 'GFR01';
  END IF;
  IF p_reconciliation IS NULL OR p_reconciliation <> latest.id THEN
    RAISE EXCEPTION 'reconciliation % is not the latest of release % (#% is): review #% and approve that one',
      coalesce('#' || p_reconciliation::text, '(none named)'), p_release, latest.id, latest.id
      USING ERRCODE = 'GFR01';
  END IF;
  IF latest.state <> 'RECONCILED' THEN
    RAISE EXCEPTION 'reconciliation #% of release % did not pass (%): repair and reconcile again', latest.id, p_release, latest.state
      USING ERRCODE = 'GFR01';
  END IF;

  INSERT INTO genfill.approvals (release, reconciliation_id) VALUES (p_release, latest.id);
  SELECT count(DISTINCT a.principal) INTO n FROM genfill.approvals a
   WHERE a.release = p_release AND a.reconciliation_id = latest.id AND a.principal <> rel.submitted_by;
  IF n >= rel.approvals_required THEN
    UPDATE genfill.releases r SET state = 'APPROVED', state_changed_at = now() WHERE r.id = p_release AND r.state = 'RECONCILED';
    INSERT INTO genfill.release_log (release, action, from_state, to_state, detail)
    VALUES (p_release, 'approve', 'RECONCILED', 'APPROVED', jsonb_build_object('reconciliation', latest.id, 'approvals', n, 'required', rel.approvals_required));
    RETURN QUERY SELECT 'approved'::text, latest.id, n, rel.approvals_required, 'APPROVED'::text, me;
  ELSE
    INSERT INTO genfill.release_log (release, action, detail)
    VALUES (p_release, 'approve', jsonb_build_object('reconciliation', latest.id, 'approvals', n, 'required', rel.approvals_required));
    RETURN QUERY SELECT 'recorded'::text, latest.id, n, rel.approvals_required, rel.state::text, me;
  END IF;
END $$;

-- ---------------------------------------------------------------------------------------
-- Multi-step verbs are requests: a person asks, the service that owns the work (planner:
-- plan and repair; reconciler: reconcile) executes it under the service role with the
-- requester as principal and records the outcome, which the CLI waits for.
CREATE TABLE genfill.requests (
  id               bigserial PRIMARY KEY,
  kind             text NOT NULL CHECK (kind IN ('plan', 'reconcile', 'repair')),
  release          text NOT NULL REFERENCES genfill.releases (id),
  args             jsonb NOT NULL DEFAULT '{}',
  principal        text NOT NULL DEFAULT session_user,
  state            text NOT NULL DEFAULT 'PENDING' CHECK (state IN ('PENDING', 'RUNNING', 'DONE', 'FAILED')),
  claimed_by       text,
  -- A RUNNING request whose lease ran out (its executor died) is taken again: every kind is
  -- safe to run twice.
  lease_expires_at timestamptz,
  attempts         integer NOT NULL DEFAULT 0,
  exit_code        integer,
  result           jsonb,
  error            jsonb,
  progress         jsonb,
  created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
  finished_at      timestamptz,
  CHECK ((state IN ('DONE', 'FAILED')) = (finished_at IS NOT NULL))
);
CREATE INDEX requests_open_idx ON genfill.requests (kind, id) WHERE state IN ('PENDING', 'RUNNING');
CREATE TRIGGER requests_principal BEFORE INSERT ON genfill.requests
  FOR EACH ROW EXECUTE FUNCTION genfill.fill_principal();

CREATE FUNCTION genfill.request(p_kind text, p_release text, p_args jsonb)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_id bigint;
BEGIN
  IF p_kind NOT IN ('plan', 'reconcile', 'repair') THEN
    RAISE EXCEPTION 'unknown request kind %', p_kind USING ERRCODE = 'GFR01';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM genfill.releases r WHERE r.id = p_release) THEN
    RAISE EXCEPTION 'release % does not exist: submit it with `genfill release submit <file>`', p_release USING ERRCODE = 'GFN01';
  END IF;
  INSERT INTO genfill.requests (kind, release, args) VALUES (p_kind, p_release, coalesce(p_args, '{}')) RETURNING id INTO v_id;
  PERFORM pg_notify('genfill_requests', p_kind);
  RETURN v_id;
END $$;

-- Ownership, and who may call what. Every SECURITY DEFINER function belongs to genfill_owner
-- with EXECUTE revoked from PUBLIC (a test lists them all).
ALTER TABLE genfill.release_transitions OWNER TO genfill_owner;
ALTER TABLE genfill.requests OWNER TO genfill_owner;
GRANT SELECT ON genfill.release_transitions, genfill.requests TO genfill_operator, genfill_approver, genfill_reader, genfill_service;
GRANT UPDATE (state, claimed_by, lease_expires_at, attempts, exit_code, result, error, progress, finished_at) ON genfill.requests TO genfill_service;
DO $$
DECLARE f regprocedure;
BEGIN
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
            WHERE p.pronamespace = 'genfill'::regnamespace
              AND p.proname IN ('current_principal', 'fill_principal', 'guard_release', 'guard_throttle_decision',
                                'submit_release', 'set_operator_pause', 'cancel_release', 'approve', 'request') LOOP
    EXECUTE format('ALTER FUNCTION %s OWNER TO genfill_owner', f);
  END LOOP;
END $$;
REVOKE ALL ON FUNCTION genfill.submit_release(jsonb, text, text), genfill.set_operator_pause(text, boolean, text, jsonb),
  genfill.cancel_release(text, text, jsonb), genfill.approve(text, bigint), genfill.request(text, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.submit_release(jsonb, text, text), genfill.set_operator_pause(text, boolean, text, jsonb),
  genfill.cancel_release(text, text, jsonb), genfill.request(text, text, jsonb) TO genfill_operator, genfill_service;
GRANT EXECUTE ON FUNCTION genfill.approve(text, bigint) TO genfill_approver;
