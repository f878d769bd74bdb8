-- 0026_bounded_verbs: bounds and retentions held by the owner, not passed by a verb's caller
-- (issue 28, findings 4 and 5). Add-only: never edit this file once landed; add 0027_… instead.
--
-- Before this migration the caller of a verb chose its own bound: ingest_apply(ds, max) skipped
-- the pending bound on NULL, ingress_compact_tombstones(ds, retention) took any retention (a
-- '0 seconds' retention and one delete at revision 9e18 raised the mirror's watermark for
-- good), reader leases were renewable forever by anyone, requests were unbounded in number and
-- their arguments unchecked until a service ran them. The bounds now live in genfill.settings,
-- written only by the owner (genfill_owner, or `genfill migrate` run as the owner, which writes
-- GENFILL_MAX_PENDING_EVENTS and the other GENFILL_* settings there when they are set), read by
-- the verbs through genfill.setting(name) (sql/functions/settings.sql).

CREATE TABLE genfill.settings (
  name         text PRIMARY KEY,
  -- The value as text, checked against `type` by the trigger of sql/functions/settings.sql.
  value        text NOT NULL,
  type         text NOT NULL CHECK (type IN ('bigint', 'interval')),
  description  text NOT NULL,
  updated_at   timestamptz NOT NULL DEFAULT now(),
  updated_by   text NOT NULL DEFAULT session_user
);

INSERT INTO genfill.settings (name, value, type, description) VALUES
  ('ingest.max_pending_events', '1000000', 'bigint',
   'ingress bound per dataset: pending events (logged, not yet in the active generation''s frontier) plus one file; beyond it ingest answers busy (GENFILL_MAX_PENDING_EVENTS)'),
  ('ingress.tombstone_retention', '7 days', 'interval',
   'how long an ingress tombstone is kept at least before compaction may drop it (GENFILL_TOMBSTONE_RETENTION)'),
  ('reader_lease.max_lifetime', '24 hours', 'interval',
   'how long a reader lease may last, counted from its first grant: renewals past it are refused, so retention and pruning go on (GENFILL_READER_LEASE_MAX_LIFETIME)'),
  ('request.max_open_per_principal', '20', 'bigint',
   'how many requests (PENDING or RUNNING) one principal may have open at once (GENFILL_MAX_OPEN_REQUESTS)');

-- Written by the owner alone: no role holds a write privilege on it.
ALTER TABLE genfill.settings OWNER TO genfill_owner;
GRANT SELECT ON genfill.settings TO genfill_service, genfill_operator, genfill_approver, genfill_reader;

-- The shape of each kind's arguments (a JSON Schema, from the code's zod schema by
-- z.toJSONSchema), synced by migrate with the kinds; genfill.request checks the arguments
-- against it before anything is queued. The default admits only an empty object until the
-- sync writes the code's schema in the same transaction.
ALTER TABLE genfill.request_kinds ADD COLUMN args_schema jsonb NOT NULL
  DEFAULT '{"type": "object", "properties": {}, "additionalProperties": false}';

-- The caller's bound and retention are gone from the signatures (their files define the new
-- ones); ingest_apply also returns the conflicts it recorded itself.
DROP FUNCTION genfill.ingest_apply(text, bigint);
DROP FUNCTION genfill.ingress_compact_tombstones(text, interval);

-- 0013's comment said the reconciler reads this table. The projector skips quarantined events
-- and the cutover's tail check (packages/reconcile/src/tail.ts) reports quarantined keys
-- instead of checking them; the reconciler proper compares a build with the source, which
-- quarantine does not touch, so it has nothing to skip.
COMMENT ON TABLE genfill.quarantined_keys IS
  'Quarantined keys: the projector skips their events up to up_to_revision, and the cutover''s tail check reports them unchecked. Written only by genfill.quarantine_key, for a key the projector stopped on or a reconciliation of the dataset named.';
