-- 0028_persons: one person, one identity (issue 28; SPEC "Identity and roles", "People, not
-- principals"). Add-only: never edit this file once landed; add 0029_… instead.
--
-- A principal is who acted as the database or the API saw it: a login (session_user) or an API
-- token's subject. Before this migration "the submitter cannot approve" and "one approval per
-- approver" compared principals, so login alice and a token whose subject is alice counted as
-- two approvers, and a submitter holding an approver token under another subject approved their
-- own release. Now the owner writes down which person each principal is; genfill.approve and
-- genfill.approval_chain compare persons, and an approval by (or of a release submitted by) a
-- principal that maps to no person is refused with the SQL that maps it.
--
-- The kind tells a login from a token subject of the same name: genfill.current_principal_kind()
-- (sql/functions/current_principal.sql) says 'token' for a principal a genfill_api login names,
-- 'login' for session_user.

CREATE TABLE genfill.persons (
  person     text PRIMARY KEY CHECK (person <> ''),
  -- Free text for the owner: a name, a team, a ticket.
  note       text,
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE genfill.principal_persons (
  principal  text NOT NULL CHECK (principal <> ''),
  kind       text NOT NULL CHECK (kind IN ('login', 'token')),
  person     text NOT NULL REFERENCES genfill.persons (person),
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (principal, kind)
);
CREATE INDEX principal_persons_person_idx ON genfill.principal_persons (person);

-- Written by the owner only (the README's "Logins and persons" gives the statements); read by
-- the fleet and by people, who see who counts as whom.
ALTER TABLE genfill.persons OWNER TO genfill_owner;
ALTER TABLE genfill.principal_persons OWNER TO genfill_owner;
REVOKE ALL ON genfill.persons, genfill.principal_persons FROM PUBLIC;
GRANT SELECT ON genfill.persons, genfill.principal_persons TO genfill_service, genfill_operator, genfill_approver, genfill_reader;

-- An approval keeps the principal that acted (the log says who) and adds its kind and the
-- person it was counted as. Rows recorded before this migration have neither: they count by
-- principal, as they did when they were given (genfill.approval_chain).
ALTER TABLE genfill.approvals
  ADD COLUMN principal_kind text CHECK (principal_kind IN ('login', 'token')),
  ADD COLUMN person text REFERENCES genfill.persons (person);
-- One approval per person and reconciliation, whatever principal they use.
CREATE UNIQUE INDEX approvals_one_per_person ON genfill.approvals (release, reconciliation_id, person) WHERE person IS NOT NULL;

-- The kind of the submitter's principal, so the submitter check looks up the right person.
-- Filled by a trigger from genfill.current_principal_kind() (sql/functions/fill_principal.sql);
-- releases submitted before this migration were submitted by logins or through a service.
ALTER TABLE genfill.releases
  ADD COLUMN submitted_kind text NOT NULL DEFAULT 'login' CHECK (submitted_kind IN ('login', 'token'));

-- ---------------------------------------------------------------------------------------
-- Every service as a plain login (issue 28, finding 3). A generation adopted before this
-- migration kept only its former grants when adopt moved it under genfill_data (the owner's
-- default privileges cover only tables the owner creates), so a plain genfill_service login
-- could not read it: the planner's carry failed with "permission denied for table …__g2".
-- adopt now grants what the default privileges would have (packages/planner/src/adopt.ts);
-- this gives the generations adopted earlier the same.
-- Only the generation tables the registry names, nothing else that may live in genfill_data.
DO $$
DECLARE t regclass;
BEGIN
  FOR t IN SELECT to_regclass(format('genfill_data.%I', genfill.generation_table(g.dataset, g.generation)))
             FROM genfill.generations g LOOP
    CONTINUE WHEN t IS NULL;
    EXECUTE format('GRANT SELECT ON %s TO genfill_reader, genfill_operator, genfill_approver', t);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO genfill_service', t);
  END LOOP;
END $$;
