-- 0007_findings: a reconciliation's findings live in the registry, beside its verdict (SPEC
-- invariant 10). Until now the complete list was an NDJSON file on the machine that ran the
-- reconciliation (reconciliations.findings_path); a service's findings were out of reach of
-- every other machine. The reconciler now inserts every finding in the transaction that
-- stores the reconciliation, and the NDJSON file is an export of these rows.
-- findings_path stays (older rows name their file) and is NULL for new rows.
-- Add-only: never edit this file once landed; add 0008_… instead.

-- One row per finding, in the order the reconciler found them (`seq` from 1). The columns are
-- the fields of an NDJSON line: `check` and `column` are SQL keywords, hence check_name and
-- column_name. `key` keeps PostgreSQL's JSON of the key values (bigints keep every digit).
CREATE TABLE genfill.reconciliation_findings (
  reconciliation_id bigint NOT NULL REFERENCES genfill.reconciliations (id),
  seq               integer NOT NULL CHECK (seq > 0),
  -- NULL for a release-wide finding (coverage, dependency_changed, outside_partitions, null_time).
  partition         text,
  kind              text NOT NULL,
  check_name        text NOT NULL,
  column_name       text,
  key               jsonb,
  detail            jsonb,
  PRIMARY KEY (reconciliation_id, seq)
);

CREATE TRIGGER reconciliation_findings_append_only BEFORE UPDATE OR DELETE ON genfill.reconciliation_findings
  FOR EACH ROW EXECUTE FUNCTION genfill.refuse_change();
CREATE TRIGGER reconciliation_findings_no_truncate BEFORE TRUNCATE ON genfill.reconciliation_findings
  FOR EACH STATEMENT EXECUTE FUNCTION genfill.refuse_change();

ALTER TABLE genfill.reconciliation_findings OWNER TO genfill_owner;

GRANT SELECT ON genfill.reconciliation_findings TO genfill_operator, genfill_approver, genfill_reader, genfill_service;
-- The fleet's service role alone writes reconciliations (0006), and with them their findings.
GRANT INSERT ON genfill.reconciliation_findings TO genfill_service;
