// Pruning of the change log (SPEC invariant 15; issue 18 part 3). The log is split into narrow
// partitions of 1,000 transaction ids here (the shipped width is 10 million) so a test can move
// past several of them. A partition goes only when its highest txid is below the horizon's xmin;
// a retained generation's frontier and a long transaction each hold the horizon back, status and
// /metrics name what holds it, and what was held is pruned once it lets go. DEFAULT-partition rows
// and projector tombstones below the horizon go in batches. The log keeps its DEFAULT partition,
// so partitions are detached without CONCURRENTLY under a short lock_timeout: a captured writer
// waits at most about that long behind a prune, even while a long reader holds the log — measured
// below with the lock_timeout at 100 ms and at 1 s.
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { parseSnapshot } from '@genfill/capture';
import { createLogger, createMetricsRegistry } from '@genfill/observability';
import { readPage } from '@genfill/reads';
import { createPool, type Db } from '@genfill/registry';
import { seedAdopted } from '../packages/reconcile/test/fixtures.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure, urlAs } from './support/db.ts';
import { burnXids, cutOver, drain, DS, narrowLogPartitions, tempLogin } from './support/retention.ts';
import { waitFor } from './support/wait.ts';
import { computeHorizon, HorizonHistory, housekeepingMetrics, housekeepingRound, logPartitions, pruneLog, retentionRound, retentionStatus } from '@genfill/retention';

const tdb = await createTestDatabase('prune');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'prune-test', 10);
const env = { DATABASE_URL: tdb.url };
const log = createLogger('prune-test', 'silent');
const FROM = '2025-07-01T00:00:00Z';
const WIDTH = 1000;
let bob: Db;
let app: Awaited<ReturnType<typeof tempLogin>>;
/** The application's own login: it writes the captured source, nothing of genfill's. */
let writer: pg.Pool;
let nextOrder = 1;

const one = async <T = Record<string, unknown>>(q: string, v: unknown[] = []) => (await db.query(q, v)).rows[0] as T;
/** A captured write by the application: one order's amount changes. */
const write = async (n = 1) => {
  for (let i = 0; i < n; i++) await writer.query('UPDATE public.orders SET amount_cents = amount_cents + 1 WHERE order_id = $1', [(nextOrder++ % 90) + 1]);
};
/** Spend transaction ids with a captured write every 250. */
const advance = async (xids: number) => {
  for (let done = 0; done < xids; done += 250) {
    await burnXids(tdb.pool, 250);
    await write();
  }
};
const events = async (where: string) => (await one<{ n: number }>(`SELECT count(*)::int AS n FROM genfill.change_log WHERE ${where}`)).n;
/** Drain the projector until the horizon's xmin reaches `xid` (transactions of other tests end). */
const horizonPast = (xid: bigint, what: string) =>
  waitFor(
    what,
    async () => {
      await drain(db, 'prune-test');
      const h = await computeHorizon(db);
      return BigInt(h.xmin) >= xid ? h : null;
    },
    120_000,
    { intervalMs: 100 },
  );
const activeFrontier = async () =>
  parseSnapshot(
    (await one<{ s: string }>(`SELECT f.snapshot::text AS s FROM genfill.frontiers f JOIN genfill.datasets d ON d.name = f.dataset AND d.active_generation = f.generation WHERE d.name = $1`, [DS])).s,
  );
/** Drain the projector until the live frontier's xmin reaches `xid`. */
const frontierPast = (xid: bigint, what: string) =>
  waitFor(
    what,
    async () => {
      await drain(db, 'prune-test');
      return (await activeFrontier()).xmin >= xid;
    },
    120_000,
    { intervalMs: 100 },
  );
const partitionOf = async (xid: bigint) => (await logPartitions(db)).find((p) => !p.isDefault && BigInt(p.fromTxid!) <= xid && xid < BigInt(p.toTxid!));

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: FROM, days: 2, perDay: 48 });
  await tdb.pool.query('GRANT genfill_approver TO genfill_bob');
  bob = createPool({ DATABASE_URL: urlAs(tdb, 'genfill_bob') } as never, 'bob', 2);
  app = await tempLogin(tdb.pool, tdb.url.replace(/\/[^/]*$/, '/postgres'), `gf_prune_app_${process.pid}`, [
    'GRANT USAGE ON SCHEMA public TO $ROLE',
    'GRANT SELECT, INSERT, UPDATE, DELETE ON public.orders TO $ROLE',
  ]);
  writer = new pg.Pool({ connectionString: urlAs(tdb, app.name), max: 3 });
  // Ten events before the log is re-partitioned: they end up in the DEFAULT partition.
  await write(10);
  await burnXids(tdb.pool, WIDTH + 100);
  await narrowLogPartitions(tdb.pool, WIDTH, 80);
  expect(await events(`tableoid = 'genfill.change_log_default'::regclass`)).toBe(10);
});
beforeEach(() => keepOnFailure(tdb));
afterAll(async () => {
  await writer?.end();
  await app?.drop();
  await bob?.end();
  await db.end();
});

describe('the horizon', () => {
  it('drops a partition only below the horizon: a retained generation holds it at its barrier until it is retired', async () => {
    await write(3);
    await advance(1500);
    await cutOver(db, bob, { id: 'pr-a@1', generation: 'g3', expectedActive: 'g2', from: FROM, to: '2025-07-02T00:00:00Z', rollbackWindow: 'PT1S' });
    // A reader keeps g2 (and with it its frontier, at the cutover's barrier B) past the window.
    await readPage(db, { dataset: DS, generation: 'g2', holder: 'long-report', limit: 5, leaseTtlMs: 120_000 });
    const b = parseSnapshot((await one<{ b: string }>(`SELECT barrier::text AS b FROM genfill.cutovers WHERE release = 'pr-a@1'`)).b);
    await advance(3000);
    // Partitions wholly after B that the live frontier has passed: prunable but for g2.
    await frontierPast(b.xmax + BigInt(2 * WIDTH), 'the live frontier to pass two partitions after B');
    const live = await activeFrontier();
    const heldByB = (await logPartitions(db)).filter((p) => !p.isDefault && BigInt(p.fromTxid!) >= b.xmin && BigInt(p.toTxid!) <= live.xmin);
    expect(heldByB.length).toBeGreaterThanOrEqual(1);

    const before = await events(`txid >= '${b.xmin}'::xid8`);
    const inDefault = await events(`tableoid = 'genfill.change_log_default'::regclass`);
    const r = await pruneLog(db, log, { defaultBatchRows: 4 });
    const xmin = parseSnapshot(r.horizon!).xmin;
    // B holds it: the retained generation's frontier is at B.
    expect(xmin).toBeLessThanOrEqual(b.xmin);
    expect(r.current.holders).toEqual(expect.arrayContaining([expect.objectContaining({ kind: 'frontier', subject: 'generation g2 (RETAINED)' })]));
    for (const d of r.dropped) expect(BigInt(d.toTxid)).toBeLessThanOrEqual(xmin);
    expect(r.prunable).toBe(0);
    for (const p of await logPartitions(db)) if (!p.isDefault) expect(BigInt(p.toTxid!)).toBeGreaterThan(xmin);
    const attached = new Set((await logPartitions(db)).map((p) => p.partition));
    expect(heldByB.every((p) => attached.has(p.partition))).toBe(true);
    // Nothing at or after the barrier went; the DEFAULT rows below the horizon went in batches of 4.
    expect(await events(`txid >= '${b.xmin}'::xid8`)).toBe(before);
    expect(r.defaultRows).toBeGreaterThanOrEqual(10);
    expect(await events(`tableoid = 'genfill.change_log_default'::regclass`)).toBe(inDefault - r.defaultRows);
    expect(await events(`tableoid = 'genfill.change_log_default'::regclass AND txid < '${xmin}'::xid8`)).toBe(0);
    const batches = (await db.query(`SELECT rows::int AS n FROM genfill.change_log_prunes WHERE what = 'default-rows' ORDER BY id`)).rows.map((x) => x.n);
    expect(batches.length).toBe(Math.ceil(r.defaultRows / 4));
    expect(batches.every((n) => n <= 4) && batches.reduce((a, n) => a + n, 0) === r.defaultRows).toBe(true);
    expect(await one(`SELECT count(*)::int AS n FROM genfill.change_log_prunes WHERE what = 'partition'`)).toEqual({ n: r.dropped.length });

    // The reader lets go: g2 is retired, its frontier and barrier stop counting, and the
    // partitions B held go too.
    await db.query(`SELECT genfill.reader_lease_release($1, 'g2', 'long-report')`, [DS]);
    await waitFor('the rollback window of g2 to end', async () => (await retentionStatus(db, DS)).find((g) => g.generation === 'g2')?.retirable);
    expect((await retentionRound(db, log)).dropped.map((d) => d.generation)).toEqual(['g2']);
    await horizonPast(BigInt(heldByB.at(-1)!.toTxid!), 'the horizon to pass what B held');
    const again = await pruneLog(db, log);
    const xmin2 = parseSnapshot(again.horizon!).xmin;
    expect(again.dropped.map((d) => d.partition)).toEqual(expect.arrayContaining(heldByB.map((p) => p.partition)));
    for (const d of again.dropped) expect(BigInt(d.toTxid)).toBeLessThanOrEqual(xmin2);
    expect(again.prunable).toBe(0);
  }, 240_000);

  it('keeps every event a long transaction needs — the horizon names it in status and /metrics — and prunes once it ends', async () => {
    // A projector tombstone whose delete is old, and the long transaction of an application.
    await writer.query(`INSERT INTO public.orders (order_id, customer_id, region, created_at, amount_cents) VALUES (900001, 1, 'north', '2025-07-01T05:00:00Z', 500)`);
    await writer.query('DELETE FROM public.orders WHERE order_id = 900001');
    await drain(db, 'prune-test');
    const long = new pg.Client({ connectionString: urlAs(tdb, app.name) });
    await long.connect();
    await long.query('BEGIN');
    await long.query('UPDATE public.orders SET amount_cents = amount_cents + 1000 WHERE order_id = 95');
    const xL = BigInt((await long.query<{ x: string }>('SELECT pg_current_xact_id()::text AS x')).rows[0]!.x);
    const pidL = (await long.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    // A second tombstone, after the long transaction began.
    await writer.query(`INSERT INTO public.orders (order_id, customer_id, region, created_at, amount_cents) VALUES (900002, 1, 'north', '2025-07-01T06:00:00Z', 500)`);
    await writer.query('DELETE FROM public.orders WHERE order_id = 900002');
    await advance(2500);
    await drain(db, 'prune-test');
    expect(await one(`SELECT count(*)::int AS n FROM genfill.projector_tombstones`)).toEqual({ n: 2 });

    const registry = createMetricsRegistry('reconciler');
    const history = new HorizonHistory();
    const h = await housekeepingRound(db, log, { history, metrics: housekeepingMetrics(registry) });
    const r = h.prune!;
    const xmin = parseSnapshot(r.horizon!).xmin;
    expect(xmin).toBeLessThanOrEqual(xL);
    expect(r.current.transactions).toEqual(expect.arrayContaining([expect.objectContaining({ kind: 'backend', xid: String(xL % 2n ** 32n), pid: pidL, role: app.name, sessionState: 'idle in transaction' })]));
    for (const d of r.dropped) expect(BigInt(d.toTxid)).toBeLessThanOrEqual(xL);
    const held = await partitionOf(xL);
    expect(held).toBeDefined();
    expect(r.prunable).toBe(0);
    // The tombstone of a delete below the horizon went; the one after the long transaction began stays.
    const tomb = (await db.query(`SELECT key->>'order_id' AS k FROM genfill.projector_tombstones ORDER BY 1`)).rows.map((x) => x.k);
    const t1Below = (await one<{ below: boolean }>(`SELECT max(txid) < $1::xid8 AS below FROM genfill.change_log WHERE key->>'order_id' = '900001'`, [String(xmin)])).below;
    expect(tomb).toEqual(t1Below ? ['900002'] : ['900001', '900002']);

    const text = (await runCli(['status', '--dataset', DS], env)).stdout;
    expect(text).toContain(`waits for transaction ${xL % 2n ** 32n} (pid ${pidL}, ${app.name}, idle in transaction) running since`);
    const json = JSON.parse((await runCli(['status', '--dataset', DS, '--json'], env)).stdout);
    expect(json.logHorizon.transactions).toEqual(expect.arrayContaining([expect.objectContaining({ pid: pidL })]));
    const metrics = await registry.metrics();
    const age = Number(/^genfill_log_horizon_age_seconds\{service="reconciler"\} (\S+)$/m.exec(metrics)![1]);
    expect(age).toBeGreaterThan(0);
    expect(Number(/^genfill_log_horizon_transactions\{service="reconciler"\} (\S+)$/m.exec(metrics)![1])).toBeGreaterThanOrEqual(1);
    expect(metrics).toMatch(/^genfill_log_partitions_prunable\{service="reconciler"\} 0$/m);

    // It commits: its event was kept, reaches the active generation, and then its partition goes.
    await long.query('COMMIT');
    await long.end();
    await horizonPast(BigInt(held!.toTxid!), 'the horizon to pass the long transaction');
    expect(await one(`SELECT amount_cents::int - (SELECT amount_cents::int FROM public.orders WHERE order_id = 95) AS d FROM public.orders_enriched WHERE order_id = 95`)).toEqual({ d: 0 });
    const after = await pruneLog(db, log, { history });
    expect(after.dropped.map((d) => d.partition)).toContain(held!.partition);
    expect(await one(`SELECT count(*)::int AS n FROM genfill.projector_tombstones`)).toEqual({ n: 0 });
  }, 240_000);
});

describe('what a captured writer waits during a prune', () => {
  /** Captured single-row writes in a loop, each timed, until stopped. */
  function writerLoop() {
    const lat: { at: number; ms: number }[] = [];
    let stop = false;
    const done = (async () => {
      const c = await writer.connect();
      try {
        for (let i = 0; !stop; i++) {
          const t = performance.now();
          await c.query('UPDATE public.orders SET amount_cents = amount_cents + 1 WHERE order_id = $1', [(i % 40) + 41]);
          lat.push({ at: t, ms: performance.now() - t });
        }
      } finally {
        c.release();
      }
    })();
    return { lat, stop: async () => ((stop = true), await done) };
  }
  const max = (xs: { ms: number }[]) => Math.max(0, ...xs.map((x) => x.ms));
  const p50 = (xs: { ms: number }[]) => xs.map((x) => x.ms).sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;

  /** Make at least `n` partitions prunable. */
  async function prunable(n: number): Promise<void> {
    const start = BigInt((await computeHorizon(db)).xmin);
    await advance(WIDTH * (n + 1));
    await horizonPast(start + BigInt(WIDTH * (n + 1)), 'the horizon to pass new partitions');
  }

  it('waits for a plain DETACH for milliseconds; behind a long reader of the log, at most about the lock_timeout', async () => {
    const figures: Record<string, string> = {};

    // No contention: the DETACH is granted at once and holds the log for catalog work only.
    await prunable(2);
    let w = writerLoop();
    await waitFor('a baseline of writes', async () => w.lat.length > 200);
    const t0 = performance.now();
    const quiet = await pruneLog(db, log);
    const t1 = performance.now();
    await waitFor('writes after the prune', async () => w.lat.some((x) => x.at > t1));
    await w.stop();
    const during = w.lat.filter((x) => x.at + x.ms >= t0 && x.at <= t1);
    expect(quiet.dropped.length).toBeGreaterThanOrEqual(2);
    figures.quiet = `${quiet.dropped.length} partitions in ${(t1 - t0).toFixed(0)} ms (DETACH ${quiet.dropped.map((d) => d.detachMs.toFixed(1)).join(', ')} ms); writer p50 ${p50(w.lat.filter((x) => x.at < t0)).toFixed(1)} ms before, max ${max(during).toFixed(1)} ms during`;
    expect(max(during)).toBeLessThan(1000);

    // A long reader of the log: every DETACH attempt waits its lock_timeout and gives up;
    // writers queued behind the attempt wait at most that long.
    for (const lockTimeoutMs of [100, 1000]) {
      await prunable(1);
      // A person's long query of the log (genfill_bob reads the registry; a genfill writer's
      // transaction would hold pruning back altogether, see horizon.ts). People read the log only
      // through the owner's functions since migration 0025: `capture status`'s count holds the
      // same lock on it until the transaction ends.
      const reader = new pg.Client({ connectionString: urlAs(tdb, 'genfill_bob') });
      await reader.connect();
      await reader.query('BEGIN');
      await reader.query(`SELECT events FROM genfill.capture_log_status('public.orders')`);
      w = writerLoop();
      await waitFor('a baseline of writes', async () => w.lat.length > 100);
      const s0 = performance.now();
      const held = await pruneLog(db, log, { lockTimeoutMs, attempts: 3, retryDelayMs: 50 });
      const s1 = performance.now();
      await waitFor('writes after the prune', async () => w.lat.some((x) => x.at > s1));
      await w.stop();
      expect(held.dropped).toEqual([]);
      expect(held.waiting.length).toBeGreaterThan(0);
      expect(held.waiting[0]!.why).toMatch(new RegExp(`no lock on genfill.change_log within ${lockTimeoutMs} ms in 3 attempts`));
      expect(held.prunable).toBeGreaterThan(0);
      const waited = max(w.lat.filter((x) => x.at + x.ms >= s0 && x.at <= s1));
      figures[`reader, lock_timeout ${lockTimeoutMs} ms`] = `3 DETACH attempts in ${(s1 - s0).toFixed(0)} ms, ${held.waiting.length} partitions left waiting; writer max ${waited.toFixed(1)} ms`;
      expect(waited).toBeGreaterThanOrEqual(lockTimeoutMs * 0.8);
      expect(waited).toBeLessThan(lockTimeoutMs + 500);
      await reader.query('COMMIT');
      await reader.end();
      const freed = await pruneLog(db, log, { lockTimeoutMs });
      expect(freed.dropped.map((d) => d.partition)).toEqual(expect.arrayContaining(held.waiting.map((x) => x.partition)));
    }
    process.stdout.write(`captured writer wait during a prune:\n${Object.entries(figures).map(([k, v]) => `  ${k}: ${v}`).join('\n')}\n`);
  }, 300_000);
});
