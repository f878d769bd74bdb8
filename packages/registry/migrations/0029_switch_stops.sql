-- 0029_switch_stops: the key a switch or a catch-up round refused on, recorded (after issue 28).
-- Add-only: never edit this file once landed; add 0030_… instead.
--
-- A cutover's or a rollback's switch transaction, a rollback's replay round and a catch-up round
-- apply log events through a transform; an event the transform fans out or re-keys is poison
-- and the step is refused, its transaction rolled back. Their refusals said "quarantine the key
-- or fix the transform", but since 0026 genfill.quarantine_key takes only a key the projector
-- stopped on (genfill.projector_stops) or a reconciliation named — and this key was recorded
-- nowhere, so the operator's only way out was a transform fix. Now the fleet records it here
-- once the refusal has rolled its own transaction back (packages/switch/src/stops.ts), and
-- genfill.quarantine_key also takes a key recorded here for its dataset
-- (sql/functions/quarantine_key.sql).
--
-- Readable by people, as 0025 decided for genfill.projector_stops: a key is source data, but
-- it is one key per refused event, with no row image, and the operator must see it to act (the
-- refusal names it too); the error text says what the transform did with it (fan-out or a
-- changed key), never a value of the row. Written by the fleet alone (INSERT); nobody updates or
-- deletes a stop: it stays as the record of why a switch was refused.

CREATE TABLE genfill.switch_stops (
  id          bigserial PRIMARY KEY,
  dataset     text NOT NULL REFERENCES genfill.datasets (name),
  release     text NOT NULL REFERENCES genfill.releases (id),
  -- The generation the event is poison for: the candidate (cutover, catch-up) or the one a
  -- rollback returns to.
  generation  text NOT NULL,
  kind        text NOT NULL CHECK (kind IN ('cutover', 'rollback', 'catchup')),
  -- The cutover or rollback (genfill.cutovers) that was refused; null for a catch-up round.
  switch      bigint REFERENCES genfill.cutovers (id),
  -- The event's key (the log's key, what genfill.quarantine_key takes), and the event when the
  -- poison search found it alone; without it, the key the transform's output named.
  key         jsonb NOT NULL CHECK (jsonb_typeof(key) = 'object'),
  event_id    bigint,
  revision    bigint,
  what        text NOT NULL,
  principal   text NOT NULL DEFAULT session_user,
  at          timestamptz NOT NULL DEFAULT now()
);
-- A catch-up round refused on the same event every poll records it once.
CREATE UNIQUE INDEX switch_stops_once ON genfill.switch_stops (dataset, release, kind, key, revision) NULLS NOT DISTINCT;
CREATE INDEX switch_stops_dataset_key ON genfill.switch_stops (dataset, key);
COMMENT ON TABLE genfill.switch_stops IS
  'Keys a cutover, a rollback or a catch-up round refused on as poison (a fan-out or a changed key): written by the fleet after the refusal; genfill.quarantine_key takes a key recorded here for its dataset.';

ALTER TABLE genfill.switch_stops OWNER TO genfill_owner;
REVOKE ALL ON genfill.switch_stops FROM PUBLIC;
GRANT SELECT, INSERT ON genfill.switch_stops TO genfill_service;
GRANT USAGE ON SEQUENCE genfill.switch_stops_id_seq TO genfill_service;
GRANT SELECT ON genfill.switch_stops TO genfill_operator, genfill_approver, genfill_reader;
