// A row moving between partitions while they are built (fault suite: "a row's time moves from one
// partition to another during the build → exactly one row, in its new place"), seen by the
// reconciler: when a partition's build finds its key already written by a neighbouring partition
// (ON CONFLICT DO NOTHING keeps the first row), its receipt counts a row it does not store. That
// receipt no longer describes the partition — it is verified by dual compute instead, and the
// release reconciles. Found by the demo building under an in-range writer (issue 16). And the
// carried rows, outside the range, are compared with the old generation's, every column.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { buildPartition, claimPartition } from '@genfill/builder';
import { createLogger } from '@genfill/observability';
import { startBuilding } from '@genfill/planner';
import { projectDataset } from '@genfill/projector';
import { reconcile } from '@genfill/reconcile';
import { createPool } from '@genfill/registry';
import { buildAll, builtRelease, candidate, dayPartition, plannedRelease, seedAdopted } from '../packages/reconcile/test/fixtures.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { catchupRound } from '@genfill/switch';

const tdb = await createTestDatabase('reconcile_moves');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'moves-test', 6);
const log = createLogger('moves-test', 'silent');
const FROM = '2025-07-01T00:00:00Z';
const drain = () => projectDataset('orders_enriched', { db, log, untilIdle: true, id: 'moves-test', leaseMs: 60_000 });

async function build(release: string, day: string): Promise<void> {
  const c = await claimPartition(db, { release, partition: dayPartition(day), worker: 'moves-test', leaseMs: 600_000 });
  if (c.kind !== 'claimed') throw new Error(`claim refused: ${JSON.stringify(c)}`);
  await buildPartition(db, { release, partition: dayPartition(day), attempt: c.attempt });
}

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: FROM, days: 4, perDay: 48 });
});
beforeEach(() => keepOnFailure(tdb));
afterAll(() => db.end());

describe('rows moving between partitions during the build', () => {
  it('a receipt that counts a key kept elsewhere is not compared; the release reconciles with one row per key', async () => {
    await plannedRelease(db, { id: 'mv@1', generation: 'g3', from: FROM, to: '2025-07-04T00:00:00Z' });
    await startBuilding(db, 'mv@1');
    await build('mv@1', '2025-07-01'); // order 5 is built here
    await tdb.pool.query(`UPDATE public.orders SET created_at = '2025-07-02 12:00Z' WHERE order_id = 5`);
    await build('mv@1', '2025-07-02'); // finds order 5 held by day 1: kept there, counted here
    await tdb.pool.query(`UPDATE public.orders SET created_at = '2025-07-03 12:00Z' WHERE order_id = 5`);
    await build('mv@1', '2025-07-03'); // again
    await buildAll(db, 'mv@1'); // the carry chunks
    const kept = (await db.query(`SELECT partition, (timings->>'keptElsewhere')::int AS kept FROM genfill.receipts WHERE release = 'mv@1' AND timings ? 'keptElsewhere' ORDER BY partition`)).rows;
    expect(kept).toEqual([
      { partition: dayPartition('2025-07-02'), kept: 1 },
      { partition: dayPartition('2025-07-03'), kept: 1 },
    ]);
    await drain();
    const round = await catchupRound(db, 'mv@1');
    expect(round.events).toBe(1); // the latest event of order 5
    // The round moved the row from day 1 to day 3: day 2 was never touched by catch-up.
    const touched = (await db.query(`SELECT partition FROM genfill.catchup_touched WHERE release = 'mv@1' ORDER BY partition`)).rows.map((r) => r.partition);
    expect(touched).toEqual([dayPartition('2025-07-01'), dayPartition('2025-07-03')]);
    expect((await db.query(`SELECT created_at FROM ${candidate('g3')} WHERE order_id = 5`)).rows).toEqual([{ created_at: new Date('2025-07-03T12:00:00Z') }]);
    const r = await reconcile(db, 'mv@1');
    expect(r.findings.first).toEqual([]);
    expect(r.state).toBe('RECONCILED');
    expect(r.summary.live?.receiptsSuperseded).toEqual(expect.arrayContaining([dayPartition('2025-07-02'), dayPartition('2025-07-03')]));
    // The carried rows (day 4, outside the range) equal the old generation's, every column.
    expect(r.summary.carry).toEqual({ oldRows: '48', newRows: '48', missing: '0', extra: '0', changed: {} });
  });

  it('old vs new over the carry ranges: a carried row changed, or missing, is a finding naming the key', async () => {
    await tdb.pool.query(`UPDATE ${candidate('g3')} SET tax_cents = tax_cents + 1 WHERE order_id = 150`);
    await tdb.pool.query(`UPDATE ${candidate('g3')} SET _gf_deleted = true WHERE order_id = 160`);
    const r = await reconcile(db, 'mv@1');
    expect(r.state).toBe('RECONCILIATION_REQUIRED');
    expect(r.summary.carry).toMatchObject({ oldRows: '48', newRows: '47', missing: '1', extra: '0', changed: { tax_cents: '1' } });
    const carried = (
      await db.query(`SELECT kind, check_name, column_name, key FROM genfill.reconciliation_findings WHERE reconciliation_id = $1 AND detail->>'carry' = 'true' ORDER BY seq`, [r.id])
    ).rows;
    expect(carried).toEqual([
      { kind: 'unexpected_diff', check_name: 'old_generation', column_name: 'tax_cents', key: { order_id: 150 } },
      { kind: 'missing', check_name: 'old_generation', column_name: null, key: { order_id: 160 } },
    ]);
  });

  it('an update committed inside a partition\'s watermark is not applied twice; one committed after it is', async () => {
    await plannedRelease(db, { id: 'wm@1', generation: 'g5', from: FROM, to: '2025-07-03T00:00:00Z' });
    await startBuilding(db, 'wm@1');
    await build('wm@1', '2025-07-01');
    // Order 60 (day 2) changes before day 2 is built: inside its watermark. Order 10 (day 1) after day 1 was built.
    await tdb.pool.query(`UPDATE public.orders SET amount_cents = amount_cents + 3 WHERE order_id = 60`);
    await tdb.pool.query(`UPDATE public.orders SET amount_cents = amount_cents + 3 WHERE order_id = 10`);
    await build('wm@1', '2025-07-02');
    await buildAll(db, 'wm@1');
    await drain();
    const round = await catchupRound(db, 'wm@1');
    // Both are consumed (CF starts at day 1's watermark); only order 10's is written.
    expect(round).toMatchObject({ events: 2, upserted: 1, noops: 1, tombstones: 0 });
    const rows = (await db.query(`SELECT order_id::int AS id, _gf_rev::int > 0 AS rewritten FROM ${candidate('g5')} WHERE order_id IN (10, 60) ORDER BY order_id`)).rows;
    expect(rows).toEqual([
      { id: 10, rewritten: true },
      { id: 60, rewritten: false },
    ]);
    // The round's root still covers both pairs (recomputable from the log), and the candidate is right.
    expect(round.root).not.toBe('0');
    const r = await reconcile(db, 'wm@1');
    expect(r.state).toBe('RECONCILED');
  });

  it('a round records the newest receipt it has seen by id as a number, not as text', async () => {
    // 12 daily partitions and 2 carry chunks: receipt ids past 9, then past 10 in text order.
    await builtRelease(db, { id: 'many@1', generation: 'g4', from: '2025-07-01T00:00:00Z', to: '2025-07-13T00:00:00Z' });
    await drain();
    await catchupRound(db, 'many@1');
    const { rows } = await db.query(
      `SELECT f.receipts_seen::text AS seen, (SELECT max(id)::text FROM genfill.receipts WHERE release = 'many@1') AS newest
         FROM genfill.catchup_frontiers f WHERE f.release = 'many@1'`,
    );
    expect(Number(rows[0].newest)).toBeGreaterThan(10);
    expect(rows[0].seen).toBe(rows[0].newest);
  });
});
