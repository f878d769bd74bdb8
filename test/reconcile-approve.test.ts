// Approvals (SPEC "Identity and roles", invariant 10): `genfill approve` as the connected
// login, never the submitter, bound to one reconciliation id; at the release's required
// count of distinct approvers of the latest reconciliation it becomes APPROVED.
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startBuilding } from '@genfill/planner';
import { createPool } from '@genfill/registry';
import { buildAll, builtRelease, plannedRelease, seedAdopted, urlAs } from '../packages/reconcile/test/fixtures.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { workspace } from './support/fixtures.ts';

const tdb = await createTestDatabase('reconcile_approve');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'approve-test', 4);
const admin = { DATABASE_URL: tdb.url };
const alice = { DATABASE_URL: urlAs(tdb, 'genfill_alice') };
const bob = { DATABASE_URL: urlAs(tdb, 'genfill_bob') };
const dir = workspace();
const FROM = '2025-07-01T00:00:00Z';
const TO = '2025-07-03T00:00:00Z';

const state = async (id: string) => (await db.query(`SELECT state FROM genfill.releases WHERE id = $1`, [id])).rows[0].state as string;
const reconcileOk = async (id: string) => {
  const res = await runCli(['reconcile', id, '--json', '--findings-out', join(dir, `${id}-${Date.now()}.ndjson`)], admin);
  expect(res.code).toBe(0);
  return JSON.parse(res.stdout).id as string;
};

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: FROM, days: 3, perDay: 100 });
  await tdb.pool.query('GRANT genfill_operator, genfill_approver TO genfill_alice');
  await tdb.pool.query('GRANT genfill_approver TO genfill_bob');
  await tdb.pool.query('GRANT SELECT ON public.orders, public.tax_rates TO genfill_operator');
});
beforeEach(() => keepOnFailure(tdb));
afterAll(() => db.end());

describe('genfill approve', () => {
  const id = 'by-alice@1';

  it('refuses an approval before the release is reconciled', async () => {
    const alicePool = createPool({ DATABASE_URL: alice.DATABASE_URL } as never, 'alice');
    try {
      await plannedRelease(db, { id, generation: 'g3', from: FROM, to: TO, submitAs: alicePool });
    } finally {
      await alicePool.end();
    }
    await startBuilding(db, id);
    await buildAll(db, id);
    expect(await state(id)).toBe('BUILT');
    const res = await runCli(['approve', id], bob);
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(/is BUILT, not RECONCILED/);
  });

  it('refuses the submitter (exit 3), approves as another login, and treats a second approval as a no-op', async () => {
    await reconcileOk(id);
    const own = await runCli(['approve', id], alice);
    expect(own.code).toBe(3);
    expect(own.stderr).toMatch(/submitted by genfill_alice: the submitter cannot approve/);
    expect(await state(id)).toBe('RECONCILED');

    const ok = await runCli(['approve', id], bob);
    expect(ok.stderr).toBe('');
    expect(ok.code).toBe(0);
    expect(ok.stdout).toMatch(new RegExp(`approved: ${id} RECONCILED → APPROVED by genfill_bob \\(reconciliation #\\d+, 1/1 approvals\\)`));
    expect(await state(id)).toBe('APPROVED');

    const again = await runCli(['approve', id, '--json'], bob);
    expect(again.code).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ outcome: 'already-approved', principal: 'genfill_bob', approvals: 1, state: 'APPROVED' });
    const rows = (await db.query(`SELECT principal FROM genfill.approvals WHERE release = $1`, [id])).rows;
    expect(rows).toEqual([{ principal: 'genfill_bob' }]);
    const log = (await db.query(`SELECT action, to_state, principal FROM genfill.release_log WHERE release = $1 AND action = 'approve'`, [id])).rows;
    expect(log).toEqual([{ action: 'approve', to_state: 'APPROVED', principal: 'genfill_bob' }]);
  });

  it('does not count an approval of an older reconciliation id', async () => {
    const two = 'two-approvers@1';
    await builtRelease(db, { id: two, generation: 'g4', from: FROM, to: TO, approvals: 2 });
    const first = await reconcileOk(two);
    const second = await reconcileOk(two);
    expect(Number(second)).toBeGreaterThan(Number(first));
    // Bob approved the first reconciliation; the evidence changed since.
    await db.query(`INSERT INTO genfill.approvals (release, reconciliation_id, principal) VALUES ($1, $2, 'genfill_bob')`, [two, first]);

    const a = await runCli(['approve', two, '--json'], alice);
    expect(a.code).toBe(0);
    expect(JSON.parse(a.stdout)).toMatchObject({ outcome: 'recorded', reconciliationId: second, approvals: 1, required: 2, state: 'RECONCILED' });
    const counted = await db.query(
      `SELECT count(DISTINCT principal)::int AS n FROM genfill.approvals WHERE release = $1 AND reconciliation_id = $2`,
      [two, second],
    );
    expect(counted.rows[0].n).toBe(1);
    expect(await state(two)).toBe('RECONCILED');

    const b = await runCli(['approve', two], bob);
    expect(b.code).toBe(0);
    expect(b.stdout).toMatch(/RECONCILED → APPROVED by genfill_bob .*2\/2 approvals/);
    expect(await state(two)).toBe('APPROVED');
  });

  it('lets no approver write an approval row directly', async () => {
    const res = await runCli(['approve', 'no-such@1'], bob);
    expect(res.code).toBe(3);
    const c = new pg.Client({ connectionString: bob.DATABASE_URL });
    await c.connect();
    try {
      await expect(c.query(`INSERT INTO genfill.approvals (release, reconciliation_id, principal) VALUES ('by-alice@1', 1, 'genfill_alice')`)).rejects.toThrow(/permission denied/);
    } finally {
      await c.end();
    }
  });
});
