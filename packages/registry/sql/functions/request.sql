-- Multi-step verbs are requests: a person asks, the service that owns the work (planner:
-- plan and repair; reconciler: reconcile; projector: seal, unseal, catchup, cutover, rollback)
-- executes it under the service role with the requester as principal and records the outcome,
-- which the CLI waits for. This verb only records the ask; the services poll genfill.requests
-- (earlier definitions also sent pg_notify('genfill_requests'), which nothing listened to).
-- The kinds are genfill.request_kinds, which migrate keeps equal to the code's registry
-- (packages/contracts/src/requests.ts), each with its arguments' JSON Schema.
--
-- Bounded (migration 0026), so junk cannot queue in front of real work (requests are served
-- oldest first):
--   - the arguments must fit the kind's schema (GFQ03, DETAIL the problems as
--     [{path, message}]): keys, types, lengths and bounds such as seal's waitMs ≤ 30 minutes.
--     The service that runs the request parses them again with the code's schema;
--   - one open (PENDING or RUNNING) request per kind and release: asking again with the same
--     arguments returns the open request's id (the CLI then waits for it); with other
--     arguments it is refused (GFQ01) until that one finishes;
--   - a principal has at most request.max_open_per_principal open requests (GFQ02, retryable).
-- The checks and the insert are serialized by a SHARE ROW EXCLUSIVE lock on genfill.requests,
-- which only the owner (this verb) can take: the services' claims wait for it at most one
-- insert long, and no person's lock can hold it up (people may not lock the table past ACCESS
-- SHARE, which does not conflict).
CREATE OR REPLACE FUNCTION genfill.request(p_kind text, p_release text, p_args jsonb)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_id bigint;
  v_schema jsonb;
  v_args jsonb := coalesce(p_args, '{}');
  v_problems jsonb;
  v_open record;
  v_principal text := genfill.current_principal();
  v_cap bigint;
  v_count bigint;
BEGIN
  SELECT k.args_schema INTO v_schema FROM genfill.request_kinds k WHERE k.kind = p_kind;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'unknown request kind %: the kinds are %', p_kind,
      (SELECT string_agg(k.kind, ', ' ORDER BY k.kind) FROM genfill.request_kinds k)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF jsonb_typeof(v_args) <> 'object' THEN
    RAISE EXCEPTION 'the arguments of a request are a JSON object, not %', jsonb_typeof(v_args)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  v_problems := genfill.request_args_problems(v_schema, v_args, 'args');
  IF jsonb_array_length(v_problems) > 0 THEN
    RAISE EXCEPTION 'the arguments of a % request do not fit its schema: %', p_kind,
      (SELECT string_agg(format('%s: %s', p->>'path', p->>'message'), '; ') FROM jsonb_array_elements(v_problems) p)
      USING ERRCODE = 'GFQ03', DETAIL = v_problems::text;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM genfill.releases r WHERE r.id = p_release) THEN
    RAISE EXCEPTION 'release % does not exist: submit it with `genfill release submit <file>`', p_release USING ERRCODE = 'GFN01';
  END IF;

  LOCK TABLE genfill.requests IN SHARE ROW EXCLUSIVE MODE;
  SELECT q.id, q.args, q.principal, q.state INTO v_open FROM genfill.requests q
   WHERE q.kind = p_kind AND q.release = p_release AND q.state IN ('PENDING', 'RUNNING')
   ORDER BY q.id LIMIT 1;
  IF FOUND THEN
    IF v_open.args = v_args THEN
      RETURN v_open.id;
    END IF;
    RAISE EXCEPTION 'a % request for release % is open already (#%, %, asked by %, with arguments %): wait until it finishes (`genfill status %` shows it), then ask again',
      p_kind, p_release, v_open.id, v_open.state, v_open.principal, v_open.args, p_release
      USING ERRCODE = 'GFQ01', DETAIL = jsonb_build_object('request', v_open.id, 'state', v_open.state)::text;
  END IF;
  v_cap := genfill.setting('request.max_open_per_principal')::bigint;
  SELECT count(*) INTO v_count FROM genfill.requests q WHERE q.principal = v_principal AND q.state IN ('PENDING', 'RUNNING');
  IF v_count >= v_cap THEN
    RAISE EXCEPTION '% has % open requests, the most the owner allows (request.max_open_per_principal): wait for some to finish, then ask again',
      v_principal, v_count
      USING ERRCODE = 'GFQ02', DETAIL = jsonb_build_object('open', v_count, 'max', v_cap)::text;
  END IF;
  INSERT INTO genfill.requests (kind, release, args) VALUES (p_kind, p_release, v_args) RETURNING id INTO v_id;
  RETURN v_id;
END $$;
ALTER FUNCTION genfill.request(text, text, jsonb) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.request(text, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.request(text, text, jsonb) TO genfill_operator, genfill_service;

-- The problems of `p_value` against `p_schema`, as [{path, message}] (empty when it fits): the
-- subset of JSON Schema that z.toJSONSchema writes for the request kinds — object (properties,
-- required, additionalProperties false), array (items, minItems, maxItems), string (minLength,
-- maxLength), integer and number (minimum, maximum, exclusiveMinimum, exclusiveMaximum),
-- boolean. migrate refuses to sync a schema that uses any other keyword
-- (packages/contracts/src/requests.ts), so nothing here is silently ignored. Internal.
CREATE OR REPLACE FUNCTION genfill.request_args_problems(p_schema jsonb, p_value jsonb, p_path text)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  t text := p_schema->>'type';
  vt text := jsonb_typeof(p_value);
  out jsonb := '[]';
  k text;
  i integer;
  n numeric;
BEGIN
  IF t = 'object' THEN
    IF vt <> 'object' THEN
      RETURN jsonb_build_array(jsonb_build_object('path', p_path, 'message', format('expected an object, not %s', vt)));
    END IF;
    FOR k IN SELECT jsonb_object_keys(p_value) ORDER BY 1 LOOP
      IF p_schema->'properties' ? k THEN
        out := out || genfill.request_args_problems(p_schema->'properties'->k, p_value->k, p_path || '.' || k);
      ELSIF p_schema->'additionalProperties' = 'false' THEN
        out := out || jsonb_build_object('path', p_path || '.' || k, 'message', 'unknown key');
      END IF;
    END LOOP;
    FOR k IN SELECT jsonb_array_elements_text(coalesce(p_schema->'required', '[]')) LOOP
      IF NOT p_value ? k THEN
        out := out || jsonb_build_object('path', p_path || '.' || k, 'message', 'required');
      END IF;
    END LOOP;
    RETURN out;
  ELSIF t = 'array' THEN
    IF vt <> 'array' THEN
      RETURN jsonb_build_array(jsonb_build_object('path', p_path, 'message', format('expected an array, not %s', vt)));
    END IF;
    IF jsonb_array_length(p_value) > (p_schema->>'maxItems')::numeric THEN
      RETURN jsonb_build_array(jsonb_build_object('path', p_path, 'message', format('at most %s items', p_schema->>'maxItems')));
    END IF;
    IF jsonb_array_length(p_value) < (p_schema->>'minItems')::numeric THEN
      RETURN jsonb_build_array(jsonb_build_object('path', p_path, 'message', format('at least %s items', p_schema->>'minItems')));
    END IF;
    IF p_schema ? 'items' THEN
      FOR i IN 0 .. jsonb_array_length(p_value) - 1 LOOP
        out := out || genfill.request_args_problems(p_schema->'items', p_value->i, p_path || '.' || i);
        EXIT WHEN jsonb_array_length(out) >= 20;
      END LOOP;
    END IF;
    RETURN out;
  ELSIF t = 'string' THEN
    IF vt <> 'string' THEN
      RETURN jsonb_build_array(jsonb_build_object('path', p_path, 'message', format('expected a string, not %s', vt)));
    END IF;
    IF length(p_value #>> '{}') > (p_schema->>'maxLength')::numeric THEN
      RETURN jsonb_build_array(jsonb_build_object('path', p_path, 'message', format('at most %s characters', p_schema->>'maxLength')));
    END IF;
    IF length(p_value #>> '{}') < (p_schema->>'minLength')::numeric THEN
      RETURN jsonb_build_array(jsonb_build_object('path', p_path, 'message', format('at least %s characters', p_schema->>'minLength')));
    END IF;
    RETURN out;
  ELSIF t = 'boolean' THEN
    IF vt <> 'boolean' THEN
      RETURN jsonb_build_array(jsonb_build_object('path', p_path, 'message', format('expected a boolean, not %s', vt)));
    END IF;
    RETURN out;
  ELSIF t IN ('integer', 'number') THEN
    IF vt <> 'number' THEN
      RETURN jsonb_build_array(jsonb_build_object('path', p_path, 'message', format('expected %s, not %s', CASE t WHEN 'integer' THEN 'an integer' ELSE 'a number' END, vt)));
    END IF;
    n := (p_value #>> '{}')::numeric;
    IF t = 'integer' AND n <> trunc(n) THEN
      RETURN jsonb_build_array(jsonb_build_object('path', p_path, 'message', 'expected an integer'));
    END IF;
    IF n > (p_schema->>'maximum')::numeric OR n >= (p_schema->>'exclusiveMaximum')::numeric THEN
      RETURN jsonb_build_array(jsonb_build_object('path', p_path, 'message',
        format('at most %s', coalesce(p_schema->>'maximum', format('below %s', p_schema->>'exclusiveMaximum')))));
    END IF;
    IF n < (p_schema->>'minimum')::numeric OR n <= (p_schema->>'exclusiveMinimum')::numeric THEN
      RETURN jsonb_build_array(jsonb_build_object('path', p_path, 'message',
        format('at least %s', coalesce(p_schema->>'minimum', format('above %s', p_schema->>'exclusiveMinimum')))));
    END IF;
    RETURN out;
  END IF;
  -- A schema without a type this function knows admits nothing.
  RETURN jsonb_build_array(jsonb_build_object('path', p_path, 'message', format('the schema of %s has no type genfill checks (%s)', p_path, coalesce(t, 'none'))));
END $$;
ALTER FUNCTION genfill.request_args_problems(jsonb, jsonb, text) OWNER TO genfill_owner;
REVOKE ALL ON FUNCTION genfill.request_args_problems(jsonb, jsonb, text) FROM PUBLIC;
