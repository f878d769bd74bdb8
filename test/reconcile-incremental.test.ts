// Incremental reconciliations (issue 16, invariant 10): re-check only the keys changed since the
// parent — the latest, passing reconciliation — against the transform of their latest logged
// image, and record the parent. Approvals survive a passing incremental reconciliation (they
// count along the chain, for approve and for the cutover) and not a failing one, which names
// every mismatched key and moves the release to RECONCILIATION_REQUIRED.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createLogger } from '@genfill/observability';
import { projectDataset } from '@genfill/projector';
import { reconcile } from '@genfill/reconcile';
import { createPool, type Db } from '@genfill/registry';
import { builtRelease, candidate, seedAdopted } from '../packages/reconcile/test/fixtures.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure, urlAs } from './support/db.ts';
import { catchupRound, cutoverChecks } from '@genfill/switch';

const tdb = await createTestDatabase('reconcile_incremental');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'incremental-test', 8);
const env = { DATABASE_URL: tdb.url };
const log = createLogger('incremental-test', 'silent');
const DS = 'orders_enriched';
const FROM = '2025-07-01T00:00:00Z';
let bob: Db;
let alice: Db;

const one = async <T = Record<string, unknown>>(q: string, v: unknown[] = []) => (await db.query(q, v)).rows[0] as T;
const state = async (id: string) => (await one<{ state: string }>(`SELECT state FROM genfill.releases WHERE id = $1`, [id])).state;
const drain = () => projectDataset(DS, { db, log, untilIdle: true, id: 'incremental-test', leaseMs: 60_000 });
const chain = (id: string) => one<{ latest: string; chain: string[]; approvals: number; voided_by: string | null }>(`SELECT latest::text, chain::text[] AS chain, approvals, voided_by::text FROM genfill.approval_chain($1)`, [id]);

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: FROM, days: 3, perDay: 48 });
  await tdb.pool.query('GRANT genfill_approver TO genfill_bob, genfill_alice');
  bob = createPool({ DATABASE_URL: urlAs(tdb, 'genfill_bob') } as never, 'bob', 2);
  alice = createPool({ DATABASE_URL: urlAs(tdb, 'genfill_alice') } as never, 'alice', 2);
  await builtRelease(db, { id: 'inc@1', generation: 'g3', from: FROM, to: '2025-07-03T00:00:00Z', approvals: 2 });
  await drain();
  await catchupRound(db, 'inc@1');
});
beforeEach(() => keepOnFailure(tdb));
afterAll(async () => {
  await bob.end();
  await alice.end();
  await db.end();
});

describe('incremental reconciliation', () => {
  it('is refused without a passing parent', async () => {
    const res = await runCli(['reconcile', 'inc@1', '--incremental'], env);
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(/inc@1 is BUILT: an incremental reconciliation re-checks a RECONCILED or APPROVED release/);
  });

  it('re-checks exactly the keys changed since its parent; approvals count along the chain of passing ones', async () => {
    const full = await reconcile(db, 'inc@1');
    expect(full.state).toBe('RECONCILED');
    await bob.query('SELECT * FROM genfill.approve($1, $2)', ['inc@1', full.id]);
    expect(await state('inc@1')).toBe('RECONCILED'); // 1 of 2

    // Changes after the full reconciliation: updates inside and outside the range, a delete, a move.
    await tdb.pool.query(`
      UPDATE public.orders SET amount_cents = amount_cents + 11 WHERE order_id BETWEEN 3 AND 9;
      UPDATE public.orders SET amount_cents = amount_cents + 1 WHERE order_id = 140;
      DELETE FROM public.orders WHERE order_id = 12;
      UPDATE public.orders SET created_at = created_at + interval '1 day' WHERE order_id = 20;`);
    await drain();
    await catchupRound(db, 'inc@1');
    const res = await runCli(['reconcile', 'inc@1', '--incremental', '--json'], env);
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    const r = JSON.parse(res.stdout);
    expect(r).toMatchObject({ kind: 'incremental', parent: full.id, state: 'RECONCILED', from: 'RECONCILED', findings: { count: 0 } });
    expect(r.keys).toBe(10); // 7 + 1 + 1 + 1: exactly the changed keys
    expect(await one(`SELECT kind, parent::text FROM genfill.reconciliations WHERE id = $1`, [r.id])).toEqual({ kind: 'incremental', parent: full.id });
    // Bob's approval of the parent still counts; alice approves the latest and the release is APPROVED.
    expect(await chain('inc@1')).toMatchObject({ latest: r.id, chain: [r.id, full.id], approvals: 1, voided_by: null });
    await alice.query('SELECT * FROM genfill.approve($1, $2)', ['inc@1', r.id]);
    expect(await state('inc@1')).toBe('APPROVED');
    // Approved: a second incremental run on top keeps both approvals, and the cutover counts them.
    await tdb.pool.query(`UPDATE public.orders SET amount_cents = amount_cents + 2 WHERE order_id = 30`);
    await drain();
    await catchupRound(db, 'inc@1');
    const again = JSON.parse((await runCli(['reconcile', 'inc@1', '--incremental', '--json'], env)).stdout);
    expect(again).toMatchObject({ parent: r.id, state: 'RECONCILED', from: 'APPROVED', keys: 1 });
    expect(await state('inc@1')).toBe('APPROVED');
    expect(await chain('inc@1')).toMatchObject({ chain: [again.id, r.id, full.id], approvals: 2 });
    const approvals = (await cutoverChecks(db, 'inc@1')).find((c) => c.name === 'approvals')!;
    expect(approvals).toMatchObject({ ok: true, detail: `2 of 2 approvals on reconciliation #${again.id} (along the chain #${again.id} ← #${r.id} ← #${full.id})` });
  });

  it('a failing one names every mismatched key, moves the release to RECONCILIATION_REQUIRED and voids the approvals', async () => {
    await tdb.pool.query(`UPDATE public.orders SET amount_cents = amount_cents + 5 WHERE order_id IN (40, 41)`);
    await drain();
    await catchupRound(db, 'inc@1');
    // One candidate row of a changed key damaged by hand after catch-up wrote it.
    await tdb.pool.query(`UPDATE ${candidate('g3')} SET tax_cents = tax_cents + 1 WHERE order_id = 41`);
    const res = await runCli(['reconcile', 'inc@1', '--incremental', '--json'], env);
    expect(res.code).toBe(4);
    const r = JSON.parse(res.stdout);
    expect(r).toMatchObject({ state: 'RECONCILIATION_REQUIRED', keys: 2, findings: { count: 1, first: [{ key: { order_id: 41 }, kind: 'value' }] } });
    expect(res.stderr).toMatch(/1 keys changed since reconciliation #\d+ do not match.*approvals are void/);
    expect(await state('inc@1')).toBe('RECONCILIATION_REQUIRED');
    expect((await db.query(`SELECT kind, check_name, key FROM genfill.reconciliation_findings WHERE reconciliation_id = $1`, [r.id])).rows).toEqual([
      { kind: 'value', check_name: 'dual_compute', key: { order_id: 41 } },
    ]);
    expect(await chain('inc@1')).toMatchObject({ latest: r.id, approvals: 0, voided_by: r.id });
    const approvals = (await cutoverChecks(db, 'inc@1')).find((c) => c.name === 'approvals')!;
    expect(approvals.ok).toBe(false);
    expect(approvals.detail).toMatch(new RegExp(`voided by reconciliation #${r.id} \\(RECONCILIATION_REQUIRED\\)`));
  });
});
