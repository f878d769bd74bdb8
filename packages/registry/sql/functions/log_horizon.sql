-- The horizon: the containment-minimum of every part and of the current snapshot (with no
-- part, what every transaction finished before now is below it). Take it on the primary.
CREATE OR REPLACE FUNCTION genfill.log_horizon() RETURNS pg_snapshot
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT genfill.containment_min(s.snapshot)
    FROM (SELECT p.snapshot FROM genfill.log_horizon_parts() p UNION ALL SELECT pg_current_snapshot()) AS s
$$;
ALTER FUNCTION genfill.log_horizon() OWNER TO genfill_owner;
