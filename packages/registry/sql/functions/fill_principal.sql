-- Fills the principal column of every row a person's action writes from
-- genfill.current_principal(): a value the caller passed is overwritten, so no row can name
-- someone else. One BEFORE INSERT trigger per table with a principal column, below.
CREATE OR REPLACE FUNCTION genfill.fill_principal() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  NEW.principal := genfill.current_principal();
  RETURN NEW;
END $$;
ALTER FUNCTION genfill.fill_principal() OWNER TO genfill_owner;

CREATE OR REPLACE TRIGGER release_log_principal BEFORE INSERT ON genfill.release_log
  FOR EACH ROW EXECUTE FUNCTION genfill.fill_principal();
CREATE OR REPLACE TRIGGER dataset_log_principal BEFORE INSERT ON genfill.dataset_log
  FOR EACH ROW EXECUTE FUNCTION genfill.fill_principal();
CREATE OR REPLACE TRIGGER approvals_principal BEFORE INSERT ON genfill.approvals
  FOR EACH ROW EXECUTE FUNCTION genfill.fill_principal();
CREATE OR REPLACE TRIGGER reconciliations_principal BEFORE INSERT ON genfill.reconciliations
  FOR EACH ROW EXECUTE FUNCTION genfill.fill_principal();
CREATE OR REPLACE TRIGGER requests_principal BEFORE INSERT ON genfill.requests
  FOR EACH ROW EXECUTE FUNCTION genfill.fill_principal();
CREATE OR REPLACE TRIGGER ingress_conflicts_principal BEFORE INSERT ON genfill.ingress_conflicts
  FOR EACH ROW EXECUTE FUNCTION genfill.fill_principal();
CREATE OR REPLACE TRIGGER quarantined_keys_principal BEFORE INSERT ON genfill.quarantined_keys
  FOR EACH ROW EXECUTE FUNCTION genfill.fill_principal();
CREATE OR REPLACE TRIGGER catchup_rounds_principal BEFORE INSERT ON genfill.catchup_rounds
  FOR EACH ROW EXECUTE FUNCTION genfill.fill_principal();
CREATE OR REPLACE TRIGGER cutovers_principal BEFORE INSERT ON genfill.cutovers
  FOR EACH ROW EXECUTE FUNCTION genfill.fill_principal();
CREATE OR REPLACE TRIGGER reader_leases_principal BEFORE INSERT ON genfill.reader_leases
  FOR EACH ROW EXECUTE FUNCTION genfill.fill_principal();
CREATE OR REPLACE TRIGGER change_log_prunes_principal BEFORE INSERT ON genfill.change_log_prunes
  FOR EACH ROW EXECUTE FUNCTION genfill.fill_principal();
CREATE OR REPLACE TRIGGER switch_stops_principal BEFORE INSERT ON genfill.switch_stops
  FOR EACH ROW EXECUTE FUNCTION genfill.fill_principal();

-- The kind of a release's submitter (migration 0028), beside submitted_by, so the submitter
-- check of genfill.approve looks up the right person: a value the caller passed is overwritten.
CREATE OR REPLACE FUNCTION genfill.fill_submitted_kind() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  NEW.submitted_kind := genfill.current_principal_kind();
  RETURN NEW;
END $$;
ALTER FUNCTION genfill.fill_submitted_kind() OWNER TO genfill_owner;
CREATE OR REPLACE TRIGGER releases_submitted_kind BEFORE INSERT ON genfill.releases
  FOR EACH ROW EXECUTE FUNCTION genfill.fill_submitted_kind();
