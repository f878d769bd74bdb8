// Carry partitions (SPEC invariant 2): a release with an expected active generation copies
// everything outside [from, to) from it, in chunks with receipts whose watermark is the
// projector's frontier read in the copy's snapshot; with catch-up, nothing outside the range is
// missing or changed. One open release per candidate generation.
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createLogger } from '@genfill/observability';
import { planRelease, startBuilding, submitRelease } from '@genfill/planner';
import { projectDataset } from '@genfill/projector';
import { createPool } from '@genfill/registry';
import { buildAll, candidate, seedAdopted } from '../packages/reconcile/test/fixtures.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { exampleRelease, workspace, writeRelease } from './support/fixtures.ts';
import { catchupRound } from '@genfill/switch';

const tdb = await createTestDatabase('carry');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'carry-test', 8);
const env = { DATABASE_URL: tdb.url };
const log = createLogger('carry-test', 'silent');
const FROM = '2025-07-02T00:00:00Z';
const TO = '2025-07-04T00:00:00Z';
const drain = () => projectDataset('orders_enriched', { db, log, untilIdle: true, id: 'carry-test', leaseMs: 60_000 });

async function submit(id: string, generation: string, from = FROM, to = TO): Promise<void> {
  const r = exampleRelease();
  r.release = id;
  r.target.generation = generation;
  r.target.expectedActive = 'g2';
  r.range = { from, to };
  await submitRelease(writeRelease(workspace(), r), db);
}

/** Live rows outside [FROM, TO): the candidate against the active generation. */
async function diffOutside(): Promise<{ missing: number; extra: number; rows: number }> {
  const cols = 'order_id, created_at, region, amount_cents, tax_cents';
  const out = `(created_at < '${FROM}' OR created_at >= '${TO}') AND NOT _gf_deleted`;
  const { rows } = await tdb.pool.query(
    `SELECT (SELECT count(*)::int FROM (SELECT ${cols} FROM ${candidate('g2')} WHERE ${out} EXCEPT SELECT ${cols} FROM ${candidate('g3')} WHERE ${out}) a) AS missing,
            (SELECT count(*)::int FROM (SELECT ${cols} FROM ${candidate('g3')} WHERE ${out} EXCEPT SELECT ${cols} FROM ${candidate('g2')} WHERE ${out}) b) AS extra,
            (SELECT count(*)::int FROM ${candidate('g2')} WHERE ${out}) AS rows`,
  );
  return rows[0];
}

beforeAll(async () => {
  // 2025-07-01 … 07-05: one day before the range, two in it, two after.
  await seedAdopted(tdb, db, { from: '2025-07-01T00:00:00Z', days: 5, perDay: 240 });
});
beforeEach(() => keepOnFailure(tdb));

describe('a release with an expected active generation', () => {
  it('plans carry chunks covering everything outside [from, to), unbounded at both ends, with a floor', async () => {
    await submit('carry@1', 'g3');
    const plan = await planRelease(db, 'carry@1', { carryRows: 100 });
    expect(plan.partitions).toBe(2 + plan.carry);
    // 240 rows before (3 chunks of ~100), 480 after (5 chunks).
    expect(plan.carry).toBe(8);
    expect(plan.coverage).toMatchObject({ carry: { partitions: 8, before: 3, after: 5, contiguous: true, unboundedEnds: true, touchesRange: true } });
    expect(plan.floor).toMatch(/^\d+:\d+:/);
    const { rows } = await db.query(`SELECT id, kind, lower, upper FROM genfill.partitions WHERE release = 'carry@1' AND kind = 'carry' ORDER BY lower`);
    expect(rows[0].id).toBe('c-unbounded');
    expect(rows[0].lower.toISOString()).toBe('0001-01-01T00:00:00.000Z');
    expect(rows[2].upper.toISOString()).toBe('2025-07-02T00:00:00.000Z');
    expect(rows[3].lower.toISOString()).toBe('2025-07-04T00:00:00.000Z');
    expect(rows.at(-1).upper.toISOString()).toBe('9999-12-31T00:00:00.000Z');
  });

  it('refuses a second open release on the same candidate generation', async () => {
    await submit('carry@2', 'g3', '2025-07-04T00:00:00Z', '2025-07-05T00:00:00Z');
    const res = await runCli(['plan', 'carry@2'], env);
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(/release carry@1 \(SNAPSHOT_PINNED\) is open on candidate generation g3: one open release per candidate/);
  });

  it('copies the chunks with receipts whose watermark is the projector frontier; catch-up keeps them current', async () => {
    // A change outside the range before the build: the frontier passes it first.
    await tdb.pool.query(`UPDATE public.orders SET amount_cents = amount_cents + 5 WHERE order_id = 3`);
    await drain();
    const frontier = (await db.query(`SELECT snapshot::text AS s FROM genfill.frontiers WHERE dataset = 'orders_enriched'`)).rows[0].s;
    await startBuilding(db, 'carry@1');
    await buildAll(db, 'carry@1');
    expect((await db.query(`SELECT state FROM genfill.releases WHERE id = 'carry@1'`)).rows[0].state).toBe('BUILT');
    const { rows: receipts } = await db.query(
      `SELECT r.watermark::text AS w, r.rows_out::int AS n FROM genfill.receipts r JOIN genfill.partitions p ON p.release = r.release AND p.id = r.partition
        WHERE r.release = 'carry@1' AND p.kind = 'carry'`,
    );
    expect(receipts).toHaveLength(8);
    expect(receipts.every((r) => r.w === frontier)).toBe(true);
    expect(receipts.reduce((a, r) => a + r.n, 0)).toBe(720);
    expect(await diffOutside()).toEqual({ missing: 0, extra: 0, rows: 720 });

    // Live changes outside the range after the copy, and a row moving into the range.
    await tdb.pool.query(`
      UPDATE public.orders SET amount_cents = amount_cents + 9 WHERE order_id IN (1, 2, 900, 1000);
      DELETE FROM public.orders WHERE order_id = 950;
      UPDATE public.orders SET created_at = '2025-07-02 12:00Z' WHERE order_id = 10;
      INSERT INTO public.orders (order_id, customer_id, region, created_at, amount_cents) VALUES (7777, 1, 'east', '2024-12-31 23:59Z', 100);`);
    await drain();
    const round = await catchupRound(db, 'carry@1');
    expect(round.events).toBeGreaterThanOrEqual(7);
    expect((await diffOutside()).missing + (await diffOutside()).extra).toBe(0);
    // The moved row is in the range now, in the release's form (rounded tax), once.
    const { rows: moved } = await db.query(`SELECT created_at, _gf_deleted FROM ${candidate('g3')} WHERE order_id = 10`);
    expect(moved).toHaveLength(1);
    expect(moved[0].created_at.toISOString()).toBe('2025-07-02T12:00:00.000Z');
  });

  it('shows the carry chunks in plan output', async () => {
    const res = await runCli(['plan', 'carry@1', '--json'], env);
    expect(res.code).toBe(0);
    expect(JSON.parse(res.stdout)).toMatchObject({ release: 'carry@1', carry: 8, partitions: 10 });
  });
});
