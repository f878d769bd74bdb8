-- Multi-step verbs are requests: a person asks, the service that owns the work (planner:
-- plan and repair; reconciler: reconcile; projector: seal, unseal, catchup, cutover, rollback)
-- executes it under the service role with the requester as principal and records the outcome,
-- which the CLI waits for. This verb only records the ask; the services poll genfill.requests
-- (earlier definitions also sent pg_notify('genfill_requests'), which nothing listened to).
-- The kinds are genfill.request_kinds, which migrate keeps equal to the code's registry
-- (packages/contracts/src/requests.ts). The arguments must be a JSON object; the service that
-- runs the request parses them with its kind's schema before anything is done (a payload that
-- does not fit fails the request, exit 2).
CREATE OR REPLACE FUNCTION genfill.request(p_kind text, p_release text, p_args jsonb)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_id bigint;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM genfill.request_kinds k WHERE k.kind = p_kind) THEN
    RAISE EXCEPTION 'unknown request kind %: the kinds are %', p_kind,
      (SELECT string_agg(k.kind, ', ' ORDER BY k.kind) FROM genfill.request_kinds k)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF p_args IS NOT NULL AND jsonb_typeof(p_args) <> 'object' THEN
    RAISE EXCEPTION 'the arguments of a request are a JSON object, not %', jsonb_typeof(p_args)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM genfill.releases r WHERE r.id = p_release) THEN
    RAISE EXCEPTION 'release % does not exist: submit it with `genfill release submit <file>`', p_release USING ERRCODE = 'GFN01';
  END IF;
  INSERT INTO genfill.requests (kind, release, args) VALUES (p_kind, p_release, coalesce(p_args, '{}')) RETURNING id INTO v_id;
  RETURN v_id;
END $$;
ALTER FUNCTION genfill.request(text, text, jsonb) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.request(text, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.request(text, text, jsonb) TO genfill_operator, genfill_service;
