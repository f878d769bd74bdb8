-- Owner-held settings (migration 0026): the bounds and retentions the verbs apply, whatever
-- their caller asks. genfill.setting(name) is the getter the verbs use (its text; the caller
-- casts to the setting's type, which the trigger below has checked). A missing setting is a
-- broken install, named as such (GFQ07).
CREATE OR REPLACE FUNCTION genfill.setting(p_name text) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v text;
BEGIN
  SELECT s.value INTO v FROM genfill.settings s WHERE s.name = p_name;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'genfill.settings has no setting %: run `genfill migrate` as the owner', p_name USING ERRCODE = 'GFQ07';
  END IF;
  RETURN v;
END $$;
ALTER FUNCTION genfill.setting(text) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.setting(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.setting(text) TO genfill_service, genfill_operator, genfill_approver, genfill_reader;

-- A value must read as its type: a bigint above 0, an interval of at least 0. Stamps who and when.
CREATE OR REPLACE FUNCTION genfill.settings_check() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  ok boolean;
BEGIN
  BEGIN
    ok := CASE NEW.type WHEN 'bigint' THEN NEW.value::bigint > 0 WHEN 'interval' THEN NEW.value::interval >= interval '0' END;
  EXCEPTION WHEN data_exception THEN
    ok := false;
  END;
  IF ok IS NOT TRUE THEN
    RAISE EXCEPTION 'setting %: % is not %', NEW.name, NEW.value,
      CASE NEW.type WHEN 'bigint' THEN 'a whole number above 0' ELSE 'a duration of at least 0 (e.g. ''7 days'')' END
      USING ERRCODE = 'GFQ07';
  END IF;
  NEW.updated_at := now();
  NEW.updated_by := session_user;
  RETURN NEW;
END $$;
ALTER FUNCTION genfill.settings_check() OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.settings_check() FROM PUBLIC;

CREATE OR REPLACE TRIGGER settings_check BEFORE INSERT OR UPDATE ON genfill.settings
  FOR EACH ROW EXECUTE FUNCTION genfill.settings_check();
