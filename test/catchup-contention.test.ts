// Issue 29, findings 5 and 6: catch-up rounds under a live writer and the projector service's
// own rounds. A round takes the release's catch-up lock before its REPEATABLE READ snapshot and
// waits contention out, so manual rounds beside the service's (two at once, so one always waits
// for the other's lock) and a cutover all succeed; a round that consumed nothing is not
// recorded, and status shows it as the last round all the same.
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createLogger } from '@genfill/observability';
import { projectDataset, runProjectorService } from '@genfill/projector';
import { reconcile } from '@genfill/reconcile';
import { createPool, type Db } from '@genfill/registry';
import { catchupRound, cutoverRelease, switchExtension } from '@genfill/switch';
import { builtRelease, candidate, seedAdopted } from '../packages/reconcile/test/fixtures.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure, urlAs } from './support/db.ts';

const tdb = await createTestDatabase('cucontention');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'cucontention-test', 16);
const env = { DATABASE_URL: tdb.url };
const log = createLogger('cucontention-test', 'silent');
const DS = 'orders_enriched';
const FROM = '2025-07-01T00:00:00Z';
const TO = '2025-07-03T00:00:00Z';
let bob: Db;
const drain = () => projectDataset(DS, { db, log, untilIdle: true, id: 'cucontention-test', leaseMs: 60_000 });
const count = async (release: string) => (await db.query(`SELECT count(*)::int AS n FROM genfill.catchup_rounds WHERE release = $1`, [release])).rows[0].n as number;

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: FROM, days: 4, perDay: 48 });
  await tdb.pool.query('GRANT genfill_approver TO genfill_bob');
  bob = createPool({ DATABASE_URL: urlAs(tdb, 'genfill_bob') } as never, 'bob', 2);
  await builtRelease(db, { id: 'busy@1', generation: 'g3', from: FROM, to: TO });
});
beforeEach(() => keepOnFailure(tdb));
afterAll(async () => {
  await bob.end();
  await db.end();
});

describe('catch-up rounds', () => {
  it('records a round only when it consumed events; status shows the last round, recorded or not', async () => {
    await tdb.pool.query(`UPDATE public.orders SET amount_cents = amount_cents + 3 WHERE order_id IN (4, 5)`);
    await drain();
    const full = await catchupRound(db, 'busy@1');
    expect(full.events).toBe(2);
    expect(full.id).not.toBeNull();
    const recorded = await count('busy@1');
    // The projector moves its frontier on (an event of a key outside every range would do; an empty batch does too).
    await tdb.pool.query(`UPDATE public.orders SET amount_cents = amount_cents WHERE false`);
    await drain();
    const empty = await catchupRound(db, 'busy@1');
    expect(empty).toMatchObject({ events: 0, id: null });
    expect(await count('busy@1')).toBe(recorded);
    const st = await runCli(['status', 'busy@1', '--json'], env);
    expect(st.code).toBe(0);
    const live = JSON.parse(st.stdout).live;
    expect(live.lastRound).toMatchObject({ id: null, events: 0, recorded: false, to: empty.to });
    const text = await runCli(['status', 'busy@1'], env);
    expect(text.stdout).toMatch(/last round \(empty, not recorded\) at .*: 0 events/);
  });

  it('beside the projector service and a live writer, manual rounds (two at once) and a cutover succeed', async () => {
    await drain();
    await catchupRound(db, 'busy@1');
    const rec = await reconcile(db, 'busy@1');
    expect(rec.state).toBe('RECONCILED');
    await bob.query('SELECT * FROM genfill.approve($1, $2)', ['busy@1', rec.id]);

    // The writer: two connections, back to back — updates in and out of the range, inserts, deletes, moves.
    let writing = true;
    let writes = 0;
    const writer = async (n: number) => {
      const w = new pg.Client({ connectionString: tdb.url });
      await w.connect();
      let next = 200_000 + n * 100_000;
      try {
        while (writing) {
          const id = 1 + ((writes * 7 + n) % 190);
          await w.query(`UPDATE public.orders SET amount_cents = amount_cents + 1 WHERE order_id = $1`, [id]);
          if (writes % 5 === 0) await w.query(`INSERT INTO public.orders (order_id, customer_id, region, created_at, amount_cents) VALUES ($1, 1, 'north', '2025-07-0${1 + (writes % 4)} 12:00Z', 777)`, [next++]);
          if (writes % 9 === 0) await w.query(`DELETE FROM public.orders WHERE order_id = $1`, [next - 1]);
          if (writes % 13 === 0) await w.query(`UPDATE public.orders SET created_at = created_at + interval '1 day' WHERE order_id = $1`, [100 + (writes % 60)]);
          writes += 1;
        }
      } finally {
        await w.end();
      }
    };
    const writers = [writer(0), writer(1)];
    const controller = new AbortController();
    const service = runProjectorService({ config: { DATABASE_URL: tdb.url } as never, db, log, signal: controller.signal, extension: switchExtension(), pollMs: 20, leaseMs: 5000, id: 'svc' });
    try {
      const rounds = [];
      for (let i = 0; i < 8; i++) {
        rounds.push(...(await Promise.all([catchupRound(db, 'busy@1'), catchupRound(db, 'busy@1')])));
      }
      expect(rounds).toHaveLength(16);
      expect(rounds.some((r) => r.events > 0)).toBe(true);
      const cut = await cutoverRelease(db, 'busy@1', { holder: 'contention-test', leaseMs: 60_000 });
      expect(cut).toMatchObject({ ok: true, to: 'g3' });
    } finally {
      writing = false;
      await Promise.all(writers);
      controller.abort();
      await service;
    }
    expect(writes).toBeGreaterThan(100);
    await drain();
    // The view is the new generation, equal to the source's rows (live keys) after the writer stopped.
    const { rows } = await db.query(
      `SELECT (SELECT count(*)::int FROM public.orders) AS src,
              (SELECT count(*)::int FROM ${candidate('g3')} WHERE NOT _gf_deleted) AS gen,
              (SELECT count(*)::int FROM public.orders o WHERE NOT EXISTS (SELECT 1 FROM ${candidate('g3')} c WHERE c.order_id = o.order_id AND NOT c._gf_deleted AND c.amount_cents = o.amount_cents AND c.created_at = o.created_at)) AS differ`,
    );
    expect(rows[0].differ).toBe(0);
    expect(rows[0].gen).toBe(rows[0].src);
  });
});
