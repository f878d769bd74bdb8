-- 0030_table_rewrite: a captured source whose rows changed without DML (issue 29, finding 2).
-- Add-only: never edit this file once landed; add 0031_… instead.
--
-- `ALTER TABLE orders ALTER COLUMN amount_cents TYPE bigint USING …` rewrites every row and
-- fires no row trigger: the values changed, the change log got no event, and the active
-- generation went on holding the transform of the old values while every check passed. The same
-- goes for `ALTER TYPE … RENAME VALUE` of an enum a captured column uses (no rewrite at all: the
-- label of every row changes in the catalog), a change of a composite type's attributes, and a
-- type change that PostgreSQL makes without a rewrite (timestamp → timestamptz under UTC).
--
-- The guard now sees them (sql/functions/capture_ddl_rewrite.sql: a `table_rewrite` event
-- trigger and a before/after comparison of the types a captured column uses; capture_ddl_check
-- for a column whose type changed) and marks the dataset here: `source_rewritten_at`, when, and
-- `source_rewrite`, what (table, command, reasons, principal). Its open releases move to
-- RECONCILIATION_REQUIRED (release_log 'source-rewritten'), and genfill.cutover_preconditions
-- refuses a cutover ('source-rewrite') until a drift check (`genfill reconcile --dataset`) that
-- ran after the rewrite found the active generation equal to its transform map over the source
-- (genfill.source_rewrite_pending, one definition for the precondition and `status`).
--
-- The mark is written by the guard's SECURITY DEFINER functions alone (genfill.mark_source_rewritten
-- has no grant): the DDL's login writes nothing of genfill's.

ALTER TABLE genfill.dataset_flags
  ADD COLUMN source_rewritten_at timestamptz,
  ADD COLUMN source_rewrite jsonb;

COMMENT ON COLUMN genfill.dataset_flags.source_rewritten_at IS
  'When a statement last changed rows of the source without DML (a table rewrite, an enum label rename, a column type change); pending until a later drift check verified the active generation.';
COMMENT ON COLUMN genfill.dataset_flags.source_rewrite IS
  'What changed the source at source_rewritten_at: {table, command, reasons, principal, xid}.';
