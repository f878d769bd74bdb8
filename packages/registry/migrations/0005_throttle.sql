-- 0005_throttle: the throttle controller's fence and its decisions (SPEC invariant 14).
-- Add-only: never edit this file once landed; add 0006_… instead.

-- One row per release: the fencing token of the controller that holds the Redis lease.
-- Every takeover bumps the token in Postgres; every decision is written only while the
-- writer's token is still the row's token, so a holder that stalled past its Redis lease
-- (SIGSTOP, a long GC pause) writes nothing when it wakes up.
CREATE TABLE genfill.throttle_leases (
  release      text PRIMARY KEY REFERENCES genfill.releases (id),
  token        bigint NOT NULL CHECK (token > 0),
  holder       text NOT NULL,
  acquired_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  decided_at   timestamptz
);

-- Append-only evidence: every decision with the signals it read, the knobs it set and the
-- signal that bound. `status` shows the latest; workers read their admission share from it.
CREATE TABLE genfill.throttle_decisions (
  id                 bigserial PRIMARY KEY,
  release            text NOT NULL REFERENCES genfill.releases (id),
  token              bigint NOT NULL,
  holder             text NOT NULL,
  at                 timestamptz NOT NULL DEFAULT clock_timestamp(),
  signals            jsonb NOT NULL,
  -- The signal whose value/budget ratio was highest ('none' when no signal had a value).
  binding            text NOT NULL,
  ratio              double precision,
  action             text NOT NULL CHECK (action IN ('increase', 'hold', 'decrease', 'pause', 'resume')),
  concurrency        integer NOT NULL CHECK (concurrency >= 1),
  rows_per_second    double precision NOT NULL CHECK (rows_per_second > 0),
  live_workers       integer NOT NULL CHECK (live_workers >= 1),
  worker_rows_per_second double precision NOT NULL CHECK (worker_rows_per_second > 0),
  throttle_paused    boolean NOT NULL
);
CREATE INDEX throttle_decisions_release_idx ON genfill.throttle_decisions (release, id DESC);
CREATE TRIGGER throttle_decisions_append_only BEFORE UPDATE OR DELETE ON genfill.throttle_decisions
  FOR EACH ROW EXECUTE FUNCTION genfill.refuse_change();

ALTER TABLE genfill.throttle_leases OWNER TO genfill_owner;
ALTER TABLE genfill.throttle_decisions OWNER TO genfill_owner;
GRANT SELECT ON genfill.throttle_leases, genfill.throttle_decisions TO genfill_operator, genfill_approver;
-- Workers log in as operators: their controllers take the lease and record decisions.
GRANT INSERT, UPDATE ON genfill.throttle_leases TO genfill_operator;
GRANT INSERT ON genfill.throttle_decisions TO genfill_operator;
GRANT USAGE ON SEQUENCE genfill.throttle_decisions_id_seq TO genfill_operator;
