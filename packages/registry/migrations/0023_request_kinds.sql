-- 0023_request_kinds: the kinds of request as a table the code keeps equal to its registry.
-- Add-only: never edit this file once landed; add 0024_… instead.
--
-- The kinds were listed in the code, in a CHECK on genfill.requests.kind and in an IF of
-- genfill.request, each changed by hand with every new kind (0013, 0015, 0017). The code's
-- registry (packages/contracts/src/requests.ts, REQUEST_KINDS) is the one list now:
-- `genfill migrate` makes this table equal to it on every run (src/migrate.ts), the other
-- commands refuse a database whose table differs, requests.kind references it, and
-- genfill.request checks membership here (sql/functions/request.sql).

CREATE TABLE genfill.request_kinds (
  kind    text PRIMARY KEY,
  -- The service that runs the kind: planner, projector or reconciler.
  service text NOT NULL
);

-- The kinds every genfill up to this one knew, so the foreign key holds for the requests
-- already recorded; migrate then syncs the table with the running code's registry.
INSERT INTO genfill.request_kinds (kind, service) VALUES
  ('plan', 'planner'),
  ('repair', 'planner'),
  ('reconcile', 'reconciler'),
  ('seal', 'projector'),
  ('unseal', 'projector'),
  ('catchup', 'projector'),
  ('cutover', 'projector'),
  ('rollback', 'projector');

ALTER TABLE genfill.requests DROP CONSTRAINT requests_kind_check;
ALTER TABLE genfill.requests ADD CONSTRAINT requests_kind_fkey FOREIGN KEY (kind) REFERENCES genfill.request_kinds (kind);

-- Written only by migrate (the owner); read by whoever reads genfill.requests.
ALTER TABLE genfill.request_kinds OWNER TO genfill_owner;
GRANT SELECT ON genfill.request_kinds TO genfill_operator, genfill_approver, genfill_reader, genfill_service;
