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
  it('seeds, adopts the legacy table as tax-fix-g2, builds, proves, approves and cuts over to the tax fix under a live writer', async () => {
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
    // The build ran under the writer (inside the range too): one catch-up round applied what the watermarks missed.
    expect(out.catchup).toMatchObject({ round: expect.any(String) });
    expect(out.catchup.events).toBe(out.catchup.applied + out.catchup.noops);
    // (The candidate's row count moved on since its receipts: catch-up and, after the cutover, the projector follow the writer.)
    // The reconciler proved it and another person (not the submitter) approved it.
    expect(out.reconciliation).toMatchObject({ state: 'RECONCILED', findings: { count: 0 } });
    expect(out.approval).toMatchObject({ outcome: 'approved', principal: 'genfill_demo_approver', state: 'APPROVED' });
    // The cutover under the live writer: one switch, a freeze measured, the tail re-verified.
    expect(out.cutover).toMatchObject({ ok: true, from: 'tax-fix-g2', to: 'tax-fix-g3', recovered: false });
    expect(out.cutover.freezeMs).toBeGreaterThan(0);
    expect(out.cutover.tail.pre.mismatchCount + out.cutover.tail.post.mismatchCount).toBe(0);
    // A report pinned to the old generation before the cutover read it to its end after the switch.
    expect(out.pinnedReader).toMatchObject({ generation: 'tax-fix-g2', generations: ['tax-fix-g2'] });
    expect(out.pinnedReader.rows).toBeGreaterThanOrEqual(out.orders.orders);
    const rel = await db.pool.query(`SELECT r.state, d.active_generation AS g FROM genfill.releases r JOIN genfill.datasets d ON d.name = r.dataset WHERE r.id = 'order-tax-fix@3'`);
    expect(rel.rows[0]).toEqual({ state: 'ACTIVE', g: 'tax-fix-g3' });
    // The live writer ran from adopt to the end; the projector kept the view equal to the
    // transform map of the (new) active generation applied to the source, row for row.
    expect(out.live.writer.transactions).toBeGreaterThan(0);
    expect(out.live).toMatchObject({ differences: 0, generation: 'tax-fix-g3' });
    const view = await db.pool.query('SELECT (SELECT count(*) FROM public.orders_enriched)::int AS v, (SELECT count(*) FROM public.orders)::int AS o');
    expect(view.rows[0].v).toBe(view.rows[0].o);
    // Every genfill service ran as a plain login the demo made (issue 28): the operator submitted,
    // the fleet planned, built, reconciled and cut over, the API answered as its own login.
    expect(out.logins).toEqual({
      fleet: 'genfill_demo_fleet',
      api: 'genfill_demo_api',
      operator: 'genfill_demo_operator',
      approver: 'genfill_demo_approver',
      approver2: 'genfill_demo_approver2',
    });
    expect(out.api).toMatchObject({ login: 'genfill_demo_api', status: 200, state: 'ACTIVE' });
    const who = await db.pool.query(
      `SELECT (SELECT submitted_by FROM genfill.releases WHERE id = 'order-tax-fix@3') AS submitted,
              (SELECT array_agg(DISTINCT principal ORDER BY principal) FROM genfill.receipts WHERE release = 'order-tax-fix@3') AS built,
              (SELECT principal FROM genfill.release_log WHERE release = 'order-tax-fix@3' AND action = 'plan') AS planned,
              (SELECT principal FROM genfill.reconciliations WHERE release = 'order-tax-fix@3' ORDER BY id DESC LIMIT 1) AS reconciled,
              (SELECT principal FROM genfill.cutovers WHERE release = 'order-tax-fix@3' AND kind = 'cutover') AS cut,
              (SELECT array_agg(person) FROM genfill.approvals WHERE release = 'order-tax-fix@3') AS approvers`,
    );
    expect(who.rows[0]).toEqual({
      submitted: 'genfill_demo_operator',
      built: ['genfill_demo_fleet'],
      planned: 'genfill_demo_fleet',
      reconciled: 'genfill_demo_fleet',
      cut: 'genfill_demo_fleet',
      approvers: ['demo-ada'],
    });
    const plain = await db.pool.query(
      `SELECT count(*)::int AS n FROM pg_roles WHERE rolname LIKE 'genfill_demo_%' AND (rolsuper OR pg_has_role(oid, 'genfill_owner', 'MEMBER'))`,
    );
    expect(plain.rows[0]).toEqual({ n: 0 });
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
    expect(out.approval).toMatchObject({ outcome: 'already-approved', state: 'ACTIVE' });
    expect(out.cutover).toBeNull();
    expect(out.receipts.receipts).toBe(367);
    const after = await db.pool.query(`SELECT (SELECT count(*) FROM genfill.release_log)::int AS log, (SELECT count(*) FROM genfill.partitions)::int AS parts`);
    expect(after.rows[0]).toEqual(before.rows[0]);
  });
});
