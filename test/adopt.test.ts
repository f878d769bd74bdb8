// Adopt, the generation layout and roles (SPEC "Storage layout", "Identity and roles").
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { repairRequest } from '@genfill/builder';
import { loadConfig } from '@genfill/contracts';
import { createLogger } from '@genfill/observability';
import { runPlannerService } from '@genfill/planner';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { createTestQueues } from './support/redis.ts';
import { createExampleSchema, EXAMPLE_TRANSFORM, exampleRelease, registryCounts, workspace, writeRelease } from './support/fixtures.ts';

const db = await createTestDatabase('adopt');
const env = { DATABASE_URL: db.url, GENFILL_QUEUE_PREFIX: createTestQueues('adopt').prefix };
const cli = (...args: string[]) => runCli(args, env);
const dir = workspace();
const legacy = join(dir, 'legacy.sql');
writeFileSync(legacy, EXAMPLE_TRANSFORM);
const ROWS = 20_000;
const adoptArgs = (table = 'public.orders_enriched', dataset = 'orders_enriched', generation = 'tax-fix-g2') => [
  'dataset', 'adopt', dataset, '--source', 'public.orders', '--key', 'order_id', '--time', 'created_at',
  '--table', table, '--generation', generation, '--transform', legacy,
];
const DIGEST = `SELECT count(*)::int AS n, md5(string_agg(t::text, ',' ORDER BY order_id)) AS h FROM public.orders_enriched t`;

function as(role: string): pg.Client {
  const u = new URL(db.url);
  u.username = role;
  return new pg.Client({ connectionString: u.toString() });
}

beforeAll(async () => {
  expect((await cli('migrate')).code).toBe(0);
  await createExampleSchema(db.pool);
  await db.pool.query(`
    INSERT INTO public.orders (order_id, customer_id, region, created_at, amount_cents)
    SELECT i, i % 97, (ARRAY['north', 'south', 'east'])[1 + i % 3],
           timestamptz '2025-06-01' + (i * interval '37 minutes'), 100 + (i * 7919) % 100000
      FROM generate_series(1, ${ROWS}) AS i;
    INSERT INTO public.orders_enriched
    SELECT order_id, created_at, region, amount_cents, round(amount_cents * CASE region WHEN 'north' THEN 0.19 WHEN 'south' THEN 0.07 ELSE 0.2 END)
      FROM public.orders;
    GRANT SELECT ON public.orders_enriched TO genfill_bob;`);
});
beforeEach(() => keepOnFailure(db));

describe('dataset adopt', () => {
  it('refuses a table whose key is not unique or whose time has NULLs, naming the keys, and changes nothing', async () => {
    await db.pool.query(`CREATE TABLE public.messy (LIKE public.orders_enriched)`);
    await db.pool.query(`ALTER TABLE public.messy ALTER COLUMN created_at DROP NOT NULL`);
    await db.pool.query(`INSERT INTO public.messy SELECT * FROM public.orders_enriched WHERE order_id <= 10`);
    await db.pool.query(`INSERT INTO public.messy SELECT * FROM public.orders_enriched WHERE order_id IN (3, 7)`);
    await db.pool.query(`UPDATE public.messy SET created_at = NULL WHERE order_id = 5`);
    const before = await registryCounts(db.pool);
    const res = await cli(...adoptArgs('public.messy', 'messy', 'g1'));
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(/key \(order_id\) is not unique in public.messy: \(3\) ×2, \(7\) ×2/);
    expect(res.stderr).toMatch(/rows of public.messy with a NULL created_at or key: \(5\)/);
    expect(await registryCounts(db.pool)).toEqual(before);
    const still = await db.pool.query(`SELECT relkind FROM pg_class WHERE oid = 'public.messy'::regclass`);
    expect(still.rows[0].relkind).toBe('r');
  });

  it('refuses a transform whose output does not fit the table, writing nothing', async () => {
    const bad = join(dir, 'bad.sql');
    writeFileSync(bad, 'SELECT s.order_id, s.created_at, s.region, s.amount_cents FROM source AS s');
    const args = adoptArgs();
    args[args.length - 1] = bad;
    const res = await cli(...args);
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/tax_cents/);
    expect((await db.pool.query(`SELECT relkind FROM pg_class WHERE oid = 'public.orders_enriched'::regclass`)).rows[0].relkind).toBe('r');
  });

  it('turns the table into the active generation while a reader loop sees no error and the same rows', async () => {
    const before = await db.pool.query(DIGEST);
    const reader = new pg.Client({ connectionString: db.url });
    await reader.connect();
    let stop = false;
    const seen: { n: number; h: string }[] = [];
    const errors: unknown[] = [];
    const loop = (async () => {
      while (!stop) {
        try {
          seen.push((await reader.query(DIGEST)).rows[0]);
        } catch (err) {
          errors.push(err);
        }
      }
    })();
    const res = await cli(...adoptArgs());
    stop = true;
    await loop;
    await reader.end();
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(`adopted public.orders_enriched as generation tax-fix-g2 of orders_enriched (${ROWS} rows)`);
    expect(errors).toEqual([]);
    expect(seen.length).toBeGreaterThan(1);
    expect(new Set(seen.map((s) => s.h))).toEqual(new Set([before.rows[0].h]));
    expect((await db.pool.query(DIGEST)).rows[0]).toEqual(before.rows[0]);

    const kind = await db.pool.query(`SELECT relkind FROM pg_class WHERE oid = 'public.orders_enriched'::regclass`);
    expect(kind.rows[0].relkind).toBe('v');
    const ds = await db.pool.query(`SELECT active_generation FROM genfill.datasets WHERE name = 'orders_enriched'`);
    expect(ds.rows[0].active_generation).toBe('tax-fix-g2');
    const gen = await db.pool.query(`SELECT state, transform_map FROM genfill.generations WHERE dataset = 'orders_enriched'`);
    expect(gen.rows).toEqual([{ state: 'ACTIVE', transform_map: [{ from: null, to: null, transform: expect.stringMatching(/^sha256:/), release: null }] }]);
    // The reader's grant followed the name.
    const bob = as('genfill_bob');
    await bob.connect();
    try {
      expect((await bob.query('SELECT count(*)::int AS n FROM public.orders_enriched')).rows[0].n).toBe(ROWS);
    } finally {
      await bob.end();
    }
  });

  it('is harmless when run again', async () => {
    const before = await registryCounts(db.pool);
    const res = await cli(...adoptArgs());
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(/already adopted: orders_enriched has active generation tax-fix-g2/);
    expect(await registryCounts(db.pool)).toEqual(before);
  });
});

describe('the generation layout', () => {
  it('validates, submits and plans the SPEC example on the adopted dataset, adding the candidate as a partition', async () => {
    const file = writeRelease(workspace(), exampleRelease());
    expect((await cli('release', 'validate', file)).code).toBe(0);
    expect((await cli('release', 'submit', file)).code).toBe(0);
    const plan = await cli('plan', 'order-tax-fix@3', '--json');
    expect(plan.stderr).toBe('');
    expect(JSON.parse(plan.stdout)).toMatchObject({ partitions: 367, carry: 2, state: 'BUILDING', coverage: { contiguous: true, exactEnds: true } });
    const parts = await db.pool.query(
      `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'genfill_data.orders_enriched'::regclass ORDER BY 1`,
    );
    expect(parts.rows.map((r) => r.relname)).toEqual(['orders_enriched__tax-fix-g2', 'orders_enriched__tax-fix-g3']);
    const defaults = await db.pool.query(`SELECT count(*)::int AS n FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'genfill_data.orders_enriched'::regclass AND c.relpartbound IS NOT NULL AND pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT'`);
    expect(defaults.rows[0].n).toBe(0);
    const gen = await db.pool.query(`SELECT transform_map FROM genfill.generations WHERE generation = 'tax-fix-g3'`);
    expect(gen.rows[0].transform_map.map((r: { from: string | null; to: string | null }) => [r.from, r.to])).toEqual([
      [null, '2025-07-01T00:00:00Z'],
      ['2025-07-01T00:00:00Z', '2026-07-01T00:00:00Z'],
      ['2026-07-01T00:00:00Z', null],
    ]);
  });

  it('hides candidate rows from readers of the view', async () => {
    const before = await db.pool.query(DIGEST);
    await db.pool.query(`INSERT INTO genfill_data."orders_enriched__tax-fix-g3" (generation, order_id, created_at, region, amount_cents, tax_cents)
                         SELECT 'tax-fix-g3', order_id, created_at, region, amount_cents, 0 FROM public.orders WHERE order_id <= 100`);
    expect((await db.pool.query(DIGEST)).rows[0]).toEqual(before.rows[0]);
  });

  it('scans only the active generation (run-time pruning through the pointer row)', async () => {
    const { rows } = await db.pool.query(`EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT * FROM public.orders_enriched`);
    const plan = rows.map((r) => r['QUERY PLAN']).join('\n');
    expect(plan).toMatch(/on "orders_enriched__tax-fix-g3".*\(never executed\)/);
    expect(plan).not.toMatch(/on "orders_enriched__tax-fix-g2".*\(never executed\)/);
    expect(plan).toMatch(/on "orders_enriched__tax-fix-g2"[^\n]*\(actual rows=\d+/);
  });

  it('keeps one generation for a REPEATABLE READ reader while the pointer row flips', async () => {
    const reader = new pg.Client({ connectionString: db.url });
    await reader.connect();
    try {
      await reader.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      const first = (await reader.query('SELECT count(*)::int AS n FROM public.orders_enriched')).rows[0].n;
      await db.pool.query(`UPDATE genfill.datasets SET active_generation = 'tax-fix-g3' WHERE name = 'orders_enriched'`);
      const fresh = (await db.pool.query('SELECT count(*)::int AS n FROM public.orders_enriched')).rows[0].n;
      const again = (await reader.query('SELECT count(*)::int AS n FROM public.orders_enriched')).rows[0].n;
      await reader.query('COMMIT');
      expect(first).toBe(ROWS);
      expect(fresh).toBe(100);
      expect(again).toBe(ROWS);
    } finally {
      await db.pool.query(`UPDATE genfill.datasets SET active_generation = 'tax-fix-g2' WHERE name = 'orders_enriched'`);
      await db.pool.query(`DELETE FROM genfill_data."orders_enriched__tax-fix-g3"`);
      await reader.end();
    }
  });
});

describe('roles', () => {
  beforeAll(async () => {
    await db.pool.query('GRANT genfill_operator TO genfill_alice');
    await db.pool.query('GRANT SELECT ON public.orders, public.tax_rates TO genfill_operator');
  });

  it('refuses a plain login role and an operator any write to a generation table or through the view', async () => {
    for (const role of ['genfill_bob', 'genfill_alice']) {
      const c = as(role);
      await c.connect();
      try {
        await expect(c.query(`INSERT INTO genfill_data.orders_enriched (generation, order_id, created_at, region, amount_cents, tax_cents) VALUES ('tax-fix-g2', -1, now(), 'x', 1, 1)`)).rejects.toThrow(/permission denied/);
        await expect(c.query(`UPDATE genfill_data."orders_enriched__tax-fix-g2" SET tax_cents = 0`)).rejects.toThrow(/permission denied/);
        await expect(c.query(`DELETE FROM public.orders_enriched`)).rejects.toThrow(/permission denied/);
      } finally {
        await c.end();
      }
    }
  });

  it('lets an operator submit, and plan through the planner service, recorded under the operator\'s own login', async () => {
    const r = exampleRelease();
    r.release = 'order-tax-fix@4';
    r.target.generation = 'tax-fix-g4';
    r.range = { from: '2024-07-01T00:00:00Z', to: '2025-07-01T00:00:00Z' };
    const file = writeRelease(workspace(), r);
    const u = new URL(db.url);
    u.username = 'genfill_alice';
    const alice = { ...env, DATABASE_URL: u.toString() };
    const sub = await runCli(['release', 'submit', file], alice);
    expect(sub.stderr).toBe('');
    // An operator's plan is a request the planner service executes with the operator as principal.
    const stop = new AbortController();
    const planner = runPlannerService({
      config: loadConfig(env),
      log: createLogger('planner', 'silent'),
      intervalSeconds: 1,
      signal: stop.signal,
      db: db.pool,
      requestHandlers: { repair: repairRequest },
    });
    try {
      const plan = await runCli(['plan', 'order-tax-fix@4'], alice);
      expect(plan.stderr).toMatch(/^requested plan of order-tax-fix@4 \(request #\d+\); waiting for the planner service/);
      expect(plan.code).toBe(0);
      expect(plan.stdout).toMatch(/planned: order-tax-fix@4 is BUILDING/);
    } finally {
      stop.abort();
      await planner;
    }
    const log = await db.pool.query(`SELECT action, principal FROM genfill.release_log WHERE release = 'order-tax-fix@4' ORDER BY id`);
    expect(log.rows).toEqual([
      { action: 'submit', principal: 'genfill_alice' },
      { action: 'plan', principal: 'genfill_alice' },
      { action: 'build', principal: 'genfill_alice' },
    ]);
    const owner = await db.pool.query(`SELECT pg_get_userbyid(relowner) AS o FROM pg_class WHERE oid = 'genfill_data."orders_enriched__tax-fix-g4"'::regclass`);
    expect(owner.rows[0].o).toBe('genfill_owner');
  });
});
