-- The transition table genfill.release_transitions, equal to packages/contracts/src/states.ts
-- (a test compares them), enforced by this trigger for every writer, the owner included.
-- Entering APPROVED is reserved to genfill.approve (it runs as genfill_owner); the columns a
-- release was submitted with never change.
CREATE OR REPLACE FUNCTION genfill.guard_release() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF (NEW.id, NEW.dataset, NEW.generation, NEW.expected_active, NEW.digest, NEW.spec, NEW.transform_digest, NEW.range,
      NEW.timezone, NEW.every, NEW.approvals_required, NEW.owner, NEW.deadline, NEW.submitted_by, NEW.submitted_at)
     IS DISTINCT FROM
     (OLD.id, OLD.dataset, OLD.generation, OLD.expected_active, OLD.digest, OLD.spec, OLD.transform_digest, OLD.range,
      OLD.timezone, OLD.every, OLD.approvals_required, OLD.owner, OLD.deadline, OLD.submitted_by, OLD.submitted_at) THEN
    RAISE EXCEPTION 'release %: what a release was submitted with never changes (submit a new release instead)', OLD.id
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF NEW.state IS DISTINCT FROM OLD.state THEN
    IF NOT EXISTS (SELECT 1 FROM genfill.release_transitions t WHERE t.from_state = OLD.state AND t.to_state = NEW.state) THEN
      RAISE EXCEPTION 'release %: % → % is not in the transition table', OLD.id, OLD.state, NEW.state
        USING ERRCODE = 'GFR01';
    END IF;
    IF NEW.state = 'APPROVED' AND current_user <> 'genfill_owner' THEN
      RAISE EXCEPTION 'release %: only genfill.approve moves a release to APPROVED', OLD.id
        USING ERRCODE = 'insufficient_privilege';
    END IF;
  END IF;
  RETURN NEW;
END $$;
ALTER FUNCTION genfill.guard_release() OWNER TO genfill_owner;

CREATE OR REPLACE TRIGGER releases_guard BEFORE UPDATE ON genfill.releases
  FOR EACH ROW EXECUTE FUNCTION genfill.guard_release();
