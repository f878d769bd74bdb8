-- 0027_locks: the locks genfill waits on become heavyweight locks on genfill-only relations;
-- the projector's lease check runs owner-side. Add-only: never edit this file once landed.
--
-- Issue 28, finding 4: any login — even one with no genfill role — could take the advisory
-- lock `hashtextextended('genfill:seal:<dataset>', 0)` and hold it, and the projector, the seal
-- and every cutover of the dataset stalled for as long as it liked (likewise the
-- genfill:ingress:, genfill:plan:, genfill:catchup: keys): an advisory lock key is a number
-- anyone may lock. Each lock is now a LOCK TABLE on a table of its own in schema genfill_lock,
-- one per (kind, key) (SPEC invariant 7: ROW SHARE for a projector batch's tail, EXCLUSIVE for
-- the seal). The schema and its tables belong to genfill_owner; nobody is granted USAGE on the
-- schema or any privilege on its tables, so another login can neither take nor block them.
-- The fleet reaches them only through genfill.take_lock (sql/functions/take_lock.sql:
-- SECURITY DEFINER, executable by genfill_service; the owner-side verbs call it as the owner),
-- which creates a lock's table the first time it is used, holds the mode table and ends every
-- wait with a named refusal (GFK01). No table needs creating here: datasets and releases that
-- exist get theirs at their next lock.
--
-- Finding 3: the projector's tail read its lease row FOR SHARE, which needs UPDATE on
-- genfill.projector_leases; genfill_service does not hold it (leases change only through the
-- projector_* functions), so a plain genfill_service login failed every batch with
-- "permission denied for table projector_leases". The read moves owner-side
-- (sql/functions/projector_lease_held.sql), the same FOR SHARE in the batch's transaction: the
-- fleet gains no write privilege.
--
-- The one advisory lock left is `genfill migrate`'s (packages/registry/src/migrate.ts): only
-- an owner migrates, and a login that holds its key delays nothing but a migration.

CREATE SCHEMA genfill_lock AUTHORIZATION genfill_owner;
REVOKE ALL ON SCHEMA genfill_lock FROM PUBLIC;
COMMENT ON SCHEMA genfill_lock IS
  'genfill''s locks: one empty table per (kind, key), locked through genfill.take_lock; no login but the owner holds any privilege here';

-- The seal's advisory key: no lock uses it any more.
DROP FUNCTION genfill.seal_key(text);
