-- TRUNCATE fires no row event and has no transition table: a captured table refuses it.
CREATE OR REPLACE FUNCTION genfill.capture_refuse_truncate() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RAISE EXCEPTION 'refused: TRUNCATE of %.% is not captured by genfill (no event would reach the change log)', TG_TABLE_SCHEMA, TG_TABLE_NAME
    USING ERRCODE = 'GFR01',
          HINT = 'DELETE the rows instead (captured), or run `genfill capture remove` first (refused while a release on the table is open)';
END $$;
ALTER FUNCTION genfill.capture_refuse_truncate() OWNER TO genfill_owner;
