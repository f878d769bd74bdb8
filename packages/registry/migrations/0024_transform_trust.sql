-- 0024_transform_trust: transform text is untrusted input wherever a service uses it (issue 28,
-- finding 1). Add-only: never edit this file once landed; add 0025_… instead.
--
-- genfill.submit_release stored any spec and transform text; the checks ran only in the CLI,
-- and the services pasted the text into statements they ran with the fleet's rights. Now:
--   - every service admits the text again before each use (@genfill/transform admitTransform:
--     one SELECT, no volatile or denied function, no undeclared relation) and sends it only
--     over the extended protocol, which refuses a second statement;
--   - functions run with the caller's rights, so a transform may call a function outside
--     pg_catalog only when the owner listed it here, with why it is safe;
--   - genfill.submit_release enforces the release format's rules itself and refuses a
--     transform that reads a table its submitter may not read; genfill.transform_admissible
--     re-checks that at plan time (both in sql/functions/).

CREATE TABLE genfill.transform_functions (
  -- regprocedure: the exact overload, resolved when the owner inserts it and dumped by name.
  function  regprocedure PRIMARY KEY,
  reason    text NOT NULL CHECK (btrim(reason) <> ''),
  added_by  text NOT NULL DEFAULT session_user,
  added_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
ALTER TABLE genfill.transform_functions OWNER TO genfill_owner;
REVOKE ALL ON genfill.transform_functions FROM PUBLIC;
-- Read by every probe: the services' admission and a person's `release validate`. Written by
-- the owner only.
GRANT SELECT ON genfill.transform_functions TO genfill_service, genfill_operator, genfill_approver, genfill_reader;
COMMENT ON TABLE genfill.transform_functions IS
  'Functions outside pg_catalog a transform may call (they run with the service''s rights); written by genfill_owner only';

-- Changed function files: submit_release.sql (the spec rules and the submitter's SELECT),
-- new: release_spec_check.sql, transform_read_problems.sql, transform_admissible.sql.
