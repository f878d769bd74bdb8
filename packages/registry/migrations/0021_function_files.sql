-- 0021_function_files: every SQL function of the registry has one current definition, in
-- packages/registry/sql/functions/ (sql/README.md). `genfill migrate` applies those files after
-- the numbered migrations, in the same transaction, on every run, and records here the sha256
-- of each file it applied; every other command refuses a database whose recorded files are not
-- its own (run `genfill migrate`), so a genfill with a changed function never runs against the
-- old one. Add-only: never edit this file once landed; add 0022_… instead.
--
-- From here on, numbered migrations carry tables, types, views, data moves and drops; a
-- function is changed in its file, and removed by a migration that drops it.

CREATE TABLE genfill.function_files (
  name        text PRIMARY KEY CHECK (name ~ '^[a-z0-9_]+\.sql$'),
  sha256      text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
  -- When this content of the file was first applied (re-applying the same content keeps it).
  applied_at  timestamptz NOT NULL DEFAULT now(),
  applied_by  text NOT NULL DEFAULT session_user
);

-- Like genfill.migrations: every command reads it (the schema check), only migrate writes it.
ALTER TABLE genfill.function_files OWNER TO genfill_owner;
GRANT SELECT ON genfill.function_files TO genfill_operator, genfill_approver, genfill_reader, genfill_service;
