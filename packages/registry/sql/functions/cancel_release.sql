-- `genfill cancel`: any open state → CANCELLED.
CREATE OR REPLACE FUNCTION genfill.cancel_release(p_release text, p_reason text, p_detail jsonb)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  counts jsonb;
  generation_detail jsonb := '{}';
BEGIN
  SELECT r.state, r.dataset, r.generation INTO rel FROM genfill.releases r WHERE r.id = p_release FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'release % does not exist: check the id with `genfill status`', p_release USING ERRCODE = 'GFN01';
  END IF;
  IF rel.state = 'CANCELLED' THEN
    RAISE EXCEPTION 'release % is already CANCELLED', p_release USING ERRCODE = 'GFR01';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM genfill.release_transitions t WHERE t.from_state = rel.state AND t.to_state = 'CANCELLED') THEN
    RAISE EXCEPTION 'release % is %: only an open release can be cancelled%', p_release, rel.state,
      CASE WHEN rel.state = 'ACTIVE' THEN format('; to undo a cutover use `genfill rollback %s`', p_release) ELSE '' END
      USING ERRCODE = 'GFR01';
  END IF;
  SELECT coalesce(jsonb_object_agg(s.status, s.n), '{}') INTO counts
    FROM (SELECT p.status, count(*) AS n FROM genfill.partitions p WHERE p.release = p_release GROUP BY p.status) s;
  UPDATE genfill.releases r SET state = 'CANCELLED', state_changed_at = now() WHERE r.id = p_release AND r.state = rel.state;
  -- The cancelled release's rows stay in its candidate generation, where a later release would
  -- inherit them (issue 13): the candidate is ABANDONED unless another open release still fills
  -- it. The row lock orders this against a plan adding a release to it (upsertCandidateGeneration).
  PERFORM 1 FROM genfill.generations g
    WHERE g.dataset = rel.dataset AND g.generation = rel.generation AND g.state = 'CANDIDATE' FOR UPDATE;
  IF FOUND THEN
    SELECT CASE WHEN count(*) = 0 THEN jsonb_build_object('abandonedGeneration', rel.generation)
                ELSE jsonb_build_object('generationKeptFor', jsonb_agg(o.id ORDER BY o.id)) END
      INTO generation_detail
      FROM genfill.releases o
     WHERE o.dataset = rel.dataset AND o.generation = rel.generation AND o.id <> p_release
       AND o.state NOT IN ('ACTIVE', 'RETIRED', 'ROLLED_BACK', 'CANCELLED');
    IF generation_detail ? 'abandonedGeneration' THEN
      UPDATE genfill.generations g SET state = 'ABANDONED'
       WHERE g.dataset = rel.dataset AND g.generation = rel.generation AND g.state = 'CANDIDATE';
    END IF;
  END IF;
  INSERT INTO genfill.release_log (release, action, from_state, to_state, reason, detail)
  VALUES (p_release, 'cancel', rel.state, 'CANCELLED', p_reason,
          jsonb_build_object('partitions', counts) || coalesce(p_detail, '{}') || generation_detail);
  RETURN rel.state;
END $$;
ALTER FUNCTION genfill.cancel_release(text, text, jsonb) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.cancel_release(text, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.cancel_release(text, text, jsonb) TO genfill_operator, genfill_service;
