-- Why a rollback of p_release is refused now, or NULL: the release is not ACTIVE, its cutover is
-- not recorded, the generation it replaced is gone (retired), or another open release expects
-- the release's generation as its active one (it would lose its base).
CREATE OR REPLACE FUNCTION genfill.rollback_refusal(p_release text)
RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel record;
  co record;
  g record;
  v_other text;
BEGIN
  SELECT r.id, r.dataset, r.generation, r.state INTO rel FROM genfill.releases r WHERE r.id = p_release;
  IF NOT FOUND THEN
    RETURN format('release %s does not exist', p_release);
  END IF;
  IF rel.state <> 'ACTIVE' THEN
    RETURN format('release %s is %s: only the ACTIVE release is rolled back', p_release, rel.state);
  END IF;
  SELECT c.from_generation, c.switched_at INTO co FROM genfill.cutovers c
   WHERE c.release = p_release AND c.kind = 'cutover' AND c.state = 'DONE' ORDER BY c.id DESC LIMIT 1;
  IF NOT FOUND THEN
    RETURN format('release %s has no recorded cutover: nothing to roll back to', p_release);
  END IF;
  SELECT gg.state INTO g FROM genfill.generations gg WHERE gg.dataset = rel.dataset AND gg.generation = co.from_generation;
  IF g.state IS DISTINCT FROM 'RETAINED' OR to_regclass(format('genfill_data.%I', rel.dataset || '__' || co.from_generation)) IS NULL THEN
    RETURN format('generation %s, which %s replaced, is %s: it can no longer take readers back (roll forward with a new release instead)',
                  co.from_generation, p_release, CASE WHEN g.state = 'RETAINED' THEN 'dropped' ELSE lower(coalesce(g.state, 'missing')) END);
  END IF;
  SELECT string_agg(r.id, ', ' ORDER BY r.id) INTO v_other FROM genfill.releases r
   WHERE r.dataset = rel.dataset AND r.expected_active = rel.generation
     AND r.state NOT IN ('DRAFT', 'CANCELLED', 'ACTIVE', 'SUPERSEDED', 'RETIRED', 'ROLLED_BACK');
  IF v_other IS NOT NULL THEN
    RETURN format('release(s) %s expect %s as their active generation: cancel them (or let them finish) first', v_other, rel.generation);
  END IF;
  RETURN NULL;
END $$;
ALTER FUNCTION genfill.rollback_refusal(text) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.rollback_refusal(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.rollback_refusal(text) TO genfill_operator, genfill_approver, genfill_reader, genfill_service;
