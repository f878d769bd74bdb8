// Rollback (SPEC invariant 13, fault suite "new data arrives during rollback"): readers go back to
// the generation a release replaced and nothing written since the cutover is lost — every change
// since then is in the old generation afterwards, through its own transform map (the drift check
// proves it against the source), and changes keep flowing to it. Refused while another release is
// built on the generation, for a release that is not the active one, and once the old generation
// is retired. A rollback makes the release it had superseded ACTIVE again.
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createLogger } from '@genfill/observability';
import { projectDataset } from '@genfill/projector';
import { driftCheck, reconcile } from '@genfill/reconcile';
import { createPool, rootAgg, rowHashExpr, type Db } from '@genfill/registry';
import { builtRelease, candidate, plannedRelease, seedAdopted } from '../packages/reconcile/test/fixtures.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure, urlAs } from './support/db.ts';
import { catchupRound, cutoverRelease, rollbackRelease } from '@genfill/switch';

const tdb = await createTestDatabase('rollback');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'rollback-test', 10);
const env = { DATABASE_URL: tdb.url };
const log = createLogger('rollback-test', 'silent');
const DS = 'orders_enriched';
const FROM = '2025-07-01T00:00:00Z';
let bob: Db;

const one = async <T = Record<string, unknown>>(q: string, v: unknown[] = []) => (await db.query(q, v)).rows[0] as T;
const state = async (id: string) => (await one<{ state: string }>(`SELECT state FROM genfill.releases WHERE id = $1`, [id])).state;
const active = async () => (await one<{ g: string; s: string }>(`SELECT active_generation AS g, ingress_state AS s FROM genfill.datasets WHERE name = $1`, [DS]));
const genState = async (g: string) => (await one<{ state: string }>(`SELECT state FROM genfill.generations WHERE dataset = $1 AND generation = $2`, [DS, g])).state;
const genHash = async (g: string) =>
  (await one<{ h: string }>(`SELECT ${rootAgg(rowHashExpr(['order_id', 'created_at', 'region', 'amount_cents', 'tax_cents', '_gf_rev', '_gf_deleted'], 'c'))}::text AS h FROM ${candidate(g)} AS c`)).h;
const drain = () => projectDataset(DS, { db, log, untilIdle: true, id: 'rollback-test', leaseMs: 60_000 });

/** Build, catch up, reconcile, approve (bob) and cut over a one-day release into `generation`. */
async function cutOver(id: string, generation: string, expectedActive: string, day: string): Promise<void> {
  await builtRelease(db, { id, generation, from: `${day}T00:00:00Z`, to: `${day.slice(0, 8)}${String(Number(day.slice(8)) + 1).padStart(2, '0')}T00:00:00Z`, expectedActive });
  await drain();
  await catchupRound(db, id);
  const r = await reconcile(db, id);
  expect(r.state).toBe('RECONCILED');
  await bob.query('SELECT * FROM genfill.approve($1, $2)', [id, r.id]);
  const c = await cutoverRelease(db, id);
  expect(c.ok).toBe(true);
}

/** The live writer: updates, inserts, deletes and moves across every day, until stopped. */
function startWriter(): { stop: () => Promise<number> } {
  let on = true;
  let n = 0;
  const w = new pg.Client({ connectionString: tdb.url });
  const loop = (async () => {
    await w.connect();
    let next = 500_000 + Math.floor(Math.random() * 1000) * 1000;
    while (on) {
      await w.query(`UPDATE public.orders SET amount_cents = amount_cents + 3 WHERE order_id = $1`, [1 + (n % 144)]);
      if (n % 5 === 0) await w.query(`INSERT INTO public.orders (order_id, customer_id, region, created_at, amount_cents) VALUES ($1, 2, 'east', '2025-07-02 06:00Z', 999)`, [next++]);
      if (n % 9 === 0) await w.query(`DELETE FROM public.orders WHERE order_id = $1`, [next - 1]);
      if (n % 13 === 0) await w.query(`UPDATE public.orders SET created_at = created_at + interval '1 day' WHERE order_id = $1`, [20 + (n % 30)]);
      n++;
      await new Promise((r) => setTimeout(r, 3));
    }
    await w.end();
  })();
  return {
    stop: async () => {
      on = false;
      await loop;
      return n;
    },
  };
}

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: FROM, days: 3, perDay: 48 });
  await tdb.pool.query('GRANT genfill_approver TO genfill_bob');
  bob = createPool({ DATABASE_URL: urlAs(tdb, 'genfill_bob') } as never, 'bob', 2);
});
beforeEach(() => keepOnFailure(tdb));
afterAll(async () => {
  await bob.end();
  await db.end();
});

describe('rollback', () => {
  it('is refused while another release is built on the generation, and for a release that is not the active one', async () => {
    await cutOver('rb1@1', 'g3', 'g2', '2025-07-01');
    await cutOver('rb2@1', 'g4', 'g3', '2025-07-02');
    expect(await state('rb1@1')).toBe('SUPERSEDED');
    expect(await genState('g3')).toBe('RETAINED');
    await plannedRelease(db, { id: 'on-g4@1', generation: 'g5', from: FROM, to: '2025-07-02T00:00:00Z', expectedActive: 'g4' });
    const refused = await runCli(['rollback', 'rb2@1'], env);
    expect(refused.code).toBe(3);
    expect(refused.stderr).toMatch(/rollback refused: release\(s\) on-g4@1 expect g4 as their active generation/);
    const superseded = await runCli(['rollback', 'rb1@1'], env);
    expect(superseded.code).toBe(3);
    expect(superseded.stderr).toMatch(/release rb1@1 is SUPERSEDED: only the ACTIVE release is rolled back/);
    expect(await active()).toEqual({ g: 'g4', s: 'OPEN' });
    expect(await one(`SELECT count(*)::int AS n FROM genfill.cutovers WHERE kind = 'rollback'`)).toEqual({ n: 0 });
    await runCli(['cancel', 'on-g4@1', '--reason', 'not needed'], env);
  });

  it('under a live writer, twice: nothing written since each cutover is lost, new data keeps flowing, the superseded release is ACTIVE again', async () => {
    const writer = startWriter();
    const stop = new AbortController();
    const projector = projectDataset(DS, { db, log, id: 'rollback-live', leaseMs: 60_000, pollMs: 20, signal: stop.signal });
    try {
      await new Promise((r) => setTimeout(r, 600));
      const res = await runCli(['rollback', 'rb2@1', '--json'], env);
      expect(res.stderr).toBe('');
      expect(res.code).toBe(0);
      const r = JSON.parse(res.stdout);
      expect(r).toMatchObject({ ok: true, from: 'g4', to: 'g3', reactivated: 'rb1@1', recovered: false });
      expect(r.replay.events).toBeGreaterThan(0);
      expect(r.freezeMs).toBeGreaterThan(0);
      expect(r.casMs).toBeLessThanOrEqual(r.freezeMs);
      expect(r.steps.map((s: { step: string }) => s.step)).toEqual(['replayed', 'sealed', 'switched']);
      expect(await state('rb2@1')).toBe('ROLLED_BACK');
      expect(await state('rb1@1')).toBe('ACTIVE');
      expect(await active()).toEqual({ g: 'g3', s: 'OPEN' });
      expect([await genState('g3'), await genState('g4')]).toEqual(['ACTIVE', 'RETAINED']);
      const g4AtSwitch = await genHash('g4');
      const epochs = (await db.query(`SELECT epoch::int, generation, opened_for FROM genfill.epochs WHERE dataset = $1 ORDER BY epoch DESC LIMIT 1`, [DS])).rows;
      expect(epochs).toEqual([{ epoch: r.openedEpoch, generation: 'g3', opened_for: 'rollback of rb2@1' }]);

      // Writes go on; then the first release is rolled back too, to the adopted generation.
      await new Promise((x) => setTimeout(x, 400));
      const r1 = await rollbackRelease(db, 'rb1@1');
      expect(r1).toMatchObject({ ok: true, from: 'g3', to: 'g2', reactivated: null });
      const g3AtSwitch = await genHash('g3');
      await new Promise((x) => setTimeout(x, 400));
      expect(await writer.stop()).toBeGreaterThan(50);
      await new Promise((x) => setTimeout(x, 200));
      stop.abort();
      await projector;
      await drain();
      // The adopted generation holds every change, through its own (legacy) transform map.
      const d = await driftCheck(db, DS);
      expect(d).toMatchObject({ generation: 'g2', missing: 0, extra: 0, pending: 0, verified: true });
      expect(await one(`SELECT count(*)::int AS n FROM public.orders_enriched`)).toEqual(await one(`SELECT count(*)::int AS n FROM public.orders`));
      // The generations rolled back from never changed after their switch back.
      expect(await genHash('g4')).toBe(g4AtSwitch);
      expect(await genHash('g3')).toBe(g3AtSwitch);
      expect(await one(`SELECT state, kind FROM genfill.cutovers WHERE release = 'rb1@1' AND kind = 'rollback'`)).toEqual({ state: 'DONE', kind: 'rollback' });
    } finally {
      await writer.stop();
      stop.abort();
      await projector;
    }
  });

  it('is refused once the old generation is retired, and again after the release was rolled back', async () => {
    await cutOver('rb3@1', 'g6', 'g2', '2025-07-03');
    // Retention would retire it after the rollback window; the superuser stands in for it here.
    await tdb.pool.query(`UPDATE genfill.generations SET state = 'RETIRED' WHERE dataset = $1 AND generation = 'g2'`, [DS]);
    const res = await runCli(['rollback', 'rb3@1'], env);
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(/generation g2, which rb3@1 replaced, is retired: it can no longer take readers back \(roll forward with a new release instead\)/);
    expect(await active()).toEqual({ g: 'g6', s: 'OPEN' });
    await tdb.pool.query(`UPDATE genfill.generations SET state = 'RETAINED' WHERE dataset = $1 AND generation = 'g2'`, [DS]);
    expect(await state('rb2@1')).toBe('ROLLED_BACK');
    const again = await runCli(['rollback', 'rb2@1'], env);
    expect(again.code).toBe(3);
    expect(again.stderr).toMatch(/release rb2@1 is ROLLED_BACK: only the ACTIVE release is rolled back/);
  });
});
