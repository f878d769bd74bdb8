// Issue 28, finding 1: an operator ran any SQL as the fleet. genfill.submit_release stored any
// transform text, the checks ran only in the CLI, and the planner created its template view
// over the simple-query protocol — so a transform that closed genfill's parentheses and went
// on with `; UPDATE genfill.datasets …; COMMIT; BEGIN; …` ran as the planner service. And a
// well-formed transform could read tables its submitter cannot read.
//
// Everything here is done as plain logins: an operator (genfill_h1_op) calling the verbs over a
// pg client, the planner as a plain genfill_service login (genfill_h1_svc) spawned as the
// genfill binary. The owner (here the superuser, standing in for genfill_owner) only sets up,
// allow-lists a function, and — to simulate a bypass — tampers with a stored transform.
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { buildPartition, claimPartition } from '@genfill/builder';
import { loadRelease } from '@genfill/contracts';
import { adoptDataset } from '@genfill/planner';
import { loadDataset } from '@genfill/projector';
import { driftCheck } from '@genfill/reconcile';
import { qualifiedGenerationTable } from '@genfill/registry';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure, urlAs } from './support/db.ts';
import { createExampleSchema, dailyRelease, EXAMPLE_TRANSFORM, registryCounts, seedOrders, workspace, writeRelease } from './support/fixtures.ts';
import { createTestQueues, keepQueuesOnFailure, REDIS_URL } from './support/redis.ts';
import { exited, waitFor } from './support/wait.ts';

const BIN = fileURLToPath(new URL('../apps/cli/bin/genfill.js', import.meta.url));
const db = await createTestDatabase('trust_transform');
const queues = createTestQueues('trust-transform');

const OP = 'genfill_h1_op';
const SVC = 'genfill_h1_svc';
const env = (login: string | null) => ({
  DATABASE_URL: login ? urlAs(db, login) : db.url,
  REDIS_URL,
  GENFILL_QUEUE_PREFIX: queues.prefix,
  GENFILL_LOG_LEVEL: 'warn',
});

const one = async (sql: string, values: unknown[] = []) => (await db.pool.query(sql, values)).rows[0];
const clients: pg.Client[] = [];
async function connectAs(login: string): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: urlAs(db, login) });
  c.on('error', () => undefined);
  await c.connect();
  clients.push(c);
  return c;
}

let planner: ChildProcess | undefined;
let operator: pg.Client;
/** The adopted dataset whose active pointer and rows the attack goes for. */
const ADOPTED = 'h1_enriched';
const ADOPTED_TABLE = qualifiedGenerationTable(ADOPTED, 'g1');
const ROWS_DIGEST = `SELECT count(*)::int AS n, md5(string_agg(t::text, ',' ORDER BY order_id)) AS h FROM ${ADOPTED_TABLE} t`;

/** A first-generation release of its own dataset over two days, with this transform and dependencies. */
function release(id: string, dataset: string, transform: string, dependencies: string[] = ['public.tax_rates']) {
  const spec = dailyRelease(id, dataset, 2, { dependencies });
  const loaded = loadRelease(writeRelease(workspace(), spec, { transform }));
  return loaded;
}

/** The operator calls the verb directly, as from psql: no CLI, no checks of its own. */
async function submitAsOperator(r: ReturnType<typeof release>): Promise<void> {
  await operator.query('SELECT genfill.submit_release($1, $2, $3)', [JSON.stringify(r.spec), r.digest, r.transformSql]);
}

/** The operator asks for a plan; the planner service (a plain genfill_service login) runs it. */
async function planByRequest(id: string): Promise<{ state: string; error: any }> {
  const { rows } = await operator.query<{ id: string }>(`SELECT genfill.request('plan', $1, '{}') AS id`, [id]);
  const req = rows[0]!.id;
  return waitFor(`plan request ${req}`, async () => {
    const r = await one(`SELECT state, error FROM genfill.requests WHERE id = $1`, [req]);
    return r.state === 'DONE' || r.state === 'FAILED' ? r : undefined;
  });
}

/**
 * A bypass of every verb, of the append-only trigger and of the digest check (the owner, or a
 * superuser): the stored text under a digest replaced. The check comes back NOT VALID.
 */
async function tamper(digest: string, sql: string): Promise<void> {
  const c = await db.pool.connect();
  try {
    await c.query('BEGIN');
    await c.query('SET LOCAL session_replication_role = replica');
    const { rows } = await c.query(`SELECT pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conname = 'transforms_digest_is_sha256'`);
    await c.query('ALTER TABLE genfill.transforms DROP CONSTRAINT transforms_digest_is_sha256');
    await c.query('UPDATE genfill.transforms SET sql = $2 WHERE digest = $1', [digest, sql]);
    await c.query(`ALTER TABLE genfill.transforms ADD CONSTRAINT transforms_digest_is_sha256 ${rows[0].def} NOT VALID`);
    await c.query('COMMIT');
  } catch (err) {
    await c.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    c.release();
  }
}

/** Everything the attack could change: registry row counts, the adopted pointer, its rows, the sources. */
async function evidence() {
  return {
    counts: await registryCounts(db.pool),
    datasets: (await db.pool.query(`SELECT name, active_generation, ingress_state FROM genfill.datasets ORDER BY name`)).rows,
    generations: (await db.pool.query(`SELECT dataset, generation, state FROM genfill.generations ORDER BY 1, 2`)).rows,
    rows: await one(ROWS_DIGEST),
    taxRates: (await db.pool.query(`SELECT * FROM public.tax_rates ORDER BY region`)).rows,
  };
}

beforeAll(async () => {
  expect((await runCli(['migrate'], env(null))).code).toBe(0);
  await createExampleSchema(db.pool);
  await seedOrders(db.pool, { perDay: 4, days: 3 });
  await db.pool.query(`
    CREATE TABLE public.secrets (region text PRIMARY KEY, secret text NOT NULL);
    INSERT INTO public.secrets VALUES ('north', 'n-secret'), ('south', 's-secret'), ('east', 'e-secret'), ('west', 'w-secret');
    INSERT INTO public.orders_enriched
    SELECT o.order_id, o.created_at, o.region, o.amount_cents, round(o.amount_cents * coalesce(t.rate, 0))::bigint
      FROM public.orders o LEFT JOIN public.tax_rates t ON t.region = o.region;`);
  for (const [login, role] of [[OP, 'genfill_operator'], [SVC, 'genfill_service']]) {
    await db.pool.query(`DO $$ BEGIN CREATE ROLE ${login} LOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`);
    await db.pool.query(`GRANT ${role} TO ${login}`);
  }
  // The fleet reads every source (as an install grants it); the operator reads the orders and
  // the tax rates — not the secrets.
  await db.pool.query(`GRANT USAGE ON SCHEMA public TO genfill_service, genfill_operator;
    GRANT SELECT ON ALL TABLES IN SCHEMA public TO genfill_service;
    GRANT SELECT ON public.orders, public.tax_rates TO ${OP}`);
  const legacy = join(workspace(), 'legacy.sql');
  writeFileSync(legacy, EXAMPLE_TRANSFORM);
  await adoptDataset(db.pool, {
    dataset: ADOPTED, source: 'public.orders', key: ['order_id'], time: 'created_at', table: 'public.orders_enriched', generation: 'g1', transformFile: legacy,
  });
  // The fleet writes the active generation (the projector applies the log to it); adopt, run
  // here by the superuser, left the moved table owned by it.
  await db.pool.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON ${ADOPTED_TABLE} TO genfill_service`);
  operator = await connectAs(OP);
  planner = spawn(process.execPath, [BIN, 'planner', '--interval', '1'], { env: { ...process.env, ...env(SVC) }, stdio: ['ignore', 'ignore', 'pipe'] });
  planner.stderr!.on('data', () => undefined);
});
beforeEach(() => {
  keepOnFailure(db);
  keepQueuesOnFailure(queues);
});
afterAll(async () => {
  if (planner && planner.exitCode === null) {
    planner.kill('SIGTERM');
    await exited(planner);
  }
  await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
});

describe('transform text is untrusted input wherever a service uses it', () => {
  it('refuses the multi-statement transform an operator submits over psql when the planner service plans it, and changes nothing', async () => {
    const attack =
      `SELECT * FROM source) AS t; SET LOCAL genfill.principal = 'someone';
       UPDATE genfill.datasets SET active_generation = NULL WHERE name = '${ADOPTED}';
       INSERT INTO genfill.release_log (release, action, detail) VALUES ('h1-attack@1', 'approve', '{}');
       UPDATE ${ADOPTED_TABLE} SET tax_cents = 0;
       COMMIT; BEGIN; SELECT * FROM (SELECT 1`;
    const r = release('h1-attack@1', 'h1_attack', attack);
    await submitAsOperator(r);
    const before = await evidence();

    const outcome = await planByRequest('h1-attack@1');

    // Nothing of the appended statements ran: the pointer, the log, the rows and the source are as they were.
    const after = await evidence();
    expect(after.datasets).toEqual(before.datasets);
    expect(after.rows).toEqual(before.rows);
    expect(after.taxRates).toEqual(before.taxRates);
    expect(await one(`SELECT count(*)::int AS n FROM genfill.release_log WHERE principal = 'someone'`)).toEqual({ n: 0 });
    expect(outcome.state).toBe('FAILED');
    expect(outcome.error).toMatchObject({ name: 'TransformRefusedError', exitCode: 3, retryable: false });
    expect(outcome.error.message).toMatch(/must be exactly one SELECT statement|cannot be parsed|line \d+, column \d+/);
    const { requests: _r, ...rest } = after.counts;
    const { requests: _b, ...restBefore } = before.counts;
    expect(rest).toEqual(restBefore);
    expect(await one(`SELECT state FROM genfill.releases WHERE id = 'h1-attack@1'`)).toEqual({ state: 'DRAFT' });
  });

  it('refuses at submit a transform reading a declared table its submitter may not read, naming the GRANT, and writes nothing', async () => {
    const leak = `SELECT s.order_id, s.created_at, s.region, s.amount_cents, length(x.secret)::bigint AS tax_cents
                    FROM source AS s LEFT JOIN public.secrets AS x ON x.region = s.region`;
    const before = await registryCounts(db.pool);
    const err = await submitAsOperator(release('h1-leak@1', 'h1_leak', leak, ['public.secrets'])).then(() => null, (e) => e);
    expect(err).toMatchObject({ code: 'GFT01' });
    expect(err.message).toMatch(/genfill_h1_op may not read public\.secrets/);
    expect(err.message).toMatch(/GRANT SELECT ON public\.secrets TO genfill_h1_op/);
    expect(await registryCounts(db.pool)).toEqual(before);
  });

  it('refuses at submit a spec the release format forbids (an identifier that is not one, a reversed range), writing nothing', async () => {
    const r = release('h1-badspec@1', 'h1_badspec', EXAMPLE_TRANSFORM);
    const spec = { ...r.spec, source: { ...r.spec.source, key: ['order_id); DROP TABLE x; --'] }, range: { from: r.spec.range.to, to: r.spec.range.from } };
    const before = await registryCounts(db.pool);
    const err = await operator.query('SELECT genfill.submit_release($1, $2, $3)', [JSON.stringify(spec), r.digest, r.transformSql]).then(() => null, (e) => e);
    expect(err).toMatchObject({ code: '22023' });
    expect(err.message).toMatch(/source\.key: must be a list of distinct plain SQL identifiers/);
    expect(err.message).toMatch(/range: from and to must be finite instants with from < to/);
    expect(await registryCounts(db.pool)).toEqual(before);
  });

  it('refuses at plan a transform reading a table it did not declare', async () => {
    const sneaky = `SELECT s.order_id, s.created_at, s.region, s.amount_cents,
                           (SELECT length(x.secret) FROM public.secrets AS x WHERE x.region = s.region)::bigint AS tax_cents
                      FROM source AS s`;
    await submitAsOperator(release('h1-undeclared@1', 'h1_undeclared', sneaky, []));
    const outcome = await planByRequest('h1-undeclared@1');
    expect(outcome.state).toBe('FAILED');
    expect(outcome.error.name).toBe('TransformRefusedError');
    expect(outcome.error.message).toMatch(/reads public\.secrets, which is not declared in dependencies/);
    expect(await one(`SELECT state FROM genfill.releases WHERE id = 'h1-undeclared@1'`)).toEqual({ state: 'DRAFT' });
    expect(await one(`SELECT to_regclass('public.h1_undeclared') IS NULL AS none`)).toEqual({ none: true });
  });

  it('refuses to plan a release whose submitter lost SELECT on a dependency after submitting it', async () => {
    await submitAsOperator(release('h1-revoked@1', 'h1_revoked', EXAMPLE_TRANSFORM));
    await db.pool.query(`REVOKE SELECT ON public.tax_rates FROM ${OP}`);
    try {
      const outcome = await planByRequest('h1-revoked@1');
      expect(outcome.state).toBe('FAILED');
      expect(outcome.error.name).toBe('TransformRefusedError');
      expect(outcome.error.message).toMatch(/genfill_h1_op may not read public\.tax_rates[\s\S]*GRANT SELECT ON public\.tax_rates TO genfill_h1_op/);
      expect(await one(`SELECT state FROM genfill.releases WHERE id = 'h1-revoked@1'`)).toEqual({ state: 'DRAFT' });
    } finally {
      await db.pool.query(`GRANT SELECT ON public.tax_rates TO ${OP}`);
    }
  });

  it('refuses built-ins that run SQL of their own even when STABLE (table_to_xml, query_to_xml)', async () => {
    const xml = `SELECT s.order_id, s.created_at, s.region, s.amount_cents,
                        length(table_to_xml('public.secrets'::regclass, true, false, '')::text)::bigint AS tax_cents,
                        query_to_xml('SELECT secret FROM public.secrets', true, false, '')::text AS leaked
                   FROM source AS s`;
    await submitAsOperator(release('h1-xml@1', 'h1_xml', xml, []));
    const outcome = await planByRequest('h1-xml@1');
    expect(outcome.state).toBe('FAILED');
    expect(outcome.error.name).toBe('TransformRefusedError');
    expect(outcome.error.message).toMatch(/table_to_xml\(\) runs a query of its own/);
    expect(outcome.error.message).toMatch(/query_to_xml\(\) runs a query of its own/);
  });

  it('refuses a user IMMUTABLE function until the owner allow-lists it, then plans the release', async () => {
    await db.pool.query(`CREATE FUNCTION public.h1_double(bigint) RETURNS bigint LANGUAGE sql IMMUTABLE AS 'SELECT $1 * 2'`);
    const t = `SELECT s.order_id, s.created_at, s.region, s.amount_cents, public.h1_double(s.amount_cents) AS tax_cents FROM source AS s`;
    await submitAsOperator(release('h1-udf@1', 'h1_udf', t, []));
    const refused = await planByRequest('h1-udf@1');
    expect(refused.state).toBe('FAILED');
    expect(refused.error.message).toMatch(/calls public\.h1_double\(bigint\), which is not a built-in and not in genfill\.transform_functions/);

    // Neither the operator nor the fleet may allow-list a function: only the owner writes the list.
    for (const login of [OP, SVC]) {
      const c = await connectAs(login);
      await expect(c.query(`INSERT INTO genfill.transform_functions (function, reason) VALUES ('public.h1_double(bigint)', 'mine')`)).rejects.toMatchObject({ code: '42501' });
    }
    const owner = await db.pool.connect();
    try {
      await owner.query('SET ROLE genfill_owner');
      await owner.query(`INSERT INTO genfill.transform_functions (function, reason) VALUES ('public.h1_double(bigint)', 'pure arithmetic on its argument')`);
      await owner.query('RESET ROLE');
    } finally {
      owner.release();
    }
    const accepted = await planByRequest('h1-udf@1');
    expect(accepted).toMatchObject({ state: 'DONE', error: null });
    expect(await one(`SELECT state FROM genfill.releases WHERE id = 'h1-udf@1'`)).toMatchObject({ state: expect.stringMatching(/SNAPSHOT_PINNED|BUILDING/) });
  });

  it('the builder refuses a stored transform the owner tampered with after plan, and writes nothing', async () => {
    const r = release('h1-tamper@1', 'h1_tamper', EXAMPLE_TRANSFORM);
    await submitAsOperator(r);
    expect(await planByRequest('h1-tamper@1')).toMatchObject({ state: 'DONE' });
    await waitFor('the release to be BUILDING', async () => (await one(`SELECT state FROM genfill.releases WHERE id = 'h1-tamper@1'`)).state === 'BUILDING');
    // A bypass of every verb: the stored text now reads the secrets (undeclared).
    await tamper(
      r.transformDigest,
      `SELECT s.order_id, s.created_at, s.region, s.amount_cents, (SELECT length(x.secret) FROM public.secrets AS x WHERE x.region = s.region)::bigint AS tax_cents FROM source AS s`,
    );
    const partition = 'b-20250701T000000Z';
    const claim = await claimPartition(db.pool, { release: 'h1-tamper@1', partition, worker: 'h1-test', leaseMs: 60_000 });
    expect(claim).toMatchObject({ kind: 'claimed' });
    const err = await buildPartition(db.pool, { release: 'h1-tamper@1', partition, attempt: (claim as { attempt: number }).attempt }).then(() => null, (e) => e);
    expect(err).toMatchObject({ name: 'PartitionFailedError', reason: 'TRANSFORM_ERROR', evidence: { refused: true } });
    expect(err.message).toMatch(/reads public\.secrets, which is not declared in dependencies/);
    expect(await one(`SELECT count(*)::int AS n FROM ${qualifiedGenerationTable('h1_tamper', 'g1')}`)).toEqual({ n: 0 });
    expect(await one(`SELECT count(*)::int AS n FROM genfill.receipts WHERE release = 'h1-tamper@1'`)).toEqual({ n: 0 });
  });

  it('the projector and the drift check refuse an adopted transform the owner tampered with, and record nothing', async () => {
    const { rows } = await db.pool.query(`SELECT transform_map->0->>'transform' AS digest FROM genfill.generations WHERE dataset = $1 AND generation = 'g1'`, [ADOPTED]);
    const digest = rows[0].digest as string;
    const original = (await one(`SELECT sql FROM genfill.transforms WHERE digest = $1`, [digest])).sql;
    const flags = await one(`SELECT * FROM genfill.dataset_flags WHERE dataset = $1`, [ADOPTED]);
    const rowsBefore = await one(ROWS_DIGEST);
    await tamper(digest, `SELECT s.order_id, s.created_at, s.region, s.amount_cents, length(current_setting('data_directory'))::bigint AS tax_cents FROM source AS s`);
    try {
      const conn = await db.pool.connect();
      try {
        await conn.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
        const err = await loadDataset(conn, ADOPTED).then(() => null, (e) => e);
        expect(err).toMatchObject({ name: 'TransformRefusedError' });
        expect(err.message).toMatch(/current_setting\(\) reads server or catalog state/);
      } finally {
        await conn.query('ROLLBACK');
        conn.release();
      }
      const drift = await driftCheck(db.pool, ADOPTED).then(() => null, (e) => e);
      expect(drift).toMatchObject({ name: 'TransformRefusedError' });
      expect(await one(`SELECT * FROM genfill.dataset_flags WHERE dataset = $1`, [ADOPTED])).toEqual(flags);
      expect(await one(ROWS_DIGEST)).toEqual(rowsBefore);
    } finally {
      await tamper(digest, original);
    }
  });
});
