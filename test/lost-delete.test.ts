// Issue 29, finding 1: a delete committed after an insert of the same key by a transaction
// whose xid is older (T_a's xid below T_b's, T_a committing after T_b) is never undone by a
// capped (prefix) frontier. The capped batch's frontier counts T_a as seen and T_b not; it is
// the carry chunks' watermark and so the candidate's catch-up frontier; catch-up, the switch
// apply and the tail check stage each key's latest event visible in S over the whole log, so
// T_b's superseded insert never lands in the candidate, whether its key is in a carry chunk
// or in a build partition, and readers of the view never see it after the cutover.
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createLogger } from '@genfill/observability';
import { projectDataset, runBatch } from '@genfill/projector';
import { createPool, type Db } from '@genfill/registry';
import { reconcile, verifyTail } from '@genfill/reconcile';
import { catchupRound, cutoverRelease } from '@genfill/switch';
import { buildAll, candidate, plannedRelease, seedAdopted } from '../packages/reconcile/test/fixtures.ts';
import { startBuilding } from '@genfill/planner';
import { createTestDatabase, keepOnFailure, urlAs } from './support/db.ts';

const tdb = await createTestDatabase('lostdelete');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'lostdelete-test', 8);
const log = createLogger('lostdelete-test', 'silent');
const drain = () => projectDataset('orders_enriched', { db, log, untilIdle: true, id: 'lostdelete-test', leaseMs: 60_000 });
const CARRIED = 90001; // 2025-07-05: outside the release's range, copied by a carry chunk
const BUILT = 90002; // 2025-07-02: inside the range, written by a build partition
let bob: Db;

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: '2025-07-01T00:00:00Z', days: 5, perDay: 24 });
  await tdb.pool.query('GRANT genfill_approver TO genfill_bob');
  bob = createPool({ DATABASE_URL: urlAs(tdb, 'genfill_bob') } as never, 'bob', 2);
  await plannedRelease(db, { id: 'ld@1', generation: 'g3', from: '2025-07-02T00:00:00Z', to: '2025-07-04T00:00:00Z' });
  await drain();
});
afterAll(async () => {
  await bob.end();
  await db.end();
});
beforeEach(() => keepOnFailure(tdb));

describe('a delete whose transaction id is older than the insert it deletes', () => {
  it('stays deleted through a capped frontier, a carry chunk, a build partition, catch-up, the tail check and the cutover: readers never see it', async () => {
    const a = new pg.Client({ connectionString: tdb.url });
    await a.connect();
    try {
      // T_a takes its xid first; T_b inserts both keys and commits; T_a deletes them and commits.
      await a.query('BEGIN');
      const xa = (await a.query<{ x: string }>('SELECT pg_current_xact_id()::text AS x')).rows[0]!.x;
      await tdb.pool.query(
        `INSERT INTO public.orders (order_id, customer_id, region, created_at, amount_cents)
         VALUES (${CARRIED}, 1, 'east', '2025-07-05 06:00Z', 100), (${BUILT}, 1, 'east', '2025-07-02 06:00Z', 100)`,
      );
      await a.query(`DELETE FROM public.orders WHERE order_id IN (${CARRIED}, ${BUILT})`);
      await a.query('COMMIT');
      const { rows: ev } = await tdb.pool.query(
        `SELECT op, txid::text AS txid FROM genfill.change_log WHERE key->>'order_id' IN ('${CARRIED}', '${BUILT}') ORDER BY event_id`,
      );
      expect(ev.map((e) => e.op)).toEqual(['upsert', 'upsert', 'delete', 'delete']);
      expect(BigInt(ev[2].txid)).toBe(BigInt(xa));
      expect(BigInt(ev[0].txid)).toBeGreaterThan(BigInt(xa));

      // One capped batch: its frontier is the prefix that counts T_a as seen, T_b not.
      const { rows: lease } = await db.query<{ t: string }>(`SELECT genfill.projector_acquire('orders_enriched', 'capped', 60000)::text AS t`);
      const out = await runBatch(db, 'orders_enriched', { lease: { holder: 'capped', token: BigInt(lease[0]!.t) }, maxEvents: 1, statementTimeoutMs: 30_000 });
      expect(out).toMatchObject({ kind: 'applied', capped: true });
      await db.query(`SELECT genfill.projector_release('orders_enriched', 'capped', $1)`, [lease[0]!.t]);
      const prefix = (await db.query(`SELECT snapshot::text AS s FROM genfill.frontiers WHERE dataset = 'orders_enriched' AND generation = 'g2'`)).rows[0].s as string;
      const { rows: vis } = await db.query(
        `SELECT pg_visible_in_snapshot($1::xid8, $3::pg_snapshot) AS a, pg_visible_in_snapshot($2::xid8, $3::pg_snapshot) AS b`,
        [ev[2].txid, ev[0].txid, prefix],
      );
      expect(vis[0]).toEqual({ a: true, b: false });

      // The build: carry chunks copy the active generation under that frontier; the range's partitions read the source.
      await startBuilding(db, 'ld@1');
      await buildAll(db, 'ld@1');
      const { rows: wm } = await db.query(`SELECT DISTINCT r.watermark::text AS w FROM genfill.receipts r JOIN genfill.partitions p ON p.release = r.release AND p.id = r.partition WHERE r.release = 'ld@1' AND p.kind = 'carry'`);
      expect(wm).toEqual([{ w: prefix }]);

      await drain();
      const round = await catchupRound(db, 'ld@1');
      expect(round.from).toBe(prefix);
      const { rows: live } = await db.query(`SELECT order_id::int AS k FROM ${candidate('g3')} WHERE order_id IN (${CARRIED}, ${BUILT}) AND NOT _gf_deleted`);
      expect(live).toEqual([]);
      // The active generation never had them either.
      const { rows: active } = await db.query(`SELECT order_id FROM ${candidate('g2')} WHERE order_id IN (${CARRIED}, ${BUILT}) AND NOT _gf_deleted`);
      expect(active).toEqual([]);

      // The tail check from the prefix frontier judges the same keys by their latest event: no mismatch.
      const tail = await verifyTail(db, 'ld@1', prefix);
      expect(tail.keys).toBeGreaterThanOrEqual(2);
      expect(tail.mismatches).toEqual([]);

      // Reconciled, approved, cut over: readers of the view do not see the deleted keys.
      const rec = await reconcile(db, 'ld@1');
      expect(rec.state).toBe('RECONCILED');
      await bob.query('SELECT * FROM genfill.approve($1, $2)', ['ld@1', rec.id]);
      const cut = await cutoverRelease(db, 'ld@1', { holder: 'lost-delete-test', leaseMs: 60_000 });
      expect(cut).toMatchObject({ ok: true, to: 'g3' });
      const { rows: view } = await db.query(`SELECT order_id FROM public.orders_enriched WHERE order_id IN (${CARRIED}, ${BUILT})`);
      expect(view).toEqual([]);
    } finally {
      await a.end();
    }
  });
});
