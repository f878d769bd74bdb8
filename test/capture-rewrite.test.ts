// Rows of a captured source that change without DML (issue 29, finding 2; migration 0030;
// docs/capture.md "Rewrites"). `ALTER TABLE … ALTER COLUMN … TYPE … USING` rewrote a value of
// public.orders with no event: the release stayed APPROVED and the cutover went through with
// "0 tail mismatches" while readers kept the old amount. Now every statement that can change
// values without DML marks the dataset, moves its open releases to RECONCILIATION_REQUIRED and
// holds every cutover until a drift check after it verified the active generation; the statements
// that copy the same rows (CLUSTER, VACUUM FULL, SET LOGGED) or change none (SET DEFAULT, a new
// enum label) pass untouched, SET UNLOGGED is refused, and a table nobody captures is left alone.
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createLogger } from '@genfill/observability';
import { projectDataset, projectorStatus } from '@genfill/projector';
import { reconcile } from '@genfill/reconcile';
import { createPool, type Db } from '@genfill/registry';
import { catchupRound } from '@genfill/switch';
import { builtRelease, seedAdopted } from '../packages/reconcile/test/fixtures.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure, urlAs } from './support/db.ts';

const tdb = await createTestDatabase('capture_rewrite');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'capture-rewrite-test', 6);
const env = { DATABASE_URL: tdb.url };
const log = createLogger('capture-rewrite-test', 'silent');
const DS = 'orders_enriched';
const FROM = '2025-07-01T00:00:00Z';
const STRANGER = 'genfill_rewrite_stranger';
let bob: Db;

const drain = () => projectDataset(DS, { db, log, untilIdle: true, id: 'capture-rewrite-test', leaseMs: 60_000 });
const one = async <T = Record<string, unknown>>(q: string, v: unknown[] = []) => (await db.query(q, v)).rows[0] as T;
const state = async (id: string) => (await one<{ state: string }>(`SELECT state FROM genfill.releases WHERE id = $1`, [id])).state;
const pending = async () => (await one<{ p: Record<string, any> | null }>(`SELECT genfill.source_rewrite_pending($1) AS p`, [DS])).p;
const precondition = async (release: string) =>
  one<{ ok: boolean; detail: string }>(`SELECT ok, detail FROM genfill.cutover_preconditions($1) WHERE name = 'source-rewrite'`, [release]);
const rewriteLogs = async () => (await one<{ n: number }>(`SELECT count(*)::int AS n FROM genfill.dataset_log WHERE dataset = $1 AND action = 'source-rewritten'`, [DS])).n;
const eventsOf = async (orderId: number) =>
  (await one<{ n: number }>(`SELECT count(*)::int AS n FROM genfill.change_log WHERE source_table = 'public.orders' AND key = jsonb_build_object('order_id', $1::bigint)`, [orderId])).n;
const viewAmount = async (orderId: number) =>
  (await one<{ a: string }>(`SELECT amount_cents::text AS a FROM public.orders_enriched WHERE order_id = $1`, [orderId])).a;
const sourceAmount = async (orderId: number) => (await one<{ a: string }>(`SELECT amount_cents::text AS a FROM public.orders WHERE order_id = $1`, [orderId])).a;
/** The drift check, as the reconciler's login runs it: `genfill reconcile --dataset`. */
const driftCheck = async () => {
  const res = await runCli(['reconcile', '--dataset', DS, '--json'], env);
  return { code: res.code, result: JSON.parse(res.stdout) as { verified: boolean; missing: number; extra: number; sample: unknown[] } };
};

/** Release `id` of [from, to) into `generation`: built, caught up, reconciled, approved by bob. */
async function approved(id: string, generation: string, from: string, to: string): Promise<void> {
  await builtRelease(db, { id, generation, from, to });
  await drain();
  await catchupRound(db, id);
  const r = await reconcile(db, id);
  expect(r.state).toBe('RECONCILED');
  await bob.query('SELECT * FROM genfill.approve($1, $2)', [id, r.id]);
  expect(await state(id)).toBe('APPROVED');
}

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: FROM, days: 3, perDay: 24 });
  await tdb.pool.query('GRANT genfill_approver TO genfill_bob');
  await tdb.pool.query(`DO $$ BEGIN CREATE ROLE ${STRANGER} LOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`);
  await tdb.pool.query(`GRANT CREATE ON SCHEMA public TO ${STRANGER}`);
  bob = createPool({ DATABASE_URL: urlAs(tdb, 'genfill_bob') } as never, 'bob', 2);
  await drain();
  // The adopted rows verified, so every flag below is the rewrite's.
  expect((await driftCheck()).result.verified).toBe(true);
});
beforeEach(() => keepOnFailure(tdb));
afterAll(async () => {
  await bob.end();
  await db.end();
});

describe('a statement that changes values without DML', () => {
  it('ALTER … USING that changes one amount: no event, but the APPROVED release moves to RECONCILIATION_REQUIRED, the cutover is refused naming the drift check, and the view keeps its rows', async () => {
    await approved('rw@1', 'g3', FROM, '2025-07-02T00:00:00Z');
    // Key 30 lies outside the release's range: a carry partition copies it from the active generation.
    const k = 30;
    const [before, events] = [await viewAmount(k), await eventsOf(k)];
    await tdb.pool.query(
      `ALTER TABLE public.orders ALTER COLUMN amount_cents TYPE bigint USING CASE WHEN order_id = ${k} THEN amount_cents * 100 ELSE amount_cents END`,
    );
    expect(await sourceAmount(k)).toBe(String(BigInt(before) * 100n));
    expect(await eventsOf(k)).toBe(events); // the rewrite logged nothing: that is why it must be seen

    expect(await state('rw@1')).toBe('RECONCILIATION_REQUIRED');
    const moved = await one<{ from_state: string; reason: string; detail: { table: string; command: string; reasons: string[] } }>(
      `SELECT from_state, reason, detail FROM genfill.release_log WHERE release = 'rw@1' AND action = 'source-rewritten'`,
    );
    expect(moved).toMatchObject({ from_state: 'APPROVED', reason: 'SOURCE_REWRITTEN', detail: { table: 'public.orders', command: 'ALTER TABLE', reasons: ['column-rewrite'] } });
    expect(await pending()).toMatchObject({ table: 'public.orders', command: 'ALTER TABLE', reasons: ['column-rewrite'], principal: 'postgres', driftCheck: null });
    expect(await precondition('rw@1')).toMatchObject({ ok: false, detail: expect.stringMatching(/run `genfill reconcile --dataset orders_enriched`/) });

    const dry = await runCli(['cutover', 'rw@1', '--dry-run', '--json'], env);
    expect(dry.code).toBe(3);
    const failed = JSON.parse(dry.stdout).checks.filter((c: { ok: boolean }) => !c.ok).map((c: { name: string }) => c.name);
    expect(failed).toEqual(['state', 'source-rewrite']);
    const cut = await runCli(['cutover', 'rw@1'], env);
    expect(cut.code).toBe(3);
    expect(cut.stderr).toMatch(/precondition source-rewrite: ALTER TABLE changed rows of public\.orders without DML/);
    expect(await one(`SELECT active_generation AS active FROM genfill.datasets WHERE name = $1`, [DS])).toEqual({ active: 'g2' });
    expect(await viewAmount(k)).toBe(before);

    // Status, the status page's data and the projector's gauge read the same function.
    const status = await runCli(['status', '--dataset', DS], env);
    expect(status.stdout).toMatch(/SOURCE REWRITTEN at .*: ALTER TABLE on public\.orders \(column-rewrite\)/);
    expect((await projectorStatus(db, DS))!.sourceRewrite).toMatchObject({ table: 'public.orders', reasons: ['column-rewrite'] });
  });

  it('the drift check after the rewrite names the changed key and keeps the cutover refused; once the key is logged and applied, a drift check clears it', async () => {
    const k = 30;
    const found = await driftCheck();
    expect(found.code).toBe(4);
    expect(found.result).toMatchObject({ verified: false, missing: 1, extra: 1, sample: [{ order_id: k }] });
    expect((await pending())!.driftCheck).toMatchObject({ missing: 1, extra: 1, sample: [{ order_id: k }] });
    expect(await precondition('rw@1')).toMatchObject({ ok: false, detail: expect.stringMatching(/found 1 missing and 1 extra rows .*\{"order_id": 30\}.*UPDATE/) });

    await tdb.pool.query(`UPDATE public.orders SET amount_cents = amount_cents WHERE order_id = ${k}`);
    await drain();
    expect(await viewAmount(k)).toBe(await sourceAmount(k));
    expect((await driftCheck()).result.verified).toBe(true);
    expect(await pending()).toBeNull();
    expect(await precondition('rw@1')).toMatchObject({ ok: true });
    expect((await runCli(['status', '--dataset', DS], env)).stdout).not.toMatch(/SOURCE REWRITTEN/);
    await runCli(['cancel', 'rw@1', '--reason', 'its source was rewritten under it'], env);
  });

  it('an enum label renamed on a captured column marks the dataset; a label added does not', async () => {
    await tdb.pool.query(`CREATE TYPE public.order_status AS ENUM ('open', 'paid');
      ALTER TABLE public.orders ADD COLUMN status public.order_status NOT NULL DEFAULT 'open';
      UPDATE public.orders SET status = 'paid' WHERE order_id % 5 = 0`);
    await drain();
    expect(await pending()).toBeNull();
    const logs = await rewriteLogs();

    await tdb.pool.query(`ALTER TYPE public.order_status ADD VALUE 'refunded'`);
    expect(await pending()).toBeNull();
    expect(await rewriteLogs()).toBe(logs);

    await tdb.pool.query(`ALTER TYPE public.order_status RENAME VALUE 'paid' TO 'settled'`);
    const p = await pending();
    expect(p).toMatchObject({ table: 'public.orders', command: 'ALTER TYPE', reasons: ['type-changed'] });
    expect(p!.types).toEqual([{ type: 'public.order_status', before: ['open', 'paid', 'refunded'], after: ['open', 'settled', 'refunded'] }]);
    expect(await rewriteLogs()).toBe(logs + 1);
    await approvedBlocked('rw@2', 'g4');
    // The transform reads no status: the drift check finds the generation equal and clears it.
    expect((await driftCheck()).result.verified).toBe(true);
    expect(await pending()).toBeNull();
  });

  it('a composite type a captured column uses, its attribute renamed, marks the dataset (an array of it counts too)', async () => {
    await tdb.pool.query(`CREATE TYPE public.address AS (city text, zip text);
      ALTER TABLE public.orders ADD COLUMN stops public.address[];
      UPDATE public.orders SET stops = ARRAY[ROW('Berlin', '10115')::public.address] WHERE order_id = 3`);
    await drain();
    expect(await pending()).toBeNull();
    await tdb.pool.query(`ALTER TYPE public.address RENAME ATTRIBUTE zip TO postcode`);
    expect(await pending()).toMatchObject({
      command: 'ALTER TYPE',
      reasons: ['type-changed'],
      types: [{ type: 'public.address', before: ['city:text', 'zip:text'], after: ['city:text', 'postcode:text'] }],
    });
    expect((await driftCheck()).result.verified).toBe(true);
    expect(await pending()).toBeNull();
  });

  it('a plain type change (bigint → numeric, a rewrite) and one PostgreSQL makes without a rewrite both mark the dataset', async () => {
    await tdb.pool.query(`ALTER TABLE public.orders ALTER COLUMN customer_id TYPE numeric`);
    expect(await pending()).toMatchObject({ command: 'ALTER TABLE', reasons: ['column-rewrite', 'column-type'], columns: ['customer_id: bigint → numeric'] });
    expect((await driftCheck()).result.verified).toBe(true);
    expect(await pending()).toBeNull();

    // varchar → text is binary-coercible: no table_rewrite fires, the column list still changes.
    await tdb.pool.query(`ALTER TABLE public.orders ADD COLUMN note varchar(20)`);
    expect(await pending()).toBeNull();
    const node = await one<{ f: string }>(`SELECT pg_relation_filenode('public.orders')::text AS f`);
    await tdb.pool.query(`ALTER TABLE public.orders ALTER COLUMN note TYPE text`);
    expect(await one<{ f: string }>(`SELECT pg_relation_filenode('public.orders')::text AS f`)).toEqual(node);
    expect(await pending()).toMatchObject({ reasons: ['column-type'], columns: ['note: character varying(20) → text'] });
    expect((await driftCheck()).result.verified).toBe(true);
  });

  it('two rewrites in one transaction mark the dataset once, with the reasons of both', async () => {
    const logs = await rewriteLogs();
    const c = await tdb.pool.connect();
    try {
      await c.query('BEGIN');
      await c.query(`ALTER TABLE public.orders ALTER COLUMN customer_id TYPE bigint USING customer_id::bigint`);
      await c.query(`ALTER TABLE public.orders ADD COLUMN weight float8 DEFAULT random()`);
      await c.query('COMMIT');
    } finally {
      c.release();
    }
    expect(await rewriteLogs()).toBe(logs + 1);
    expect(await pending()).toMatchObject({ reasons: ['column-added-with-values', 'column-rewrite', 'column-type'], columns: ['customer_id: numeric → bigint'] });
    expect((await driftCheck()).result.verified).toBe(true);
  });
});

describe('statements that copy the same rows or change none', () => {
  it('CLUSTER, VACUUM FULL, SET LOGGED, SET DEFAULT and a new index leave the dataset unmarked; SET UNLOGGED is refused', async () => {
    const logs = await rewriteLogs();
    const flags = await one(`SELECT source_rewritten_at FROM genfill.dataset_flags WHERE dataset = $1`, [DS]);
    await tdb.pool.query(`CLUSTER public.orders USING orders_pkey`);
    await tdb.pool.query(`VACUUM FULL public.orders`);
    await tdb.pool.query(`ALTER TABLE public.orders SET LOGGED`);
    await tdb.pool.query(`ALTER TABLE public.orders ALTER COLUMN amount_cents SET DEFAULT 0`);
    await tdb.pool.query(`CREATE INDEX orders_region_idx ON public.orders (region)`);
    expect(await pending()).toBeNull();
    expect(await rewriteLogs()).toBe(logs);
    expect(await one(`SELECT source_rewritten_at FROM genfill.dataset_flags WHERE dataset = $1`, [DS])).toEqual(flags);

    await expect(tdb.pool.query(`ALTER TABLE public.orders SET UNLOGGED`)).rejects.toThrow(
      /refused: ALTER TABLE … SET UNLOGGED on public\.orders, which is captured \(public\.orders\): after a crash PostgreSQL empties an unlogged table/,
    );
    expect(await one(`SELECT relpersistence FROM pg_class WHERE oid = 'public.orders'::regclass`)).toEqual({ relpersistence: 'p' });
  });

  it('a table nobody captures is untouched, whoever rewrites it: a login that knows nothing of genfill', async () => {
    const logs = await rewriteLogs();
    const c = new pg.Client({ connectionString: urlAs(tdb, STRANGER) });
    await c.connect();
    try {
      await c.query(`CREATE TYPE public.mood AS ENUM ('calm', 'glad');
        CREATE TABLE public.notes (id int PRIMARY KEY, v int NOT NULL, m public.mood NOT NULL);
        INSERT INTO public.notes VALUES (1, 1, 'calm'), (2, 2, 'glad')`);
      await c.query(`ALTER TABLE public.notes ALTER COLUMN v TYPE bigint USING v * 100`);
      await c.query(`ALTER TYPE public.mood RENAME VALUE 'glad' TO 'happy'`);
      await c.query(`ALTER TABLE public.notes SET UNLOGGED`);
      expect((await c.query(`SELECT v::text, m::text FROM public.notes ORDER BY id`)).rows).toEqual([
        { v: '100', m: 'calm' },
        { v: '200', m: 'happy' },
      ]);
    } finally {
      await c.end();
    }
    expect(await pending()).toBeNull();
    expect(await rewriteLogs()).toBe(logs);
  });
});

/** A release approved after the rewrite is still refused its cutover until the drift check. */
async function approvedBlocked(id: string, generation: string): Promise<void> {
  await approved(id, generation, FROM, '2025-07-02T00:00:00Z');
  const dry = await runCli(['cutover', id, '--dry-run', '--json'], env);
  expect(dry.code).toBe(3);
  expect(JSON.parse(dry.stdout).checks.filter((c: { ok: boolean }) => !c.ok).map((c: { name: string }) => c.name)).toEqual(['source-rewrite']);
  await runCli(['cancel', id, '--reason', 'shown refused'], env);
}
