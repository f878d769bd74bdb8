-- genfill registry: the only source of truth. Redis holds only dispatch.
-- Add-only: never edit this file once landed; add 0002_… instead.

-- Exclusion constraints on (text, range) need btree_gist; keep its functions out of public.
CREATE EXTENSION IF NOT EXISTS btree_gist WITH SCHEMA genfill;

-- Content-addressed transform SQL, so every writer picks a transform by digest.
CREATE TABLE genfill.transforms (
  digest      text PRIMARY KEY CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
  sql         text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  created_by  text NOT NULL DEFAULT session_user
);

CREATE TABLE genfill.datasets (
  name               text PRIMARY KEY,
  target_table       text NOT NULL UNIQUE,
  source_table       text NOT NULL,
  key_columns        text[] NOT NULL CHECK (cardinality(key_columns) > 0),
  time_column        text NOT NULL,
  active_generation  text,
  -- The ingress epoch fences the live writer (SPEC invariants 7 and 11).
  ingress_state      text NOT NULL DEFAULT 'OPEN' CHECK (ingress_state IN ('OPEN', 'SEALED')),
  ingress_epoch      bigint NOT NULL DEFAULT 1,
  created_at         timestamptz NOT NULL DEFAULT now(),
  created_by         text NOT NULL DEFAULT session_user
);

CREATE TABLE genfill.generations (
  dataset            text NOT NULL REFERENCES genfill.datasets (name),
  generation         text NOT NULL,
  state              text NOT NULL DEFAULT 'CANDIDATE'
                     CHECK (state IN ('CANDIDATE', 'ACTIVE', 'RETIRED', 'ABANDONED')),
  created_by_release text,
  -- Which transform digest produced which time range: [{from, to, transform, release}],
  -- sorted, contiguous; null from/to mean unbounded. Every writer picks by the row's time.
  transform_map      jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(transform_map) = 'array'),
  created_at         timestamptz NOT NULL DEFAULT now(),
  created_by         text NOT NULL DEFAULT session_user,
  PRIMARY KEY (dataset, generation)
);

ALTER TABLE genfill.datasets
  ADD CONSTRAINT datasets_active_generation_fk
  FOREIGN KEY (name, active_generation) REFERENCES genfill.generations (dataset, generation)
  DEFERRABLE INITIALLY DEFERRED;

CREATE TABLE genfill.releases (
  id                 text PRIMARY KEY,
  dataset            text NOT NULL REFERENCES genfill.datasets (name),
  generation         text NOT NULL,
  expected_active    text,
  digest             text NOT NULL CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
  spec               jsonb NOT NULL,
  transform_digest   text NOT NULL REFERENCES genfill.transforms (digest),
  range              tstzrange NOT NULL
                     CHECK (NOT isempty(range) AND lower_inc(range) AND NOT upper_inc(range)
                            AND NOT lower_inf(range) AND NOT upper_inf(range)),
  timezone           text NOT NULL,
  every              text NOT NULL,
  state              text NOT NULL DEFAULT 'DRAFT' CHECK (state IN (
                       'DRAFT', 'SNAPSHOT_PINNED', 'BUILDING', 'BUILT', 'INGRESS_SEALED',
                       'CAUGHT_UP', 'RECONCILED', 'APPROVED', 'ACTIVE', 'RETIRED',
                       'RECONCILIATION_REQUIRED', 'ROLLED_BACK', 'CANCELLED')),
  -- Pausing is not a state. The operator's flag always wins over the controller's.
  operator_paused    boolean NOT NULL DEFAULT false,
  throttle_paused    boolean NOT NULL DEFAULT false,
  approvals_required integer NOT NULL CHECK (approvals_required >= 0),
  owner              text NOT NULL,
  deadline           timestamptz NOT NULL,
  submitted_by       text NOT NULL DEFAULT session_user,
  submitted_at       timestamptz NOT NULL DEFAULT now(),
  state_changed_at   timestamptz NOT NULL DEFAULT now(),
  -- Within one dataset and target generation no two live releases' ranges overlap.
  -- Ranges are half-open, so [a, b) and [b, c) touch without overlapping.
  CONSTRAINT releases_no_overlap EXCLUDE USING gist (dataset WITH =, generation WITH =, range WITH &&)
    WHERE (state <> 'CANCELLED')
);
CREATE INDEX releases_dataset_idx ON genfill.releases (dataset, state);

-- Append-only: every transition and flag change with who (session_user), when and why.
CREATE TABLE genfill.release_log (
  id          bigserial PRIMARY KEY,
  release     text NOT NULL REFERENCES genfill.releases (id),
  action      text NOT NULL,
  from_state  text,
  to_state    text,
  principal   text NOT NULL DEFAULT session_user,
  at          timestamptz NOT NULL DEFAULT clock_timestamp(),
  reason      text,
  detail      jsonb
);
CREATE INDEX release_log_release_idx ON genfill.release_log (release, id);

CREATE FUNCTION genfill.refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'genfill.% is append-only', TG_TABLE_NAME USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER release_log_append_only BEFORE UPDATE OR DELETE ON genfill.release_log
  FOR EACH ROW EXECUTE FUNCTION genfill.refuse_change();
CREATE TRIGGER release_log_no_truncate BEFORE TRUNCATE ON genfill.release_log
  FOR EACH STATEMENT EXECUTE FUNCTION genfill.refuse_change();

-- Dependency content hashes pinned at plan; every writer re-checks them.
CREATE TABLE genfill.dependency_pins (
  release       text NOT NULL REFERENCES genfill.releases (id),
  relation      text NOT NULL,
  row_count     bigint NOT NULL,
  content_hash  numeric(20, 0) NOT NULL,
  pinned_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (release, relation)
);

CREATE TABLE genfill.manifests (
  release          text PRIMARY KEY REFERENCES genfill.releases (id),
  partition_count  integer NOT NULL CHECK (partition_count > 0),
  boundaries_sha256 text NOT NULL,
  -- Re-derived from the stored partition rows at plan time, not from the planner's list.
  coverage_proof   jsonb NOT NULL,
  created_at       timestamptz NOT NULL DEFAULT now(),
  created_by       text NOT NULL DEFAULT session_user
);

CREATE TABLE genfill.partitions (
  release          text NOT NULL REFERENCES genfill.manifests (release),
  id               text NOT NULL,
  seq              integer NOT NULL,
  kind             text NOT NULL CHECK (kind IN ('build', 'carry')),
  lower            timestamptz NOT NULL,
  upper            timestamptz NOT NULL,
  status           text NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'RUNNING', 'BUILT', 'FAILED')),
  -- The fencing token: bumped by every claim; a commit lands only while it is current.
  attempt          integer NOT NULL DEFAULT 0,
  leased_by        text,
  lease_expires_at timestamptz,
  est_rows         bigint,
  -- Bumped by plan to re-enqueue a partition whose job BullMQ still remembers as failed.
  enqueue_epoch    integer NOT NULL DEFAULT 0,
  reason           text,
  evidence         jsonb,
  updated_at       timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (release, id),
  UNIQUE (release, seq),
  CHECK (lower < upper),
  -- The database itself refuses two partitions of one release claiming the same instant.
  CONSTRAINT partitions_no_overlap EXCLUDE USING gist (release WITH =, tstzrange(lower, upper, '[)') WITH &&)
);

CREATE TABLE genfill.receipts (
  id                bigserial PRIMARY KEY,
  release           text NOT NULL,
  partition         text NOT NULL,
  kind              text NOT NULL DEFAULT 'build' CHECK (kind IN ('build', 'repair')),
  attempt           integer NOT NULL,
  release_digest    text NOT NULL,
  transform_digest  text NOT NULL,
  watermark         pg_snapshot NOT NULL,
  dependency_hashes jsonb NOT NULL,
  rows_in           bigint NOT NULL,
  rows_out          bigint NOT NULL,
  conserved_sums    jsonb NOT NULL DEFAULT '{}',
  key_root          numeric(20, 0) NOT NULL,
  row_root          numeric(20, 0) NOT NULL,
  timings           jsonb NOT NULL DEFAULT '{}',
  -- A repair writes a superseding receipt; earlier receipts stay as history.
  supersedes        bigint UNIQUE REFERENCES genfill.receipts (id),
  principal         text NOT NULL DEFAULT session_user,
  created_at        timestamptz NOT NULL DEFAULT now(),
  FOREIGN KEY (release, partition) REFERENCES genfill.partitions (release, id)
);
CREATE UNIQUE INDEX receipts_one_original ON genfill.receipts (release, partition) WHERE supersedes IS NULL;

-- An approval is bound to one reconciliation id (the reconciler's table arrives with it).
CREATE TABLE genfill.approvals (
  id                bigserial PRIMARY KEY,
  release           text NOT NULL REFERENCES genfill.releases (id),
  reconciliation_id bigint NOT NULL,
  principal         text NOT NULL DEFAULT session_user,
  at                timestamptz NOT NULL DEFAULT now(),
  UNIQUE (release, reconciliation_id, principal)
);
