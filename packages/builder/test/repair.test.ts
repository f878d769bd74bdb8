// Repair rebuilds exactly the named partitions with superseding receipts (SPEC invariant 3).
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { InvalidInputError, RefusedError } from '@genfill/contracts';
import { planRelease, submitRelease } from '@genfill/planner';
import { casTransition, createPool, migrate, withTransaction } from '@genfill/registry';
import { buildPartition, claimPartition, partitionsFromFindings, repairRelease } from '../src/index.ts';
import { createTestDatabase, keepOnFailure } from '../../../test/support/db.ts';
import { createExampleSchema, firstGenerationRelease, workspace, writeRelease } from '../../../test/support/fixtures.ts';

const tdb = await createTestDatabase('repair');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'repair-test');
const R = 'repair@1';
const CAND = 'genfill_data.orders_rep__g1';
const EXPECTED = `SELECT o.order_id, o.created_at, o.region, o.amount_cents, round(o.amount_cents * coalesce(t.rate, 0))::bigint AS tax_cents
                    FROM public.orders o LEFT JOIN public.tax_rates t ON t.region = o.region
                   WHERE o.created_at >= '2025-07-01' AND o.created_at < '2025-07-04'`;
const diff = async () =>
  Number((await db.query(`SELECT count(*) AS n FROM ((${EXPECTED} EXCEPT SELECT order_id, created_at, region, amount_cents, tax_cents FROM ${CAND})
                                UNION ALL (SELECT order_id, created_at, region, amount_cents, tax_cents FROM ${CAND} EXCEPT ${EXPECTED})) d`)).rows[0].n);

beforeAll(async () => {
  await migrate(db);
  await createExampleSchema(tdb.pool);
  await tdb.pool.query(`INSERT INTO public.orders (order_id, customer_id, region, created_at, amount_cents)
    SELECT i, i % 7, (ARRAY['north', 'south', 'east'])[1 + i % 3], timestamptz '2025-07-01' + (i - 1) * interval '5 minutes', 1000 + i
      FROM generate_series(1, 800) AS i`);
  const r = firstGenerationRelease();
  Object.assign(r, { release: R, dataset: 'orders_rep', range: { from: '2025-07-01T00:00:00Z', to: '2025-07-04T00:00:00Z' } });
  r.target.table = 'public.orders_rep';
  await submitRelease(writeRelease(workspace(), r), db);
  await planRelease(db, R);
  await withTransaction(db, (c) => casTransition(c, { release: R, from: 'SNAPSHOT_PINNED', to: 'BUILDING', action: 'plan' }));
  for (const p of ['b-20250701T000000Z', 'b-20250702T000000Z', 'b-20250703T000000Z']) {
    const c = (await claimPartition(db, { release: R, partition: p, worker: 't', leaseMs: 60_000 })) as { attempt: number };
    await buildPartition(db, { release: R, partition: p, attempt: c.attempt });
  }
});
beforeEach(() => keepOnFailure(tdb));
afterAll(() => db.end());

describe('repair', () => {
  it('refuses a release that reconciliation has not refused', async () => {
    await expect(repairRelease(db, { release: R, partitions: ['b-20250701T000000Z'] })).rejects.toBeInstanceOf(RefusedError);
  });

  it('rebuilds exactly the damaged partitions, supersedes their receipts, keeps history and returns to BUILT', async () => {
    expect(await diff()).toBe(0);
    await db.query(`DELETE FROM ${CAND} WHERE order_id = 10`);
    await db.query(`UPDATE ${CAND} SET tax_cents = tax_cents + 1 WHERE order_id = 700`);
    await db.query(`INSERT INTO ${CAND} (generation, order_id, created_at, region, amount_cents, tax_cents) VALUES ('g1', 99999, '2025-07-01T01:00:00Z', 'x', 1, 1)`);
    const untouched = (await db.query(`SELECT xmin::text AS x FROM ${CAND} WHERE order_id = 400`)).rows[0].x;
    expect(await diff()).toBe(4);
    await withTransaction(db, (c) => casTransition(c, { release: R, from: 'BUILT', to: 'RECONCILIATION_REQUIRED', action: 'reconcile' }));

    const res = await repairRelease(db, { release: R, partitions: ['b-20250703T000000Z', 'b-20250701T000000Z'], reason: 'test damage' });
    expect(res.state).toBe('BUILT');
    expect(res.repaired.map((r) => [r.partition, r.attempt])).toEqual([['b-20250701T000000Z', 2], ['b-20250703T000000Z', 2]]);
    expect(await diff()).toBe(0);
    // The middle partition was not touched.
    expect((await db.query(`SELECT xmin::text AS x FROM ${CAND} WHERE order_id = 400`)).rows[0].x).toBe(untouched);
    const receipts = (await db.query(`SELECT partition, kind, attempt, supersedes IS NOT NULL AS sup FROM genfill.receipts WHERE release = $1 ORDER BY partition, id`, [R])).rows;
    expect(receipts).toEqual([
      { partition: 'b-20250701T000000Z', kind: 'build', attempt: 1, sup: false },
      { partition: 'b-20250701T000000Z', kind: 'repair', attempt: 2, sup: true },
      { partition: 'b-20250702T000000Z', kind: 'build', attempt: 1, sup: false },
      { partition: 'b-20250703T000000Z', kind: 'build', attempt: 1, sup: false },
      { partition: 'b-20250703T000000Z', kind: 'repair', attempt: 2, sup: true },
    ]);
    const log = (await db.query(`SELECT action, from_state, to_state, reason FROM genfill.release_log WHERE release = $1 AND action IN ('repair', 'built') ORDER BY id`, [R])).rows;
    expect(log.slice(-2)).toEqual([
      { action: 'repair', from_state: 'RECONCILIATION_REQUIRED', to_state: 'BUILDING', reason: 'test damage' },
      { action: 'built', from_state: 'BUILDING', to_state: 'BUILT', reason: null },
    ]);
  });

  it('a repair that dies strands nothing: the next claimer rebuilds the partition in repair mode with one superseding receipt', async () => {
    await db.query(`UPDATE ${CAND} SET tax_cents = tax_cents + 1 WHERE order_id = 300`);
    expect(await diff()).toBe(2); // the changed row is missing in one direction and extra in the other
    await withTransaction(db, (c) => casTransition(c, { release: R, from: 'BUILT', to: 'RECONCILIATION_REQUIRED', action: 'reconcile' }));
    const P = 'b-20250702T000000Z';
    // What repairRelease records first, by hand: the release back to BUILDING, the partition
    // marked for repair and claimed by the repair — which then dies: its 1 ms lease runs out.
    await withTransaction(db, async (c) => {
      await casTransition(c, { release: R, from: 'RECONCILIATION_REQUIRED', to: 'BUILDING', action: 'repair', reason: 'dies' });
      await c.query(`UPDATE genfill.partitions SET status = 'PENDING', repair_pending = true WHERE release = $1 AND id = $2`, [R, P]);
    });
    const dead = await claimPartition(db, { release: R, partition: P, worker: 'repair:dead', leaseMs: 1 });
    expect(dead.kind).toBe('claimed');
    await new Promise((r) => setTimeout(r, 20));
    // A worker's delivery of the re-enqueued job: an ordinary claim and build.
    const w = await claimPartition(db, { release: R, partition: P, worker: 'worker-2', leaseMs: 60_000 });
    expect(w).toMatchObject({ kind: 'claimed', attempt: (dead as { attempt: number }).attempt + 1 });
    const built = await buildPartition(db, { release: R, partition: P, attempt: (w as { attempt: number }).attempt });
    expect(built.releaseBuilt).toBe(true);
    expect(await diff()).toBe(0);
    const receipts = (await db.query(`SELECT kind, supersedes IS NOT NULL AS sup FROM genfill.receipts WHERE release = $1 AND partition = $2 ORDER BY id`, [R, P])).rows;
    expect(receipts).toEqual([
      { kind: 'build', sup: false },
      { kind: 'repair', sup: true },
    ]);
    expect((await db.query(`SELECT status, repair_pending FROM genfill.partitions WHERE release = $1 AND id = $2`, [R, P])).rows[0]).toEqual({ status: 'BUILT', repair_pending: false });
    // The dead repair's late commit is fenced: its attempt is stale.
    await expect(buildPartition(db, { release: R, partition: P, attempt: (dead as { attempt: number }).attempt })).rejects.toThrow(/attempt|BUILDING/);
  });

  it('reads the partitions to repair from a findings file and names bad lines', () => {
    const text = ['{"partition":"b-1","key":{"order_id":1},"kind":"missing"}', '{"partition":"b-2","kind":"extra"}', '{"partition":"b-1","kind":"value"}', '{"partition":null,"kind":"coverage"}', ''].join('\n');
    expect(partitionsFromFindings(text, 'f.ndjson').sort()).toEqual(['b-1', 'b-2']);
    expect(() => partitionsFromFindings('{"kind":"x"}\nnope', 'f.ndjson')).toThrow(InvalidInputError);
  });
});
