-- `genfill unseal <release>`: ingress reopens under a new epoch E+1 on the same generation,
-- the release goes back to the state it was sealed from. Writers of epoch E stay fenced.
CREATE OR REPLACE FUNCTION genfill.unseal_epoch(p_release text, p_reason text)
RETURNS TABLE (dataset text, epoch bigint, state text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  ds record;
  ep record;
BEGIN
  SELECT r.id, r.dataset, r.state INTO rel FROM genfill.releases r WHERE r.id = p_release FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'release % does not exist', p_release USING ERRCODE = 'GFN01';
  END IF;
  SELECT d.name, d.ingress_state, d.ingress_epoch, d.active_generation INTO ds FROM genfill.datasets d WHERE d.name = rel.dataset FOR UPDATE;
  SELECT * INTO ep FROM genfill.epochs e WHERE e.dataset = rel.dataset AND e.epoch = ds.ingress_epoch;
  IF ds.ingress_state <> 'SEALED' OR ep.release IS DISTINCT FROM p_release THEN
    RAISE EXCEPTION 'dataset % is not sealed by release % (ingress %, epoch %)%', rel.dataset, p_release, ds.ingress_state, ds.ingress_epoch,
      CASE WHEN ep.release IS NOT NULL AND ep.release <> p_release THEN format(', sealed by %s', ep.release) ELSE '' END
      USING ERRCODE = 'GFR01';
  END IF;
  IF rel.state NOT IN ('INGRESS_SEALED', 'CAUGHT_UP') THEN
    RAISE EXCEPTION 'release % is %: only a sealed (or caught-up) release is unsealed', p_release, rel.state USING ERRCODE = 'GFR01';
  END IF;
  UPDATE genfill.epochs e SET closed_at = clock_timestamp() WHERE e.dataset = rel.dataset AND e.epoch = ds.ingress_epoch;
  UPDATE genfill.datasets d SET ingress_state = 'OPEN', ingress_epoch = ds.ingress_epoch + 1 WHERE d.name = rel.dataset;
  INSERT INTO genfill.epochs (dataset, epoch, generation, opened_for, opened_by)
  VALUES (rel.dataset, ds.ingress_epoch + 1, ds.active_generation, format('unseal of %s', p_release), genfill.current_principal());
  UPDATE genfill.releases r SET state = ep.sealed_from, state_changed_at = now() WHERE r.id = p_release AND r.state = rel.state;
  INSERT INTO genfill.release_log (release, action, from_state, to_state, reason, detail)
  VALUES (p_release, 'unseal', rel.state, ep.sealed_from, p_reason,
          jsonb_build_object('dataset', rel.dataset, 'closedEpoch', ds.ingress_epoch, 'epoch', ds.ingress_epoch + 1));
  RETURN QUERY SELECT rel.dataset, ds.ingress_epoch + 1, ep.sealed_from;
END $$;
ALTER FUNCTION genfill.unseal_epoch(text, text) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.unseal_epoch(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.unseal_epoch(text, text) TO genfill_service;
