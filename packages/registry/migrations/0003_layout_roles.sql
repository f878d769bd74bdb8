-- Roles and the generation layout (SPEC "Storage layout", "Identity and roles").
--
-- genfill_owner owns the registry and every generation table; services log in as a member
-- of it. People get genfill_operator or genfill_approver; they never write a generation
-- table: the steps that need the owner run through SECURITY DEFINER functions below.

DO $$
DECLARE r text;
BEGIN
  FOREACH r IN ARRAY ARRAY['genfill_owner', 'genfill_operator', 'genfill_approver'] LOOP
    BEGIN
      EXECUTE format('CREATE ROLE %I NOLOGIN', r);
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
      NULL; -- roles are cluster-wide: another database (or a concurrent migrate) made it
    END;
  END LOOP;
END $$;

-- Dataset-level actions (adopt, and later cutover and rollback), append-only like release_log.
CREATE TABLE genfill.dataset_log (
  id          bigserial PRIMARY KEY,
  dataset     text NOT NULL REFERENCES genfill.datasets (name),
  action      text NOT NULL,
  generation  text,
  principal   text NOT NULL DEFAULT session_user,
  at          timestamptz NOT NULL DEFAULT clock_timestamp(),
  detail      jsonb
);
CREATE TRIGGER dataset_log_append_only BEFORE UPDATE OR DELETE ON genfill.dataset_log
  FOR EACH ROW EXECUTE FUNCTION genfill.refuse_change();
CREATE TRIGGER dataset_log_no_truncate BEFORE TRUNCATE ON genfill.dataset_log
  FOR EACH STATEMENT EXECUTE FUNCTION genfill.refuse_change();

-- Generation tables live apart from the registry and from the users' schemas.
CREATE SCHEMA genfill_data;

ALTER SCHEMA genfill OWNER TO genfill_owner;
ALTER SCHEMA genfill_data OWNER TO genfill_owner;
DO $$
DECLARE t record;
BEGIN
  -- Sequences of serial columns follow their table.
  FOR t IN SELECT c.oid::regclass AS rel, c.relkind FROM pg_class c
            WHERE c.relnamespace = 'genfill'::regnamespace AND c.relkind IN ('r', 'p', 'v') LOOP
    EXECUTE format('ALTER %s %s OWNER TO genfill_owner', CASE t.relkind WHEN 'v' THEN 'VIEW' ELSE 'TABLE' END, t.rel);
  END LOOP;
END $$;

GRANT USAGE ON SCHEMA genfill TO genfill_operator, genfill_approver;
GRANT SELECT ON ALL TABLES IN SCHEMA genfill TO genfill_operator, genfill_approver;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA genfill TO genfill_operator, genfill_approver;
-- Operators run submit, plan, pause and the like; registry rows are never deleted by people.
GRANT INSERT, UPDATE ON genfill.releases, genfill.datasets, genfill.generations, genfill.transforms,
  genfill.dependency_pins, genfill.manifests, genfill.partitions TO genfill_operator;
GRANT INSERT ON genfill.release_log, genfill.dataset_log TO genfill_operator, genfill_approver;
GRANT INSERT ON genfill.approvals TO genfill_approver;
GRANT USAGE ON SCHEMA genfill_data TO genfill_operator, genfill_approver;

-- The name of a generation's table: <dataset>__<generation>, within PostgreSQL's 63 bytes.
CREATE FUNCTION genfill.generation_table(p_dataset text, p_generation text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN p_dataset || '__' || p_generation;

-- Add a generation to a dataset's parent: CREATE TABLE + ATTACH PARTITION, never
-- CREATE TABLE … PARTITION OF (which locks the parent against readers). The CHECK
-- constraint lets ATTACH skip its validation scan. Idempotent.
CREATE FUNCTION genfill.add_generation(p_dataset text, p_generation text) RETURNS regclass
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  parent regclass := to_regclass(format('genfill_data.%I', p_dataset));
  child_name text := genfill.generation_table(p_dataset, p_generation);
  child regclass := to_regclass(format('genfill_data.%I', child_name));
BEGIN
  IF parent IS NULL THEN
    RAISE EXCEPTION 'dataset % has no generation table yet', p_dataset USING ERRCODE = 'undefined_table';
  END IF;
  IF octet_length(child_name) > 63 THEN
    RAISE EXCEPTION 'generation table name % is longer than 63 bytes: shorten the dataset or generation id', child_name
      USING ERRCODE = 'name_too_long';
  END IF;
  IF child IS NOT NULL AND EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = child AND inhparent = parent) THEN
    RETURN child;
  END IF;
  IF child IS NULL THEN
    EXECUTE format('CREATE TABLE genfill_data.%I (LIKE %s INCLUDING DEFAULTS)', child_name, parent);
    child := to_regclass(format('genfill_data.%I', child_name));
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = child AND conname = 'gf_generation_' || md5(p_generation)) THEN
    EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (generation = %L)', child, 'gf_generation_' || md5(p_generation), p_generation);
  END IF;
  EXECUTE format('ALTER TABLE %s ATTACH PARTITION %s FOR VALUES IN (%L)', parent, child, p_generation);
  EXECUTE format('REVOKE ALL ON %s FROM PUBLIC', child);
  RETURN child;
END $$;

-- The parent of a dataset's generations, shaped like a template relation (the adopted
-- table, or a view of the first transform's output): generation first, the template's
-- columns, then _gf_rev and _gf_deleted; primary key (generation, key…). No DEFAULT
-- partition: it would forbid DETACH … CONCURRENTLY.
CREATE FUNCTION genfill.create_parent(p_dataset text, p_template regclass, p_key text[]) RETURNS regclass
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  cols text;
  keys text;
BEGIN
  IF to_regclass(format('genfill_data.%I', p_dataset)) IS NOT NULL THEN
    RETURN to_regclass(format('genfill_data.%I', p_dataset));
  END IF;
  SELECT string_agg(format('%I %s', attname, format_type(atttypid, atttypmod)), ', ' ORDER BY attnum)
    INTO cols
    FROM pg_attribute
   WHERE attrelid = p_template AND attnum > 0 AND NOT attisdropped
     AND attname NOT IN ('generation', '_gf_rev', '_gf_deleted');
  SELECT string_agg(format('%I', k), ', ') INTO keys FROM unnest(p_key) AS k;
  EXECUTE format(
    'CREATE TABLE genfill_data.%I (generation text NOT NULL, %s, _gf_rev bigint NOT NULL DEFAULT 0, '
    '_gf_deleted boolean NOT NULL DEFAULT false, PRIMARY KEY (generation, %s)) PARTITION BY LIST (generation)',
    p_dataset, cols, keys);
  EXECUTE format('REVOKE ALL ON genfill_data.%I FROM PUBLIC', p_dataset);
  RETURN to_regclass(format('genfill_data.%I', p_dataset));
END $$;

-- The name users query becomes a view of the active generation through the pointer row, so
-- a cutover is an UPDATE of genfill.datasets, never DDL on the view. The subquery is an
-- initplan: run-time partition pruning leaves a one-partition scan.
CREATE FUNCTION genfill.target_view_sql(p_dataset text) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  cols text;
BEGIN
  SELECT string_agg(format('%I', attname), ', ' ORDER BY attnum) INTO cols
    FROM pg_attribute
   WHERE attrelid = format('genfill_data.%I', p_dataset)::regclass AND attnum > 0 AND NOT attisdropped
     AND attname NOT IN ('generation', '_gf_rev', '_gf_deleted');
  RETURN format(
    'SELECT %s FROM genfill_data.%I WHERE generation = (SELECT active_generation FROM genfill.datasets WHERE name = %L) AND NOT _gf_deleted',
    cols, p_dataset, p_dataset);
END $$;

-- A first generation's view, created by plan. genfill_owner needs CREATE on the target's
-- schema (GRANT CREATE ON SCHEMA public TO genfill_owner); adopt creates its view as the
-- adopting role instead.
CREATE FUNCTION genfill.create_target_view(p_dataset text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  target text;
BEGIN
  SELECT target_table INTO STRICT target FROM genfill.datasets WHERE name = p_dataset;
  IF to_regclass(target) IS NOT NULL THEN
    IF (SELECT relkind FROM pg_class WHERE oid = to_regclass(target)) <> 'v' THEN
      RAISE EXCEPTION '% exists and is not a genfill view: adopt it with genfill dataset adopt', target
        USING ERRCODE = 'duplicate_table';
    END IF;
    RETURN;
  END IF;
  EXECUTE format('CREATE VIEW %s AS %s', genfill.quote_qualified(target), genfill.target_view_sql(p_dataset));
END $$;

CREATE FUNCTION genfill.quote_qualified(p_name text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN format('%I.%I', split_part(p_name, '.', 1), split_part(p_name, '.', 2));

REVOKE ALL ON FUNCTION genfill.add_generation(text, text), genfill.create_parent(text, regclass, text[]),
  genfill.create_target_view(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION genfill.add_generation(text, text), genfill.create_parent(text, regclass, text[]),
  genfill.create_target_view(text) TO genfill_operator;
ALTER FUNCTION genfill.create_target_view(text) OWNER TO genfill_owner;
ALTER FUNCTION genfill.add_generation(text, text) OWNER TO genfill_owner;
ALTER FUNCTION genfill.create_parent(text, regclass, text[]) OWNER TO genfill_owner;
ALTER FUNCTION genfill.target_view_sql(text) OWNER TO genfill_owner;
ALTER FUNCTION genfill.generation_table(text, text) OWNER TO genfill_owner;
