-- A release's rollbackWindow (ISO 8601, which interval input reads; default PT24H), or NULL
-- when the stored value cannot be read: then nothing it protects is ever retired by itself.
CREATE OR REPLACE FUNCTION genfill.rollback_window(p_spec jsonb) RETURNS interval
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN coalesce(nullif(p_spec->>'rollbackWindow', ''), 'PT24H')::interval;
EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow OR invalid_parameter_value THEN
  RETURN NULL;
END $$;
ALTER FUNCTION genfill.rollback_window(jsonb) OWNER TO genfill_owner;
