// The privilege model read back from the catalogue (SPEC "Identity and roles", issue 28): after a
// database has been through what creates relations at run time — adopt (the parent, a generation
// and the view), capture install (change-log partitions, capture functions), an ingress mirror, a
// submitted and planned release (the candidate's generation table) — every relation, sequence and
// schema genfill owns is enumerated from pg_class/pg_namespace, and every people role (and PUBLIC,
// and a login with no genfill role) is asked for every write privilege: none may hold one. Nothing
// here is a hand-kept list of tables, so a table added later is checked without anyone
// remembering to. Functions are the other way round: EXECUTE grants are compared with a reviewed
// allow-list kept below, so any new grant (or a grant dropped) fails until someone reviews it.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { createExampleSchema, dailyRelease, EXAMPLE_TRANSFORM, seedOrders, workspace, writeRelease } from './support/fixtures.ts';
import { mirrorDdl } from './support/ingress.ts';
import { createTestQueues, REDIS_URL } from './support/redis.ts';

const db = await createTestDatabase('privcat');
const queues = createTestQueues('privcat');
const env = { DATABASE_URL: db.url, REDIS_URL, GENFILL_QUEUE_PREFIX: queues.prefix, GENFILL_LOG_LEVEL: 'warn' };
const cli = (...args: string[]) => runCli(args, env);

/** The roles a person (or an application reading for people) holds, PUBLIC, and a login outside genfill. */
const PEOPLE = ['genfill_operator', 'genfill_approver', 'genfill_reader', 'genfill_api', 'public', 'genfill_privcat_nobody'];
const TABLE_WRITES = ['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER'];

/**
 * Who may EXECUTE each genfill function, reviewed. SECURITY DEFINER functions are verbs or fleet
 * steps and name their grantees; `PUBLIC` appears only on SECURITY INVOKER helpers, which run
 * with the caller's own rights and so let nobody do what they could not do without them (the
 * row hash, canonical text, snapshot arithmetic, trigger bodies). Keys are regprocedure text.
 */
const EXECUTE_ALLOW_LIST: Record<string, string[]> = {
  'genfill.add_generation(text,text)': ['genfill_service'], // definer
  'genfill.analyze_generation(text,text)': ['genfill_service'], // definer
  'genfill.approval_chain(text)': ['genfill_approver', 'genfill_operator', 'genfill_reader', 'genfill_service'], // definer
  'genfill.approve(text,bigint)': ['genfill_approver'], // definer
  'genfill.cancel_release(text,text,jsonb)': ['genfill_operator', 'genfill_service'], // definer
  'genfill.canon(anyelement)': ['PUBLIC'],
  'genfill.canon(bigint)': ['PUBLIC'],
  'genfill.canon(bytea)': ['PUBLIC'],
  'genfill.canon(date)': ['PUBLIC'],
  'genfill.canon(double precision)': ['PUBLIC'],
  'genfill.canon(integer)': ['PUBLIC'],
  'genfill.canon(interval)': ['PUBLIC'],
  'genfill.canon(json)': ['PUBLIC'],
  'genfill.canon(numeric)': ['PUBLIC'],
  'genfill.canon(real)': ['PUBLIC'],
  'genfill.canon(smallint)': ['PUBLIC'],
  'genfill.canon(text)': ['PUBLIC'],
  'genfill.canon(time without time zone)': ['PUBLIC'],
  'genfill.canon(timestamp with time zone)': ['PUBLIC'],
  'genfill.canon(timestamp without time zone)': ['PUBLIC'],
  'genfill.capture_columns(regclass)': ['PUBLIC'],
  'genfill.capture_ddl_check(oid[],text[],text)': ['genfill_service'], // definer
  'genfill.capture_ddl_drop()': ['PUBLIC'],
  'genfill.capture_ddl_end()': ['PUBLIC'],
  'genfill.capture_ddl_rewrite()': [], // definer: an event trigger function, called only as one
  'genfill.capture_ddl_start()': ['PUBLIC'],
  'genfill.capture_ddl_type_end()': [], // definer: an event trigger function
  'genfill.capture_ddl_type_start()': [], // definer: an event trigger function
  'genfill.capture_drop_functions(oid)': ['genfill_service'], // definer
  'genfill.capture_grant_owner(oid)': [],
  'genfill.capture_key_problem(regclass,text[])': ['PUBLIC'],
  'genfill.capture_keys(regclass)': ['PUBLIC'],
  'genfill.capture_log_status(text)': ['genfill_approver', 'genfill_operator', 'genfill_reader', 'genfill_service'], // definer
  'genfill.capture_prepare(regclass,text[])': ['genfill_service'], // definer
  'genfill.capture_problems(oid,text,text[])': ['PUBLIC'],
  'genfill.capture_refuse_truncate()': ['PUBLIC'],
  'genfill.capture_type_shapes()': [], // definer-called: the rewrite guard's type comparison
  'genfill.change_log_add_partitions(integer,bigint)': ['genfill_service'], // definer
  'genfill.change_log_partitions()': ['PUBLIC'],
  'genfill.change_log_prune_default(pg_snapshot,integer)': ['genfill_service'], // definer
  'genfill.commit_partition(text,text,integer,text,text,text,pg_snapshot,jsonb,bigint,bigint,jsonb,numeric,numeric,jsonb,bigint)': ['genfill_service'],
  'genfill.compact_projector_tombstones(pg_snapshot,integer)': ['genfill_service'], // definer
  'genfill.containment_min(pg_snapshot)': ['PUBLIC'],
  'genfill.create_parent(text,regclass,text[])': ['genfill_service'], // definer
  'genfill.create_target_view(text)': ['genfill_service'], // definer
  'genfill.current_principal()': ['PUBLIC'],
  'genfill.current_principal_kind()': ['PUBLIC'],
  'genfill.cutover_preconditions(text,text,pg_snapshot,bigint,numeric)': ['genfill_service'], // definer
  'genfill.cutover_switch(text,bigint,text,pg_snapshot,bigint,numeric)': ['genfill_service'], // definer
  'genfill.dataset_pending(text,integer)': ['genfill_approver', 'genfill_operator', 'genfill_reader', 'genfill_service'], // definer
  'genfill.fill_principal()': ['PUBLIC'],
  'genfill.fill_submitted_kind()': ['PUBLIC'],
  'genfill.generation_gone(text,text)': ['PUBLIC'],
  'genfill.generation_retention(text)': ['PUBLIC'],
  'genfill.generation_table(text,text)': ['PUBLIC'],
  'genfill.guard_release()': ['PUBLIC'],
  'genfill.guard_throttle_decision()': ['PUBLIC'],
  'genfill.ingest_apply(text)': ['genfill_api', 'genfill_operator', 'genfill_service'], // definer
  'genfill.ingress_compact_tombstones(text)': ['genfill_api', 'genfill_operator', 'genfill_service'], // definer
  'genfill.ingress_install(regclass,text)': [], // definer
  'genfill.ingress_mirror_of(text)': [],
  'genfill.ingress_pending(text,bigint)': ['genfill_approver', 'genfill_operator', 'genfill_reader', 'genfill_service'], // definer
  'genfill.ingress_record_conflict(text,jsonb)': [], // definer
  'genfill.lock_relation_name(text,text)': ['PUBLIC'],
  'genfill.log_horizon()': ['PUBLIC'],
  'genfill.log_horizon_blockers(timestamp with time zone)': ['genfill_service'], // definer
  'genfill.log_horizon_parts()': ['PUBLIC'],
  'genfill.log_horizon_transactions(pg_snapshot)': ['genfill_service'], // definer
  'genfill.log_horizon_waits()': ['genfill_approver', 'genfill_operator', 'genfill_reader', 'genfill_service'], // definer
  'genfill.mark_dependency_stale(text,text[])': ['genfill_service'], // definer
  'genfill.mark_source_rewritten(oid,text,text[],jsonb)': [], // definer: called by the rewrite guard's definer functions only
  'genfill.partitions_at(text,timestamp with time zone[])': ['PUBLIC'],
  'genfill.person_mapping_sql(text,text)': ['genfill_approver', 'genfill_operator', 'genfill_reader', 'genfill_service'],
  'genfill.person_of(text,text)': ['genfill_approver', 'genfill_operator', 'genfill_reader', 'genfill_service'],
  'genfill.projector_acquire(text,text,integer)': ['genfill_service'], // definer
  'genfill.projector_lease_held(text,text,bigint)': ['genfill_service'], // definer
  'genfill.projector_release(text,text,bigint)': ['genfill_service'], // definer
  'genfill.projector_renew(text,text,bigint,integer)': ['genfill_service'], // definer
  'genfill.quarantine_key(text,jsonb,text)': ['genfill_operator', 'genfill_service'], // definer
  'genfill.quote_qualified(text)': ['PUBLIC'],
  'genfill.reader_lease(text,text,text,integer)': ['genfill_approver', 'genfill_operator', 'genfill_reader', 'genfill_service'], // definer
  'genfill.reader_lease_release(text,text,text)': ['genfill_approver', 'genfill_operator', 'genfill_reader', 'genfill_service'], // definer
  'genfill.record_board_action(text,text,jsonb)': ['genfill_operator'], // definer
  'genfill.record_generation_dropped(text,text,jsonb)': ['genfill_service'], // definer
  'genfill.record_release_cleanup(text,jsonb)': ['genfill_service'], // definer
  'genfill.refuse_change()': ['PUBLIC'],
  'genfill.release_is_open(text)': ['PUBLIC'],
  'genfill.release_spec_check(jsonb)': [],
  'genfill.releases_due_for_cleanup()': ['PUBLIC'],
  'genfill.request(text,text,jsonb)': ['genfill_operator', 'genfill_service'], // definer
  'genfill.request_args_problems(jsonb,jsonb,text)': [],
  'genfill.retire_generation(text,text)': ['genfill_service'], // definer
  'genfill.rollback_refusal(text)': ['genfill_approver', 'genfill_operator', 'genfill_reader', 'genfill_service'], // definer
  'genfill.rollback_seal(text,integer)': ['genfill_service'], // definer
  'genfill.rollback_switch(text,bigint,text,pg_snapshot)': ['genfill_service'], // definer
  'genfill.rollback_unseal(text,text)': ['genfill_service'], // definer
  'genfill.rollback_window(jsonb)': ['PUBLIC'],
  'genfill.row_hash(text[])': ['PUBLIC'],
  'genfill.seal_epoch(text,integer)': ['genfill_service'], // definer
  'genfill.set_operator_pause(text,boolean,text,jsonb)': ['genfill_operator', 'genfill_service'], // definer
  'genfill.setting(text)': ['genfill_approver', 'genfill_operator', 'genfill_reader', 'genfill_service'],
  'genfill.settings_check()': [],
  'genfill.snapshot_contains(pg_snapshot,pg_snapshot)': ['PUBLIC'],
  'genfill.snapshot_least(pg_snapshot,pg_snapshot)': ['PUBLIC'],
  'genfill.source_conflicts(text,bigint,integer)': ['genfill_approver', 'genfill_operator', 'genfill_reader', 'genfill_service'], // definer
  'genfill.source_events(regclass,bigint,integer)': ['genfill_approver', 'genfill_operator', 'genfill_reader', 'genfill_service'], // definer
  'genfill.source_rewrite_pending(text)': ['PUBLIC'],
  'genfill.source_read_check(regclass)': [],
  'genfill.submit_release(jsonb,text,text)': ['genfill_operator', 'genfill_service'], // definer
  'genfill.take_lock(text,text,text,integer)': ['genfill_service'], // definer
  'genfill.target_view_sql(text)': ['PUBLIC'],
  'genfill.transform_admissible(text)': ['genfill_service'], // definer
  'genfill.transform_read_problems(text,text,text[])': [],
  'genfill.unseal_epoch(text,text)': ['genfill_service'], // definer
};

const rows = async <T>(sql: string, values: unknown[] = []): Promise<T[]> => (await db.pool.query(sql, values)).rows as T[];

beforeAll(async () => {
  expect((await cli('migrate')).code).toBe(0);
  await db.pool.query(`DO $$ BEGIN CREATE ROLE genfill_privcat_nobody LOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`);
  await createExampleSchema(db.pool);
  await seedOrders(db.pool, { perDay: 4, days: 3 });
  await db.pool.query(`INSERT INTO public.orders_enriched
    SELECT order_id, created_at, region, amount_cents, round(amount_cents * 0.2) FROM public.orders`);
  const dir = workspace();
  const legacy = join(dir, 'legacy.sql');
  writeFileSync(legacy, EXAMPLE_TRANSFORM);
  const adopt = await cli('dataset', 'adopt', 'orders_enriched', '--source', 'public.orders', '--key', 'order_id',
    '--time', 'created_at', '--table', 'public.orders_enriched', '--generation', 'g1', '--transform', legacy);
  expect(adopt.code, adopt.stderr).toBe(0);
  const capture = await cli('capture', 'install', 'public.orders');
  expect(capture.code, capture.stderr).toBe(0);
  await db.pool.query(mirrorDdl('public.remote_orders'));
  const ingress = await cli('capture', 'install', 'public.remote_orders', '--ingress');
  expect(ingress.code, ingress.stderr).toBe(0);
  const release = writeRelease(dir, dailyRelease('privcat@1', 'privcat_daily', 3));
  const submit = await cli('release', 'submit', release);
  expect(submit.code, submit.stderr).toBe(0);
  const plan = await cli('plan', 'privcat@1');
  expect(plan.code, plan.stderr).toBe(0);
  // A live write, so the change log holds events in its partitions.
  await db.pool.query(`UPDATE public.orders SET amount_cents = amount_cents + 1 WHERE order_id <= 3`);
});
beforeEach(() => keepOnFailure(db));

/** Every schema genfill owns: the registry, the generations and any genfill_* helper schema. */
const GENFILL_SCHEMAS = `SELECT oid, nspname FROM pg_namespace WHERE nspname = 'genfill' OR nspname LIKE 'genfill\\_%'`;

describe('the catalogue holds no write privilege for people', () => {
  it('sees the relations a run creates (the check is not vacuous)', async () => {
    const kinds = await rows<{ nspname: string; relkind: string; n: number }>(
      `SELECT n.nspname, c.relkind::text AS relkind, count(*)::int AS n
         FROM pg_class c JOIN (${GENFILL_SCHEMAS}) n ON n.oid = c.relnamespace
        GROUP BY 1, 2`,
    );
    const count = (nsp: string, kind: string) => kinds.find((k) => k.nspname === nsp && k.relkind === kind)?.n ?? 0;
    expect(count('genfill', 'r')).toBeGreaterThan(30);
    expect(count('genfill', 'p')).toBeGreaterThan(0); // the change log
    expect(count('genfill', 'S')).toBeGreaterThan(5);
    expect(count('genfill_data', 'p')).toBeGreaterThanOrEqual(2); // two datasets' parents
    expect(count('genfill_data', 'r')).toBeGreaterThanOrEqual(2); // the adopted and the candidate generations
    const log = await rows<{ n: number }>(`SELECT count(*)::int AS n FROM pg_inherits WHERE inhparent = 'genfill.change_log'::regclass`);
    expect(log[0]!.n).toBeGreaterThan(1);
  });

  it('no people role, PUBLIC or outside login holds a write privilege on any genfill relation', async () => {
    const held = await rows<{ relation: string; role: string; privilege: string }>(
      `SELECT format('%I.%I', n.nspname, c.relname) AS relation, r.role, p.privilege
         FROM pg_class c JOIN (${GENFILL_SCHEMAS}) n ON n.oid = c.relnamespace
        CROSS JOIN unnest($1::text[]) AS r(role)
        CROSS JOIN unnest($2::text[]) AS p(privilege)
        WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')
          AND (has_table_privilege(r.role, c.oid, p.privilege)
               OR (p.privilege IN ('INSERT', 'UPDATE', 'REFERENCES') AND has_any_column_privilege(r.role, c.oid, p.privilege)))
        ORDER BY 1, 2, 3`,
      [PEOPLE, TABLE_WRITES],
    );
    expect(held).toEqual([]);
  });

  it('no people role, PUBLIC or outside login reads a relation holding row images or source keys', async () => {
    // The change log and every partition of it (made at install or later), and the ingress and
    // projector tables holding keys and images (migration 0025). People read aggregates through
    // owner functions and a source's events through genfill.source_events.
    const held = await rows<{ relation: string; role: string }>(
      `WITH private AS (
         SELECT c.oid FROM pg_class c
          WHERE c.oid IN ('genfill.change_log'::regclass, 'genfill.ingress_keys'::regclass,
                          'genfill.ingress_conflicts'::regclass, 'genfill.projector_tombstones'::regclass)
         UNION
         SELECT i.relid FROM pg_partition_tree('genfill.change_log'::regclass) i)
       SELECT p.oid::regclass::text AS relation, r.role FROM private p CROSS JOIN unnest($1::text[]) AS r(role)
        WHERE has_table_privilege(r.role, p.oid, 'SELECT') OR has_any_column_privilege(r.role, p.oid, 'SELECT')
        ORDER BY 1, 2`,
      [PEOPLE],
    );
    expect(held).toEqual([]);
    const parts = await rows<{ n: number }>(`SELECT count(*)::int AS n FROM pg_partition_tree('genfill.change_log'::regclass)`);
    expect(parts[0]!.n).toBeGreaterThan(2);
  });

  it('no people role can advance or set a genfill sequence', async () => {
    const held = await rows<{ sequence: string; role: string; privilege: string }>(
      `SELECT format('%I.%I', n.nspname, c.relname) AS sequence, r.role, p.privilege
         FROM pg_class c JOIN (${GENFILL_SCHEMAS}) n ON n.oid = c.relnamespace
        CROSS JOIN unnest($1::text[]) AS r(role)
        CROSS JOIN unnest(ARRAY['USAGE', 'UPDATE']) AS p(privilege)
        WHERE c.relkind = 'S' AND has_sequence_privilege(r.role, c.oid, p.privilege)
        ORDER BY 1, 2, 3`,
      [PEOPLE],
    );
    expect(held).toEqual([]);
  });

  it('no people role can create objects in a genfill schema (a shadowing function or table)', async () => {
    const held = await rows<{ schema: string; role: string }>(
      `SELECT n.nspname AS schema, r.role FROM (${GENFILL_SCHEMAS}) n CROSS JOIN unnest($1::text[]) AS r(role)
        WHERE has_schema_privilege(r.role, n.oid, 'CREATE') ORDER BY 1, 2`,
      [PEOPLE],
    );
    expect(held).toEqual([]);
  });
});

describe('function EXECUTE grants equal the reviewed allow-list', () => {
  const functions = () =>
    rows<{ fn: string; owner: string; definer: boolean; pinned: boolean; grantees: string[] }>(
      `SELECT p.oid::regprocedure::text AS fn, pg_get_userbyid(p.proowner) AS owner, p.prosecdef AS definer,
              coalesce(EXISTS (SELECT 1 FROM unnest(p.proconfig) s WHERE s LIKE 'search\\_path=%'), false) AS pinned,
              coalesce((SELECT array_agg(g.name ORDER BY g.name) FROM (
                   SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee)::text END AS name
                     FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                    WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner) g), '{}') AS grantees
         FROM pg_proc p JOIN (${GENFILL_SCHEMAS}) n ON n.oid = p.pronamespace
        -- Extension members (btree_gist's support functions) are the extension's, not genfill's.
        WHERE NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
          -- Capture makes one trigger function per captured table; they are checked below.
          AND p.proname !~ '^capture_[0-9]+_'
        ORDER BY 1`,
    );

  it('grants EXECUTE on every function to exactly the reviewed roles', async () => {
    const actual = Object.fromEntries((await functions()).map((f) => [f.fn, f.grantees]));
    expect(actual).toEqual(EXECUTE_ALLOW_LIST);
  });

  it('has genfill_owner own every function, and every SECURITY DEFINER one pin search_path and deny PUBLIC', async () => {
    const bad = (await functions()).filter((f) => f.owner !== 'genfill_owner' || (f.definer && (!f.pinned || f.grantees.includes('PUBLIC'))));
    expect(bad.map((f) => `${f.fn} owner=${f.owner} definer=${f.definer} pinned=${f.pinned} grantees=${f.grantees.join(',')}`)).toEqual([]);
  });
});
