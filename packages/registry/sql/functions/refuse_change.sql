-- Refuses the statement that fired it: the trigger of every append-only table (the logs, the
-- evidence of reconciliations, rounds and prunes), of what never changes once written (stored
-- transforms) and of the frozen transition table. Migrations that add transitions disable
-- release_transitions_frozen around their INSERT.
CREATE OR REPLACE FUNCTION genfill.refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'genfill.% is append-only', TG_TABLE_NAME USING ERRCODE = 'insufficient_privilege';
END $$;
ALTER FUNCTION genfill.refuse_change() OWNER TO genfill_owner;

CREATE OR REPLACE TRIGGER release_log_append_only BEFORE UPDATE OR DELETE ON genfill.release_log
  FOR EACH ROW EXECUTE FUNCTION genfill.refuse_change();
CREATE OR REPLACE TRIGGER release_log_no_truncate BEFORE TRUNCATE ON genfill.release_log
  FOR EACH STATEMENT EXECUTE FUNCTION genfill.refuse_change();
CREATE OR REPLACE TRIGGER dataset_log_append_only BEFORE UPDATE OR DELETE ON genfill.dataset_log
  FOR EACH ROW EXECUTE FUNCTION genfill.refuse_change();
CREATE OR REPLACE TRIGGER dataset_log_no_truncate BEFORE TRUNCATE ON genfill.dataset_log
  FOR EACH STATEMENT EXECUTE FUNCTION genfill.refuse_change();
CREATE OR REPLACE TRIGGER reconciliations_append_only BEFORE UPDATE OR DELETE ON genfill.reconciliations
  FOR EACH ROW EXECUTE FUNCTION genfill.refuse_change();
CREATE OR REPLACE TRIGGER reconciliations_no_truncate BEFORE TRUNCATE ON genfill.reconciliations
  FOR EACH STATEMENT EXECUTE FUNCTION genfill.refuse_change();
CREATE OR REPLACE TRIGGER reconciliation_partitions_append_only BEFORE UPDATE OR DELETE ON genfill.reconciliation_partitions
  FOR EACH ROW EXECUTE FUNCTION genfill.refuse_change();
CREATE OR REPLACE TRIGGER reconciliation_partitions_no_truncate BEFORE TRUNCATE ON genfill.reconciliation_partitions
  FOR EACH STATEMENT EXECUTE FUNCTION genfill.refuse_change();
CREATE OR REPLACE TRIGGER throttle_decisions_append_only BEFORE UPDATE OR DELETE ON genfill.throttle_decisions
  FOR EACH ROW EXECUTE FUNCTION genfill.refuse_change();
CREATE OR REPLACE TRIGGER release_transitions_frozen BEFORE INSERT OR UPDATE OR DELETE ON genfill.release_transitions
  FOR EACH STATEMENT EXECUTE FUNCTION genfill.refuse_change();
CREATE OR REPLACE TRIGGER release_transitions_no_truncate BEFORE TRUNCATE ON genfill.release_transitions
  FOR EACH STATEMENT EXECUTE FUNCTION genfill.refuse_change();
CREATE OR REPLACE TRIGGER transforms_immutable BEFORE UPDATE OR DELETE ON genfill.transforms
  FOR EACH ROW EXECUTE FUNCTION genfill.refuse_change();
CREATE OR REPLACE TRIGGER transforms_no_truncate BEFORE TRUNCATE ON genfill.transforms
  FOR EACH STATEMENT EXECUTE FUNCTION genfill.refuse_change();
CREATE OR REPLACE TRIGGER throttle_decisions_no_truncate BEFORE TRUNCATE ON genfill.throttle_decisions
  FOR EACH STATEMENT EXECUTE FUNCTION genfill.refuse_change();
CREATE OR REPLACE TRIGGER reconciliation_findings_append_only BEFORE UPDATE OR DELETE ON genfill.reconciliation_findings
  FOR EACH ROW EXECUTE FUNCTION genfill.refuse_change();
CREATE OR REPLACE TRIGGER reconciliation_findings_no_truncate BEFORE TRUNCATE ON genfill.reconciliation_findings
  FOR EACH STATEMENT EXECUTE FUNCTION genfill.refuse_change();
CREATE OR REPLACE TRIGGER ingress_conflicts_append_only BEFORE UPDATE OR DELETE ON genfill.ingress_conflicts
  FOR EACH ROW EXECUTE FUNCTION genfill.refuse_change();
CREATE OR REPLACE TRIGGER ingress_conflicts_no_truncate BEFORE TRUNCATE ON genfill.ingress_conflicts
  FOR EACH STATEMENT EXECUTE FUNCTION genfill.refuse_change();
CREATE OR REPLACE TRIGGER epochs_no_truncate BEFORE TRUNCATE ON genfill.epochs
  FOR EACH STATEMENT EXECUTE FUNCTION genfill.refuse_change();
CREATE OR REPLACE TRIGGER quarantined_keys_append_only BEFORE UPDATE OR DELETE ON genfill.quarantined_keys
  FOR EACH ROW EXECUTE FUNCTION genfill.refuse_change();
CREATE OR REPLACE TRIGGER catchup_rounds_append_only BEFORE UPDATE OR DELETE ON genfill.catchup_rounds
  FOR EACH ROW EXECUTE FUNCTION genfill.refuse_change();
CREATE OR REPLACE TRIGGER change_log_prunes_append_only BEFORE UPDATE OR DELETE ON genfill.change_log_prunes
  FOR EACH ROW EXECUTE FUNCTION genfill.refuse_change();
