// The way out of RECONCILIATION_REQUIRED (SPEC "State machine"): reconcile finds damage,
// `repair --findings` rebuilds exactly those partitions, reconcile proves it, a second role
// approves. Earlier receipts stay as history. `repair --reconciliation <id>` reads the same
// findings from the registry instead of a file.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { partitionsFromFindings } from '@genfill/builder';
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
    expect(receipts.filter((x) => x.kind === 'build')).toHaveLength(6); // four days, two carry chunks

    const approve = await runCli(['approve', R], { DATABASE_URL: urlAs(tdb, 'genfill_bob') });
    expect(approve.stderr).toBe('');
    expect(approve.code).toBe(0);
    expect((await db.query(`SELECT state FROM genfill.releases WHERE id = $1`, [R])).rows[0].state).toBe('APPROVED');
  });
});

describe('repair from the stored findings of a reconciliation', () => {
  const R2 = 'cycle@2';
  const CAND2 = candidate('g10');
  let reconciliation: string;
  let file: string;

  const snapshot = async () =>
    (await db.query(
      `SELECT (SELECT state FROM genfill.releases WHERE id = $1) AS state,
              (SELECT count(*)::int FROM genfill.receipts WHERE release = $1) AS receipts,
              (SELECT count(*)::int FROM genfill.release_log WHERE release = $1) AS log,
              (SELECT string_agg(id || ':' || attempt, ',' ORDER BY id) FROM genfill.partitions WHERE release = $1) AS attempts`,
      [R2],
    )).rows[0];

  it('refuses (exit 2, nothing written) an id that is not a reconciliation of this release', async () => {
    await builtRelease(db, { id: R2, generation: 'g10', from: '2025-07-01T00:00:00Z', to: '2025-07-05T00:00:00Z' });
    await db.query(`DELETE FROM ${CAND2} WHERE order_id = 260`);
    await db.query(`UPDATE ${CAND2} SET tax_cents = tax_cents + 1 WHERE order_id = 900`);
    file = join(workspace(), 'cycle2.ndjson');
    const first = await runCli(['reconcile', R2, '--json', '--findings-out', file], env);
    expect(first.code).toBe(4);
    reconciliation = JSON.parse(first.stdout).id;

    const before = await snapshot();
    expect(before.state).toBe('RECONCILIATION_REQUIRED');
    // A reconciliation of another release.
    await builtRelease(db, { id: 'cycle@3', generation: 'g11', from: '2025-07-05T00:00:00Z', to: '2025-07-06T00:00:00Z' });
    const third = await runCli(['reconcile', 'cycle@3', '--json', '--findings-out', join(workspace(), 'cycle3.ndjson')], env);
    expect(third.code).toBe(0);
    const other = JSON.parse(third.stdout).id as string;
    const cases: [string[], RegExp][] = [
      [['--reconciliation', other], new RegExp(`--reconciliation: reconciliation #${other} is a reconciliation of cycle@3, not of ${R2}`)],
      [['--reconciliation', '999999'], /--reconciliation: there is no reconciliation #999999/],
      [['--reconciliation', 'latest'], /--reconciliation: expected a reconciliation id/],
      [['--reconciliation', reconciliation, '--findings', file], /--findings <file> or --reconciliation <id>, not both/],
    ];
    for (const [args, message] of cases) {
      const res = await runCli(['repair', R2, ...args], env);
      expect(res.code, args.join(' ')).toBe(2);
      expect(res.stderr).toMatch(/nothing was written/);
      expect(res.stderr).toMatch(message);
    }
    expect(await snapshot()).toEqual(before);
    // A passing reconciliation names no partition: nothing to rebuild, nothing written.
    const clean = await runCli(['repair', 'cycle@3', '--reconciliation', other], env);
    expect(clean.code).toBe(2);
    expect(clean.stderr).toMatch(new RegExp(`reconciliation #${other} of cycle@3 \\(RECONCILED, 0 findings\\) names no partition`));
    expect((await db.query(`SELECT state FROM genfill.releases WHERE id = 'cycle@3'`)).rows[0].state).toBe('RECONCILED');
  });

  it('rebuilds exactly the partitions --findings <file> would, then reconciles', async () => {
    const fromFile = partitionsFromFindings(readFileSync(file, 'utf8'), file).sort();
    expect(fromFile).toEqual(['b-20250702T000000Z', 'b-20250704T000000Z']);
    const untouched = (await db.query(`SELECT xmin::text AS x FROM ${CAND2} WHERE order_id = 10`)).rows[0].x;

    const repaired = await runCli(['repair', R2, '--reconciliation', reconciliation, '--json'], env);
    expect(repaired.stderr).toBe('');
    expect(repaired.code).toBe(0);
    const r = JSON.parse(repaired.stdout);
    expect(r.state).toBe('BUILT');
    expect(r.repaired.map((p: { partition: string }) => p.partition)).toEqual(fromFile);
    expect((await db.query(`SELECT xmin::text AS x FROM ${CAND2} WHERE order_id = 10`)).rows[0].x).toBe(untouched);

    const second = await runCli(['reconcile', R2, '--findings-out', join(workspace(), 'cycle2-again.ndjson')], env);
    expect(second.stderr).toBe('');
    expect(second.code).toBe(0);
  });
});
