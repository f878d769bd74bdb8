// The projector SIGKILLed mid-batch, again and again, under a live writer: a second process
// waits for the lease and takes over once it expires; at the end the active generation equals
// the transform map applied to the source, every row at its key's latest event (nothing
// skipped), and the frontier only ever moved forward.
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createPool } from '@genfill/registry';
import { startOrderWriter } from '../apps/cli/src/demo/writer.ts';
import { LEGACY_TRANSFORM, seedAdopted, spawnGenfill, type Spawned } from '../packages/reconcile/test/fixtures.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { waitFor } from './support/wait.ts';

const tdb = await createTestDatabase('projector_kill');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'projector-kill-test', 6);
const env = { DATABASE_URL: tdb.url, GENFILL_LOG_LEVEL: 'warn' };
const LEASE_MS = 800;
const ROUNDS = 3;

const EXPECTED = `SELECT t.order_id, t.created_at, t.region, t.amount_cents, t.tax_cents
  FROM (${LEGACY_TRANSFORM.replace('FROM source AS s', 'FROM public.orders AS s')}) AS t`;
const VIEW = `SELECT order_id, created_at, region, amount_cents, tax_cents FROM public.orders_enriched`;

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: '2025-07-01T00:00:00Z', days: 5, perDay: 200 });
});
beforeEach(() => keepOnFailure(tdb));

const spawnProjector = () => spawnGenfill(['projector', '--dataset', 'orders_enriched', '--lease', String(LEASE_MS), '--poll', '20', '--max-batch', '200'], { cwd: process.cwd(), env });

describe('a projector killed mid-batch', () => {
  it('is replaced by the waiting one; nothing is skipped and the frontier never moves back', async () => {
    const writer = await startOrderWriter(db, { ratePerSecond: 100, inRange: true, seededOrders: 1000, seed: 7 });
    const frontiers: string[] = [];
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const { rows } = await db.query(`SELECT snapshot::text AS s FROM genfill.frontiers WHERE dataset = 'orders_enriched'`);
        frontiers.push(rows[0].s);
        await new Promise((r) => setTimeout(r, 25));
      }
    })();
    // Every process starts up front (a start takes seconds on a loaded machine): one holds the
    // lease, the others wait; each kill hands it to a waiting one within about a lease period.
    const procs: Spawned[] = Array.from({ length: ROUNDS + 1 }, spawnProjector);
    const tokens: string[] = [];
    try {
      for (let round = 0; round < ROUNDS; round++) {
        // Whoever holds the lease is killed as soon as it has applied something.
        const holder = await waitFor('a new lease holder', async () => {
          const { rows } = await db.query(`SELECT holder, token::text FROM genfill.projector_leases WHERE dataset = 'orders_enriched' AND expires_at > clock_timestamp()`);
          return rows[0] && !tokens.includes(rows[0].token) ? (rows[0] as { holder: string; token: string }) : null;
        }, 60_000);
        tokens.push(holder.token);
        const victim = procs.find((p) => holder.holder.endsWith(`:${p.child.pid}`));
        expect(victim, `holder ${holder.holder} is one of the processes`).toBeDefined();
        await new Promise((r) => setTimeout(r, 150 + 100 * round));
        victim!.child.kill('SIGKILL');
        await victim!.exit;
      }
    } catch (err) {
      for (const p of procs) p.child.kill('SIGKILL');
      throw err;
    } finally {
      await writer.stop();
    }
    // The last holder drains what the writer left.
    await waitFor('the last holder to drain the log', async () => {
      const { rows } = await db.query(
        `SELECT count(*)::int AS n FROM genfill.change_log l, genfill.frontiers f
          WHERE f.dataset = 'orders_enriched' AND l.source_table = 'public.orders' AND NOT pg_visible_in_snapshot(l.txid, f.snapshot)`,
      );
      return rows[0].n === 0;
    }, 30_000);
    sampling = false;
    await sampler;
    for (const p of procs) {
      if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGTERM');
      await p.exit;
    }
    expect(new Set(tokens).size).toBe(ROUNDS);
    const { rows: diff } = await tdb.pool.query(
      `SELECT (SELECT count(*)::int FROM (${EXPECTED} EXCEPT ${VIEW}) a) AS missing, (SELECT count(*)::int FROM (${VIEW} EXCEPT ${EXPECTED}) b) AS extra`,
    );
    expect(diff[0]).toEqual({ missing: 0, extra: 0 });
    const { rows: rev } = await db.query(
      `SELECT count(*)::int AS n FROM genfill_data."orders_enriched__g2" g
        WHERE g._gf_rev <> 0 AND g._gf_rev <> (SELECT max(l.event_id) FROM genfill.change_log l WHERE l.source_table = 'public.orders' AND l.key = jsonb_build_object('order_id', g.order_id))`,
    );
    expect(rev[0].n).toBe(0);
    // Monotone: each sampled frontier contains the one before.
    const { rows: mono } = await db.query(
      `SELECT count(*)::int AS n FROM unnest($1::text[]) WITH ORDINALITY AS a (s, i) JOIN unnest($1::text[]) WITH ORDINALITY AS b (s, i) ON b.i = a.i + 1
        WHERE NOT genfill.snapshot_contains(b.s::pg_snapshot, a.s::pg_snapshot)`,
      [frontiers],
    );
    expect(frontiers.length).toBeGreaterThan(10);
    expect(mono[0].n).toBe(0);
  }, 120_000);
});
