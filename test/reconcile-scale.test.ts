// Complete mismatch lists at scale: sparse damage is found by hash bisection reading a small
// fraction of what a full join would, dense damage is still listed key by key (SPEC
// invariant 10: "a complete NDJSON list, not a sample, narrowed by hash bisection").
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createPool } from '@genfill/registry';
import { builtRelease, candidate, readFindings, seedAdopted } from '../packages/reconcile/test/fixtures.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { workspace } from './support/fixtures.ts';

const tdb = await createTestDatabase('reconcile_scale');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'reconcile-scale', 6);
const env = { DATABASE_URL: tdb.url };
const dir = workspace();
// 200 days of 1,000 orders: 200,000 rows, ids follow time (day d holds ids 1000d+1 … 1000d+1000).
const DAYS = 200;
const PER_DAY = 1_000;
const FROM = '2025-07-01T00:00:00Z';
const TO = new Date(Date.parse(FROM) + DAYS * 86_400_000).toISOString().replace('.000Z', 'Z');

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: FROM, days: DAYS, perDay: PER_DAY });
}, 180_000);
beforeEach(() => keepOnFailure(tdb));
afterAll(() => db.end());

async function reconcileJson(id: string) {
  const out = join(dir, `${id}.ndjson`);
  const res = await runCli(['reconcile', id, '--json', '--findings-out', out], env);
  return { code: res.code, result: JSON.parse(res.stdout), findings: readFindings(out) };
}

describe('sparse damage', () => {
  it('lists all 5 bad keys of 200,000 rows, bisection reading under 10% of a full join', async () => {
    await builtRelease(db, { id: 'sparse@1', generation: 'g3', from: FROM, to: TO });
    const t = candidate('g3');
    // Five keys in five partitions, five kinds of damage.
    await db.query(`DELETE FROM ${t} WHERE order_id = 10500`);
    await db.query(`UPDATE ${t} SET tax_cents = tax_cents + 1 WHERE order_id = 50250`);
    await db.query(`UPDATE ${t} SET amount_cents = amount_cents - 3 WHERE order_id = 90999`);
    await db.query(`UPDATE ${t} SET region = 'south' WHERE order_id = 130001`); // was east
    await db.query(`INSERT INTO ${t} (generation, order_id, created_at, region, amount_cents, tax_cents)
                    VALUES ('g3', 900001, '2025-12-20T12:00:00Z', 'east', 1000, 200)`);
    const { code, result, findings } = await reconcileJson('sparse@1');
    expect(code).toBe(4);
    const dual = findings.filter((f) => f.check === 'dual_compute' && f.key !== null);
    expect(dual.map((f) => [f.kind, f.key!.order_id, f.column ?? null, f.partition])).toEqual([
      ['missing', 10500, null, 'b-20250711T000000Z'],
      ['value', 50250, 'tax_cents', 'b-20250820T000000Z'],
      ['value', 90999, 'amount_cents', 'b-20250929T000000Z'],
      ['value', 130001, 'region', 'b-20251108T000000Z'],
      ['extra', 900001, null, 'b-20251220T000000Z'],
    ]);
    const rr = result.summary.rowsRead;
    console.log(
      `sparse damage: bisection read ${rr.bisection} rows in ${rr.queries} queries over ${rr.bisectedPartitions} partitions, ` +
        `${(rr.bisectionRatio * 100).toFixed(2)}% of the ${rr.fullJoin} rows a full join compares`,
    );
    expect(rr.bisectedPartitions).toBe(5);
    expect(Number(rr.bisection)).toBeGreaterThan(0);
    expect(rr.bisectionRatio).toBeLessThan(0.1);
    expect(Number(rr.fullJoin)).toBe(2 * DAYS * PER_DAY);
  });
});

describe('dense damage', () => {
  it('lists every one of 10,000 bad keys', async () => {
    await builtRelease(db, { id: 'dense@1', generation: 'g4', from: FROM, to: TO, every: 'P1W' });
    await db.query(`UPDATE ${candidate('g4')} SET tax_cents = tax_cents + 1 WHERE order_id % 20 = 0`);
    const { code, result, findings } = await reconcileJson('dense@1');
    expect(code).toBe(4);
    const values = findings.filter((f) => f.kind === 'value');
    expect(values).toHaveLength(10_000);
    expect(new Set(values.map((f) => f.key!.order_id)).size).toBe(10_000);
    expect(values.every((f) => f.column === 'tax_cents' && (f.key!.order_id as number) % 20 === 0)).toBe(true);
    expect(result.findings.byKind.value).toBe(10_000);
    const rr = result.summary.rowsRead;
    console.log(`dense damage: ${values.length} keys listed; bisection read ${rr.bisection} rows in ${rr.queries} queries (${rr.leaves} row-by-row ranges); timings ${JSON.stringify(result.summary.timings)}`);
    // Every partition has bad keys: bisection ends up comparing about everything, and still lists all.
    expect(result.summary.rowsRead.bisectedPartitions).toBe(result.summary.partitions.build);
  });
});
