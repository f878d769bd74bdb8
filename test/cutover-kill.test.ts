// The cutover's holder SIGKILLed after the seal, and after the switch (issue 17): the request is
// taken again by the next projector service once its lease runs out, which takes over the cutover
// lease and finishes — the round to the barrier, the tail, the switch — or, when the switch had
// committed, records it done. Readers never see a mix: every read, throughout, sees exactly the
// rows of one generation, old or new.
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createLogger } from '@genfill/observability';
import { projectDataset } from '@genfill/projector';
import { reconcile } from '@genfill/reconcile';
import { createPool, type Db } from '@genfill/registry';
import { builtRelease, seedAdopted, spawnGenfill, spawnNode, type Spawned } from '../packages/reconcile/test/fixtures.ts';
import { createTestDatabase, keepOnFailure, urlAs } from './support/db.ts';
import { catchupRound } from '@genfill/switch';

const tdb = await createTestDatabase('cutover_kill');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'cutover-kill-test', 6);
const env = { DATABASE_URL: tdb.url };
const log = createLogger('cutover-kill-test', 'silent');
const DS = 'orders_enriched';
const FROM = '2025-07-01T00:00:00Z';
const TO = '2025-07-02T00:00:00Z';
const LEASE_MS = 1500;
let bob: Db;
const running: Spawned[] = [];
const readers: { stop: () => Promise<unknown> }[] = [];

const one = async <T = Record<string, unknown>>(q: string, v: unknown[] = []) => (await db.query(q, v)).rows[0] as T;
const CRASHING_PROJECTOR = fileURLToPath(new URL('./support/crashing-projector.ts', import.meta.url));
const spawnProjector = (crashAfter?: string) => {
  const flags = ['--dataset', DS, '--lease', String(LEASE_MS), '--poll', '20'];
  // The crash hook is injected by the test's own entry point (the same projector service), never read from the environment.
  const p = crashAfter
    ? spawnNode(['--import', 'tsx', CRASHING_PROJECTOR, crashAfter, ...flags], { cwd: process.cwd(), env })
    : spawnGenfill(['projector', ...flags], { cwd: process.cwd(), env });
  running.push(p);
  return p;
};

async function approved(id: string, generation: string, expectedActive: string): Promise<void> {
  await builtRelease(db, { id, generation, from: FROM, to: TO, expectedActive });
  await projectDataset(DS, { db, log, untilIdle: true, id: 'kill-test', leaseMs: 60_000 });
  await catchupRound(db, id);
  const r = await reconcile(db, id);
  expect(r.state).toBe('RECONCILED');
  await bob.query('SELECT * FROM genfill.approve($1, $2)', [id, r.id]);
}

/**
 * Reads of the user's view, back to back, each checked against the generation it read: every row
 * it returned is a live row of that one generation (a mix would show rows of the other one).
 */
function readerLoop(): { stop: () => Promise<{ reads: number; generations: Set<string>; mixed: number }> } {
  let on = true;
  const seen = new Set<string>();
  let reads = 0;
  let mixed = 0;
  const loop = (async () => {
    const c = await db.connect();
    try {
      while (on) {
        await c.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
        const { rows } = await c.query(
          `SELECT (SELECT active_generation FROM genfill.datasets WHERE name = $1) AS g,
                  (SELECT count(*)::int FROM public.orders_enriched) AS n,
                  (SELECT count(*)::int FROM public.orders_enriched v JOIN genfill_data.orders_enriched t
                      ON t.order_id = v.order_id AND t.generation = (SELECT active_generation FROM genfill.datasets WHERE name = $1)
                     AND NOT t._gf_deleted AND t.tax_cents = v.tax_cents) AS same`,
          [DS],
        );
        await c.query('COMMIT');
        reads += 1;
        seen.add(rows[0].g);
        if (rows[0].n !== rows[0].same) mixed += 1;
      }
    } finally {
      c.release();
    }
  })();
  const r = {
    stop: async () => {
      on = false;
      await loop;
      return { reads, generations: seen, mixed };
    },
  };
  readers.push(r);
  return r;
}

async function until(what: string, fn: () => Promise<boolean>, ms = 30_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: FROM, days: 2, perDay: 48 });
  await tdb.pool.query('GRANT genfill_approver TO genfill_bob');
  bob = createPool({ DATABASE_URL: urlAs(tdb, 'genfill_bob') } as never, 'bob', 2);
});
beforeEach(() => keepOnFailure(tdb));
afterAll(async () => {
  await Promise.all(readers.map((r) => r.stop()));
  for (const p of running) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
  await Promise.all(running.map((p) => p.exit));
  await bob.end();
  await db.end();
});

describe('the cutover holder killed', () => {
  for (const [at, id, generation, expected] of [
    ['sealed', 'k-sealed@1', 'g3', 'g2'],
    ['switched', 'k-switched@1', 'g4', 'g3'],
  ] as const) {
    it(`after the ${at === 'sealed' ? 'seal' : 'switch'}: the next holder finishes it, and readers never see a mix`, async () => {
      await approved(id, generation, expected);
      const reader = readerLoop();
      const { rows } = await db.query(`SELECT genfill.request('cutover', $1, '{}')::text AS id`, [id]);
      const request = rows[0].id as string;
      const first = spawnProjector(at);
      await first.exit;
      expect(first.child.signalCode).toBe('SIGKILL');
      const mid = await one<{ state: string; step: string; holder: string }>(`SELECT state, step, holder FROM genfill.cutovers WHERE release = $1`, [id]);
      expect(mid).toMatchObject({ state: 'RUNNING', step: at });
      const rel = await one<{ state: string }>(`SELECT state FROM genfill.releases WHERE id = $1`, [id]);
      expect(rel.state).toBe(at === 'sealed' ? 'INGRESS_SEALED' : 'ACTIVE');
      if (at === 'sealed') expect(await one(`SELECT ingress_state AS s FROM genfill.datasets WHERE name = $1`, [DS])).toEqual({ s: 'SEALED' });

      const second = spawnProjector();
      await until('the request to finish', async () => (await one<{ state: string }>(`SELECT state FROM genfill.requests WHERE id = $1`, [request])).state === 'DONE');
      const req = await one<{ result: { ok: boolean; recovered: boolean; to: string; freezeMs?: number } }>(`SELECT result FROM genfill.requests WHERE id = $1`, [request]);
      expect(req.result).toMatchObject({ ok: true, recovered: true, to: generation });
      const rec = await one<{ state: string; recovered_by: string[]; steps: { step: string; holder: string }[] }>(
        `SELECT state, recovered_by, steps FROM genfill.cutovers WHERE release = $1`,
        [id],
      );
      expect(rec.state).toBe('DONE');
      expect(rec.recovered_by).toHaveLength(1);
      expect(new Set(rec.steps.map((s) => s.holder)).size).toBe(2);
      expect(await one(`SELECT state FROM genfill.releases WHERE id = $1`, [id])).toEqual({ state: 'ACTIVE' });
      expect(await one(`SELECT active_generation AS g, ingress_state AS s FROM genfill.datasets WHERE name = $1`, [DS])).toEqual({ g: generation, s: 'OPEN' });
      second.child.kill('SIGTERM');
      expect(await second.exit).toBe(0);
      const r = await reader.stop();
      expect(r.reads).toBeGreaterThan(10);
      expect(r.mixed).toBe(0);
      expect([...r.generations].sort()).toEqual([expected, generation]);
    });
  }
});
