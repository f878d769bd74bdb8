-- Undo a rollback's seal: ingress reopens on the (still active) generation of the release under
-- a new epoch; the release stays ACTIVE.
CREATE OR REPLACE FUNCTION genfill.rollback_unseal(p_release text, p_reason text)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  ds record;
BEGIN
  SELECT r.dataset, r.generation, r.state INTO rel FROM genfill.releases r WHERE r.id = p_release;
  SELECT d.ingress_state, d.ingress_epoch, d.active_generation INTO ds FROM genfill.datasets d WHERE d.name = rel.dataset FOR UPDATE;
  IF ds.ingress_state <> 'SEALED' OR NOT EXISTS (
       SELECT 1 FROM genfill.epochs e WHERE e.dataset = rel.dataset AND e.epoch = ds.ingress_epoch AND e.release = p_release AND e.sealed_from = 'ACTIVE') THEN
    RETURN NULL;
  END IF;
  UPDATE genfill.epochs e SET closed_at = clock_timestamp() WHERE e.dataset = rel.dataset AND e.epoch = ds.ingress_epoch;
  UPDATE genfill.datasets d SET ingress_state = 'OPEN', ingress_epoch = ds.ingress_epoch + 1 WHERE d.name = rel.dataset;
  INSERT INTO genfill.epochs (dataset, epoch, generation, opened_for, opened_by)
  VALUES (rel.dataset, ds.ingress_epoch + 1, ds.active_generation, format('rollback of %s undone', p_release), genfill.current_principal());
  INSERT INTO genfill.release_log (release, action, reason, detail)
  VALUES (p_release, 'rollback-unseal', p_reason, jsonb_build_object('closedEpoch', ds.ingress_epoch, 'epoch', ds.ingress_epoch + 1));
  RETURN ds.ingress_epoch + 1;
END $$;
ALTER FUNCTION genfill.rollback_unseal(text, text) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.rollback_unseal(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.rollback_unseal(text, text) TO genfill_service;
