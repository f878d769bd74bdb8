-- 0014_catchup: each candidate's catch-up frontier CF and its rounds (SPEC invariant 8).
-- Add-only: never edit this file once landed; add 0015_… instead.
--
-- A round (packages/projector/src/catchup.ts) applies, version-aware, the latest event per key
-- visible in S and not in CF to the candidate generation, through the candidate's transform
-- map by the row's current time, where S is the projector's committed frontier of the active
-- generation (never a fresher snapshot, so CF never passes what readers of the old generation
-- have seen) — or, for the round after the seal, the barrier B. At BUILT, CF is the
-- containment-minimum of every build watermark, superseded receipts included; a later receipt
-- (a repair) lowers it to include its watermark; only a round raises it, to its S.

CREATE TABLE genfill.catchup_frontiers (
  release        text PRIMARY KEY REFERENCES genfill.releases (id),
  snapshot       pg_snapshot NOT NULL,
  -- Receipts up to this id are reflected in `snapshot` (a newer one lowers it first).
  receipts_seen  bigint NOT NULL,
  updated_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE genfill.catchup_rounds (
  id             bigserial PRIMARY KEY,
  release        text NOT NULL REFERENCES genfill.releases (id),
  generation     text NOT NULL,
  from_snapshot  pg_snapshot NOT NULL,
  to_snapshot    pg_snapshot NOT NULL,
  -- The round to the barrier B after the seal (it moves INGRESS_SEALED → CAUGHT_UP).
  to_barrier     boolean NOT NULL DEFAULT false,
  events         integer NOT NULL,
  upserted       integer NOT NULL,
  tombstones     integer NOT NULL,
  noops          integer NOT NULL,
  quarantined    integer NOT NULL,
  -- Over the (key, revision) pairs of the latest events per key the round consumed:
  -- recomputable from the log (genfill.row_hash of canon(key), canon(revision), summed mod 2^64).
  root           numeric(20, 0) NOT NULL,
  ms             numeric NOT NULL,
  principal      text NOT NULL DEFAULT session_user,
  at             timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX catchup_rounds_release_idx ON genfill.catchup_rounds (release, id);
CREATE TRIGGER catchup_rounds_principal BEFORE INSERT ON genfill.catchup_rounds
  FOR EACH ROW EXECUTE FUNCTION genfill.fill_principal();
CREATE TRIGGER catchup_rounds_append_only BEFORE UPDATE OR DELETE ON genfill.catchup_rounds
  FOR EACH ROW EXECUTE FUNCTION genfill.refuse_change();

-- The release floor, stored at plan (invariant 8, issue 16): the containment-minimum of the
-- plan's snapshot and the projector's frontier. Every watermark of the release must contain
-- it (else the partition fails), and it is part of the log's pruning horizon until the release
-- ends.
CREATE TABLE genfill.release_floors (
  release  text PRIMARY KEY REFERENCES genfill.releases (id),
  floor    pg_snapshot NOT NULL,
  at       timestamptz NOT NULL DEFAULT clock_timestamp()
);

ALTER TABLE genfill.release_floors OWNER TO genfill_owner;
GRANT SELECT ON genfill.release_floors TO genfill_operator, genfill_approver, genfill_reader, genfill_service;
GRANT INSERT ON genfill.release_floors TO genfill_service;
ALTER TABLE genfill.catchup_frontiers OWNER TO genfill_owner;
ALTER TABLE genfill.catchup_rounds OWNER TO genfill_owner;
GRANT SELECT ON genfill.catchup_frontiers, genfill.catchup_rounds TO genfill_operator, genfill_approver, genfill_reader, genfill_service;
GRANT INSERT, UPDATE ON genfill.catchup_frontiers TO genfill_service;
GRANT INSERT ON genfill.catchup_rounds TO genfill_service;
GRANT USAGE ON SEQUENCE genfill.catchup_rounds_id_seq TO genfill_service;

-- Partitions a catch-up round changed rows in (the rows' partitions before and after the
-- round): the reconciler checks receipt roots only for partitions no round touched — a
-- touched one's rows no longer are what its receipt describes — and verifies the touched
-- keys against the transform of their latest image one by one.
CREATE TABLE genfill.catchup_touched (
  release    text NOT NULL REFERENCES genfill.releases (id),
  partition  text NOT NULL,
  round      bigint NOT NULL,
  PRIMARY KEY (release, partition)
);
ALTER TABLE genfill.catchup_touched OWNER TO genfill_owner;
GRANT SELECT ON genfill.catchup_touched TO genfill_operator, genfill_approver, genfill_reader, genfill_service;
GRANT INSERT, UPDATE ON genfill.catchup_touched TO genfill_service;

-- The partitions of a release holding these instants (a zone-less time column converts its
-- wall clocks with AT TIME ZONE of the release's region zone first).
CREATE FUNCTION genfill.partitions_at(p_release text, p_times timestamptz[])
RETURNS SETOF text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT DISTINCT p.id FROM genfill.partitions p, unnest(p_times) AS t
   WHERE p.release = p_release
     AND (t >= p.lower AND t < p.upper
          OR p.kind = 'carry' AND p.lower = '0001-01-01 00:00:00+00' AND t < p.upper
          OR p.kind = 'carry' AND p.upper = '9999-12-31 00:00:00+00' AND t >= p.lower)
$$;
ALTER FUNCTION genfill.partitions_at(text, timestamptz[]) OWNER TO genfill_owner;
