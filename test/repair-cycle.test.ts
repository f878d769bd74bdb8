// The way out of RECONCILIATION_REQUIRED (SPEC "State machine"): reconcile finds damage,
// `repair --findings` rebuilds exactly those partitions, reconcile proves it, a second role
// approves. Earlier receipts stay as history.
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createPool } from '@genfill/registry';
import { builtRelease, candidate, readFindings, seedAdopted, urlAs } from '../packages/reconcile/test/fixtures.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { workspace } from './support/fixtures.ts';

const tdb = await createTestDatabase('repair_cycle');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'repair-cycle-test', 4);
const env = { DATABASE_URL: tdb.url };
const R = 'cycle@1';
const CAND = candidate('g9');

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: '2025-07-01T00:00:00Z', days: 5, perDay: 240 });
  await builtRelease(db, { id: R, generation: 'g9', from: '2025-07-01T00:00:00Z', to: '2025-07-05T00:00:00Z' });
  await tdb.pool.query('GRANT genfill_approver TO genfill_bob');
});
beforeEach(() => keepOnFailure(tdb));
afterAll(() => db.end());

describe('repair after reconciliation', () => {
  it('blocks two damaged partitions, repairs exactly them from the findings, then reconciles and approves', async () => {
    await db.query(`DELETE FROM ${CAND} WHERE order_id = 250`);
    await db.query(`UPDATE ${CAND} SET tax_cents = tax_cents + 1 WHERE order_id = 700`);
    const untouched = (await db.query(`SELECT xmin::text AS x FROM ${CAND} WHERE order_id = 10`)).rows[0].x;
    const out = join(workspace(), 'findings.ndjson');

    const first = await runCli(['reconcile', R, '--findings-out', out], env);
    expect(first.code).toBe(4);
    const findings = readFindings(out);
    expect(new Set(findings.filter((f) => f.partition).map((f) => f.partition))).toEqual(new Set(['b-20250702T000000Z', 'b-20250703T000000Z']));

    const repaired = await runCli(['repair', R, '--findings', out, '--json'], env);
    expect(repaired.stderr).toBe('');
    expect(repaired.code).toBe(0);
    const r = JSON.parse(repaired.stdout);
    expect(r.state).toBe('BUILT');
    expect(r.repaired.map((p: { partition: string }) => p.partition)).toEqual(['b-20250702T000000Z', 'b-20250703T000000Z']);
    expect((await db.query(`SELECT xmin::text AS x FROM ${CAND} WHERE order_id = 10`)).rows[0].x).toBe(untouched);

    const second = await runCli(['reconcile', R, '--findings-out', join(workspace(), 'again.ndjson')], env);
    expect(second.stderr).toBe('');
    expect(second.code).toBe(0);
    const receipts = (await db.query(`SELECT partition, kind FROM genfill.receipts WHERE release = $1 ORDER BY partition, id`, [R])).rows;
    expect(receipts.filter((x) => x.kind === 'repair').map((x) => x.partition)).toEqual(['b-20250702T000000Z', 'b-20250703T000000Z']);
    expect(receipts.filter((x) => x.kind === 'build')).toHaveLength(4);

    const approve = await runCli(['approve', R], { DATABASE_URL: urlAs(tdb, 'genfill_bob') });
    expect(approve.stderr).toBe('');
    expect(approve.code).toBe(0);
    expect((await db.query(`SELECT state FROM genfill.releases WHERE id = $1`, [R])).rows[0].state).toBe('APPROVED');
  });
});
