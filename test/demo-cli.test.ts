// `genfill demo` end to end on a small dataset: first run tells the story, a second is harmless.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { createTestQueues } from './support/redis.ts';

const db = await createTestDatabase('demo_cli');
const env = { DATABASE_URL: db.url, GENFILL_QUEUE_PREFIX: createTestQueues('demo-cli').prefix };
const dir = join(mkdtempSync(join(tmpdir(), 'genfill-demo-')), 'demo');
beforeEach(() => keepOnFailure(db));

describe('genfill demo', () => {
  it('seeds, adopts the legacy table as tax-fix-g2, submits and plans the tax fix', async () => {
    const res = await runCli(['demo', '--rows', '3000', '--dir', dir, '--no-throttle', '--json'], env);
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    const out = JSON.parse(res.stdout);
    expect(out.orders.seeded).toBe(true);
    expect(out.adopt).toMatchObject({ status: 'adopted', generation: 'tax-fix-g2', rows: out.orders.orders });
    expect(out.submit.status).toBe('submitted');
    expect(out.plan).toMatchObject({ release: 'order-tax-fix@3', status: 'planned', state: 'BUILDING', partitions: 367, carry: 2 });
    expect(out.coverageProved).toBe(true);
    // Two worker processes built the candidate: one receipt per partition, sums conserved.
    expect(out.build).toMatchObject({ workers: 2, state: 'BUILT', failed: 0 });
    expect(out.receipts).toMatchObject({ partitions: 367, receipts: 367, conservedEqual: true });
    expect(out.receipts.rowsOut).toBe(out.receipts.rowsIn);
    const cand = await db.pool.query(`SELECT count(*)::int AS n FROM genfill_data."orders_enriched__tax-fix-g3" WHERE NOT _gf_deleted`);
    expect(cand.rows[0].n).toBe(out.receipts.rowsOut);
    // The reconciler proved it and a second role approved it.
    expect(out.reconciliation).toMatchObject({ state: 'RECONCILED', findings: { count: 0 } });
    expect(out.approval).toMatchObject({ outcome: 'approved', principal: 'genfill_demo_approver', state: 'APPROVED' });
    // The live writer ran from adopt to the end; the projector kept the view equal to the
    // transform map of the source, row for row.
    expect(out.live.writer.transactions).toBeGreaterThan(0);
    expect(out.live.differences).toBe(0);
    const view = await db.pool.query('SELECT (SELECT count(*) FROM public.orders_enriched)::int AS v, (SELECT count(*) FROM public.orders)::int AS o');
    expect(view.rows[0].v).toBe(view.rows[0].o);
  });

  it('is harmless when run again', async () => {
    const before = await db.pool.query(`SELECT (SELECT count(*) FROM genfill.release_log)::int AS log, (SELECT count(*) FROM genfill.partitions)::int AS parts`);
    const res = await runCli(['demo', '--rows', '3000', '--dir', dir, '--no-throttle', '--json'], env);
    expect(res.code).toBe(0);
    const out = JSON.parse(res.stdout);
    expect(out.orders.seeded).toBe(false);
    expect(out.adopt.status).toBe('already-adopted');
    expect(out.submit.status).toBe('unchanged');
    expect(out.plan.status).toBe('already-planned');
    expect(out.build).toBeNull();
    expect(out.reconciliation).toBeNull();
    expect(out.approval).toMatchObject({ outcome: 'already-approved', state: 'APPROVED' });
    expect(out.receipts.receipts).toBe(367);
    const after = await db.pool.query(`SELECT (SELECT count(*) FROM genfill.release_log)::int AS log, (SELECT count(*) FROM genfill.partitions)::int AS parts`);
    expect(after.rows[0]).toEqual(before.rows[0]);
  });
});
