-- 0025_private_log: the change log and the ingress tables are private (issue 28, finding 2;
-- finding 5's log_horizon_transactions). Add-only: never edit this file once landed; add 0026_… instead.
--
-- genfill.change_log holds the full row image of every change of a captured source — deleted
-- rows and the columns a transform drops included — and 0009 granted SELECT on it to every
-- people role: a reader who may not read public.orders read all of it there. 0006's default
-- privileges gave the same SELECT on every partition genfill_owner made later, so a reader could
-- also query genfill.change_log_<bucket> directly. The ingress tables (0011) hold the same kind
-- of data for mirrors. From here on people read none of it directly:
--   * the status aggregates they need (pending events, lag, the log's size and oldest pending
--     event, the horizon's waits, conflict counts) come from SECURITY DEFINER functions and a
--     view that return counts, ages and ids, never a key or a row image
--     (sql/functions/dataset_pending.sql, capture_log_status.sql, log_horizon_waits.sql, the
--     view genfill.ingress_conflict_log below);
--   * a person who may read the source itself reads its events and conflicts through
--     genfill.source_events / genfill.source_conflicts (sql/functions/source_events.sql), which
--     check has_table_privilege(session_user, <source>, 'SELECT') first — and refuse the API's
--     login, which holds no per-subject table privilege to check.
-- The fleet (genfill_service) keeps its SELECT: it consumes the log.
--
-- Per relation of schema genfill that holds source data, what was decided and why:
--   change_log, change_log_default,  full row images and keys of every captured source: private.
--   change_log_<bucket>              Partitions made from now on: see "Partitions" below.
--   ingress_keys                     every key a mirror ever held, deleted ones included, with
--                                    its revision: source data (a key is source data), private.
--   ingress_conflicts                incoming and stored row images and the key: private; people
--                                    read id, dataset, revision, releases, principal and time
--                                    through the view genfill.ingress_conflict_log.
--   projector_tombstones             keys the projector deleted or the transform filtered out:
--                                    by construction keys the generation does not show, so a
--                                    reader of the generation learns nothing from them but the
--                                    source's keys: private (only the projector reads them).
--   projector_stops                  kept readable: one key per stopped dataset, which the
--                                    operator must see to act (genfill.quarantine_key takes it);
--                                    no row image.
--   quarantined_keys                 kept readable: keys an operator chose and gave a reason for,
--                                    the known differences an approver reviews; no row image.
--   reconciliation_findings          kept readable: the evidence approvers review before they
--                                    approve; keys and values of the generation (which people
--                                    read anyway) against the transform's output, no source image.
--   catchup_touched, ingress_mirrors, no source data (partition ids, revisions, counts): readable.
--   change_log_prunes

REVOKE ALL ON genfill.change_log, genfill.change_log_default, genfill.ingress_keys, genfill.ingress_conflicts,
  genfill.projector_tombstones
  FROM PUBLIC, genfill_operator, genfill_approver, genfill_reader, genfill_api;

-- Partitions. A partition is its own relation: SELECT on it is checked on it, not on the parent.
-- Two locks, either of which is enough: the default privileges genfill_owner's new tables in
-- schema genfill get no longer include people (the only tables genfill_owner creates there are
-- made by its SECURITY DEFINER functions — migrations run as the migrating login, which
-- default privileges FOR ROLE genfill_owner do not reach), and genfill.change_log_add_partitions
-- revokes people's privileges on each partition it makes, whatever the defaults of the
-- installation say. The partitions made before this migration are revoked here: those attached
-- (or detaching), and any a prune detached but did not drop yet (named as it names them).
ALTER DEFAULT PRIVILEGES FOR ROLE genfill_owner IN SCHEMA genfill
  REVOKE ALL ON TABLES FROM genfill_reader, genfill_operator, genfill_approver, genfill_api;
DO $$
DECLARE p regclass;
BEGIN
  FOR p IN SELECT i.inhrelid::regclass FROM pg_inherits i WHERE i.inhparent = 'genfill.change_log'::regclass
           UNION
           SELECT c.oid::regclass FROM pg_class c
            WHERE c.relnamespace = 'genfill'::regnamespace AND c.relkind = 'r' AND c.relname ~ '^change_log_\d+$' LOOP
    EXECUTE format('REVOKE ALL ON %s FROM PUBLIC, genfill_operator, genfill_approver, genfill_reader, genfill_api', p);
  END LOOP;
END $$;

-- What people may know of the conflicts: that one happened, where, at which revision, which
-- releases it moved and who sent the file — not the key or either image. A view reads with its
-- owner's rights; security_barrier keeps a caller's functions from seeing rows before the
-- view's own columns are projected (there is no WHERE to leak past, but nothing is lost).
CREATE VIEW genfill.ingress_conflict_log WITH (security_barrier) AS
SELECT c.id, c.dataset, c.source_table, c.revision, c.releases, c.principal, c.at,
       jsonb_array_length(c.incoming) AS incoming_lines, c.stored IS NOT NULL AS stored_differs
  FROM genfill.ingress_conflicts c;
COMMENT ON VIEW genfill.ingress_conflict_log IS
  'The ingress conflicts without their key or row images; genfill.source_conflicts returns those to a login that may read the mirror.';
ALTER VIEW genfill.ingress_conflict_log OWNER TO genfill_owner;
GRANT SELECT ON genfill.ingress_conflict_log TO genfill_operator, genfill_approver, genfill_reader, genfill_service;

-- The horizon's transactions in detail (pid, role, application, session state, database of
-- every session whose xid a caller-chosen snapshot names) and genfill's writers' sessions are
-- the service's: people get genfill.log_horizon_waits (kind, xid, start — what status shows).
-- The grants themselves are in the function files; these lines take back 0018's.
REVOKE EXECUTE ON FUNCTION genfill.log_horizon_transactions(pg_snapshot), genfill.log_horizon_blockers(timestamptz)
  FROM genfill_operator, genfill_approver, genfill_reader, genfill_api;
