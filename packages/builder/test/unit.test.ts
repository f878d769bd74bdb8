// A unit's job (partition.batchRows): its partitions claimed by one statement and built in one
// transaction, each with its own statement and receipt; when that transaction fails (one
// partition's transform breaks, a key is already in the candidate) nothing of it stays and each
// partition is built in its own transaction, where a failure is that partition's alone.
import type { Job } from 'bullmq';
import { UnrecoverableError } from 'bullmq';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createLogger } from '@genfill/observability';
import { planRelease, submitRelease } from '@genfill/planner';
import { casTransition, createPool, migrate, withTransaction } from '@genfill/registry';
import { createProcessor } from '../src/processor.ts';
import { createTestDatabase, keepOnFailure } from '../../../test/support/db.ts';
import { createExampleSchema, firstGenerationRelease, workspace, writeRelease } from '../../../test/support/fixtures.ts';

const tdb = await createTestDatabase('build_unit');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'unit-test');
const DAYS = ['b-20250701T000000Z', 'b-20250702T000000Z', 'b-20250703T000000Z'];

async function building(id: string, dataset: string, transform?: string): Promise<void> {
  const r = firstGenerationRelease();
  r.release = id;
  r.dataset = dataset;
  r.target.table = `public.${dataset}`;
  r.target.generation = 'g1';
  r.range = { from: '2025-07-01T00:00:00Z', to: '2025-07-04T00:00:00Z' };
  r.partition = { every: 'P1D', batchRows: 1_000_000 };
  if (transform) r.dependencies = [];
  await submitRelease(writeRelease(workspace(), r, { transform }), db);
  await planRelease(db, id);
  await withTransaction(db, (c) => casTransition(c, { release: id, from: 'SNAPSHOT_PINNED', to: 'BUILDING', action: 'plan' }));
}

/** What BullMQ hands the processor: a unit's job on its first delivery. */
function unitJob(release: string): Job {
  return { id: `${DAYS[0]}+2.e0`, data: { release, partition: DAYS[0], epoch: 0, partitions: DAYS }, attemptsMade: 0, opts: { attempts: 5 } } as unknown as Job;
}

const processor = createProcessor({ db, worker: 'unit-test', leaseMs: 60_000, log: createLogger('unit-test', 'silent') });
const rows = async (sql: string, values: unknown[] = []) => (await db.query(sql, values)).rows;

beforeAll(async () => {
  await migrate(db);
  await createExampleSchema(tdb.pool);
  // 300 orders a day over 2025-07-01..03; order 400 (on the 2nd) divides by zero in `divide` below.
  await tdb.pool.query(`
    INSERT INTO public.orders (order_id, customer_id, region, created_at, amount_cents)
    SELECT i, i % 7, (ARRAY['north', 'south', 'east'])[1 + i % 3], timestamptz '2025-07-01' + (i - 1) * interval '288 seconds', 1000 + i
      FROM generate_series(1, 900) AS i`);
}, 120_000);
beforeEach(() => keepOnFailure(tdb));
afterAll(() => db.end());

describe('a unit of partitions', () => {
  it('builds every partition in one transaction with a receipt each, and the last one completes the release', async () => {
    await building('unit@1', 'orders_unit');
    const out = await processor(unitJob('unit@1'));
    expect(out).toMatchObject({ status: 'unit', outcomes: DAYS.map((partition) => ({ partition, outcome: { status: 'built', rows: 300 } })) });
    const receipts = await rows(`SELECT partition, rows_out::int AS n FROM genfill.receipts WHERE release = 'unit@1' ORDER BY partition`);
    expect(receipts).toEqual(DAYS.map((partition) => ({ partition, n: 300 })));
    // One transaction: every receipt's rows were written by the same transaction id.
    expect(await rows(`SELECT count(DISTINCT xmin::text)::int AS n FROM genfill_data.orders_unit__g1`)).toEqual([{ n: 1 }]);
    expect(await rows(`SELECT state FROM genfill.releases WHERE id = 'unit@1'`)).toEqual([{ state: 'BUILT' }]);
    // Delivered again (its acknowledgement lost): every partition is found built, nothing written.
    expect(await processor(unitJob('unit@1'))).toMatchObject({ status: 'unit', outcomes: DAYS.map((partition) => ({ partition, outcome: { status: 'already-built' } })) });
  });

  it("falls back to one transaction per partition when one partition's transform breaks: the others are built, that one FAILED, the job fails for good", async () => {
    const divide = `SELECT s.order_id, s.created_at, s.region, s.amount_cents, (s.amount_cents / (s.order_id - 400))::bigint AS tax_cents FROM source AS s`;
    await building('divide-unit@1', 'orders_divu', divide);
    const err = await processor(unitJob('divide-unit@1')).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UnrecoverableError);
    expect((err as Error).message).toMatch(/division by zero/);
    expect(await rows(`SELECT id, status, reason FROM genfill.partitions WHERE release = 'divide-unit@1' ORDER BY id`)).toEqual([
      { id: DAYS[0], status: 'BUILT', reason: null },
      { id: DAYS[1], status: 'FAILED', reason: 'TRANSFORM_ERROR' },
      { id: DAYS[2], status: 'BUILT', reason: null },
    ]);
    expect(await rows(`SELECT count(*)::int AS n FROM genfill_data.orders_divu__g1`)).toEqual([{ n: 600 }]);
    // Built one transaction each after the unit's was rolled back.
    expect(await rows(`SELECT count(DISTINCT xmin::text)::int AS n FROM genfill_data.orders_divu__g1`)).toEqual([{ n: 2 }]);
  });

  it('falls back when a key of a partition is already in the candidate, and keeps the newer row there', async () => {
    await building('held-unit@1', 'orders_heldu');
    // A catch-up wrote order 450 (the 2nd) first, at revision 7: the fast shape meets it.
    await tdb.pool.query(
      `INSERT INTO genfill_data.orders_heldu__g1 (generation, order_id, created_at, region, amount_cents, tax_cents, _gf_rev)
       SELECT 'g1', order_id, created_at, region, amount_cents, 1, 7 FROM public.orders WHERE order_id = 450`,
    );
    const out = await processor(unitJob('held-unit@1'));
    expect(out).toMatchObject({ status: 'unit', outcomes: DAYS.map((partition) => ({ partition, outcome: { status: 'built' } })) });
    expect(await rows(`SELECT tax_cents::int AS t, _gf_rev::int AS rev FROM genfill_data.orders_heldu__g1 WHERE order_id = 450`)).toEqual([{ t: 1, rev: 7 }]);
    expect(await rows(`SELECT count(*)::int AS n FROM genfill_data.orders_heldu__g1`)).toEqual([{ n: 900 }]);
    expect(await rows(`SELECT count(*)::int AS n FROM genfill.receipts WHERE release = 'held-unit@1'`)).toEqual([{ n: 3 }]);
  });
});
