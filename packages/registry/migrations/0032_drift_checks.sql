-- 0032_drift_checks: every verdict of the dataset drift check, kept (issue 29, "a drift check
-- that runs by itself"). Add-only: never edit this file once landed; add 0033_… instead.
--
-- The drift check (`genfill reconcile --dataset`, packages/reconcile/src/drift.ts) compares a
-- live generation with its transform map applied to the source. Until now only its latest
-- result was kept, in genfill.dataset_flags.drift_result, and only a person ran it. The
-- reconciler service now runs it on a schedule (GENFILL_DRIFT_CHECK_EVERY, default 1h) and at
-- once when a dataset's active generation changed since its last verdict (a cutover or a
-- rollback), and records each verdict here: which generation at which projector frontier, in
-- which snapshot, when, how many rows it compared, how many differed, and the drifted keys —
-- a bounded sample (drift.ts: 20) and their count.
--
-- Readable by people, as 0025 decided for genfill.reconciliation_findings: a drifted key is a
-- key of the generation (which people read anyway) or of the transform's output of the source
-- that the generation should hold — the evidence an operator acts on (a rebuild release), and
-- no row image is stored: keys and counts only. Written by the fleet alone (INSERT, by the
-- login that ran the check: the reconciler service or a service login running
-- `genfill reconcile --dataset`); nobody updates or deletes a verdict.

CREATE TABLE genfill.drift_checks (
  id             bigserial PRIMARY KEY,
  dataset        text NOT NULL REFERENCES genfill.datasets (name),
  -- The generation compared (the active one when the check read) and the projector frontier of
  -- it the check was taken at: keys with events after the frontier are pending, left out.
  generation     text NOT NULL,
  frontier       pg_snapshot NOT NULL,
  -- The check's own REPEATABLE READ snapshot.
  snapshot       pg_snapshot NOT NULL,
  -- Why it ran: the schedule, a generation that changed since the last verdict (a cutover or a
  -- rollback: checked at once), or a person's `genfill reconcile --dataset`.
  reason         text NOT NULL CHECK (reason IN ('schedule', 'generation_changed', 'manual')),
  started_at     timestamptz NOT NULL,
  finished_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
  -- Live rows of the generation compared (pending keys left out).
  rows_checked   bigint NOT NULL CHECK (rows_checked >= 0),
  -- Rows the transform map gives that the generation lacks or holds otherwise, and rows the
  -- generation holds that the transform map does not give; drifted_rows is their sum.
  missing_rows   bigint NOT NULL CHECK (missing_rows >= 0),
  extra_rows     bigint NOT NULL CHECK (extra_rows >= 0),
  drifted_rows   bigint GENERATED ALWAYS AS (missing_rows + extra_rows) STORED,
  pending_keys   bigint NOT NULL CHECK (pending_keys >= 0),
  -- Distinct keys among the drifted rows, and a bounded sample of them (a JSON array of key objects).
  drifted_keys   bigint NOT NULL CHECK (drifted_keys >= 0),
  key_sample     jsonb NOT NULL CHECK (jsonb_typeof(key_sample) = 'array'),
  principal      text NOT NULL DEFAULT session_user,
  CHECK (finished_at >= started_at)
);
CREATE INDEX drift_checks_dataset_latest ON genfill.drift_checks (dataset, id DESC);
COMMENT ON TABLE genfill.drift_checks IS
  'Every verdict of the dataset drift check (a live generation against its transform map of the source): counts and a bounded sample of drifted keys, no row image; written by the fleet.';

ALTER TABLE genfill.drift_checks OWNER TO genfill_owner;
REVOKE ALL ON genfill.drift_checks FROM PUBLIC;
GRANT SELECT, INSERT ON genfill.drift_checks TO genfill_service;
GRANT USAGE ON SEQUENCE genfill.drift_checks_id_seq TO genfill_service;
GRANT SELECT ON genfill.drift_checks TO genfill_operator, genfill_approver, genfill_reader;
