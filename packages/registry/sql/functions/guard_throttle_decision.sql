-- A throttle decision counts only under the lease token current when it is written: one
-- written by a holder that lost the lease (or forged with another token) is refused.
CREATE OR REPLACE FUNCTION genfill.guard_throttle_decision() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM genfill.throttle_leases l
                  WHERE l.release = NEW.release AND l.token = NEW.token AND l.holder = NEW.holder) THEN
    RAISE EXCEPTION 'throttle decision for % under token % by % is not the current lease', NEW.release, NEW.token, NEW.holder
      USING ERRCODE = 'GFR01';
  END IF;
  RETURN NEW;
END $$;
ALTER FUNCTION genfill.guard_throttle_decision() OWNER TO genfill_owner;

CREATE OR REPLACE TRIGGER throttle_decisions_current_token BEFORE INSERT ON genfill.throttle_decisions
  FOR EACH ROW EXECUTE FUNCTION genfill.guard_throttle_decision();
