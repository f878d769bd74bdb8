// The reconciler's passes after issue 19 (part 3): the candidate and the old generation are read
// in one merge join (the stored pass), the passes run per key slice, one slice per connection,
// and the dual compute's key root is computed only for partitions whose rows differ. Pinned here:
//   - the key slices add up to one whole pass: one connection or three give the same
//     per-partition hashes (dual key roots included) and the same findings on a damaged candidate;
//   - a transform that yields a key twice: the stored counts and roots count each stored row
//     once (no receipt_mismatch), the dual count has both copies, and each such key is listed as
//     `duplicate`, exactly as the separate passes did.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { removeCapture } from '@genfill/capture';
import { reconcile } from '@genfill/reconcile';
import { createPool } from '@genfill/registry';
import { releaseMaker, seedAdopted, WINDOW } from '../packages/reconcile/test/fixtures.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { captureAsOwner } from './support/fixtures.ts';

const tdb = await createTestDatabase('reconcile_fused');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'fused-test', 8);
const fresh = releaseMaker(db, 'fused');

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: '2025-07-01T00:00:00Z', days: 5, perDay: 240 });
});
beforeEach(() => keepOnFailure(tdb));
afterAll(() => db.end());

const partitionHashes = async (reconciliation: string) =>
  (
    await db.query(
      `SELECT partition, source_rows, stored_rows, stored_key_root, stored_row_root, dual_rows, dual_key_root, dual_row_root, tombstones, findings
         FROM genfill.reconciliation_partitions WHERE reconciliation_id = $1 ORDER BY partition`,
      [reconciliation],
    )
  ).rows;

const findingsOf = async (reconciliation: string) =>
  (
    await db.query<{ partition: string | null; kind: string; check_name: string; column_name: string | null; key: unknown }>(
      `SELECT partition, kind, check_name, column_name, key FROM genfill.reconciliation_findings WHERE reconciliation_id = $1 ORDER BY seq`,
      [reconciliation],
    )
  ).rows;

describe('the key slices', () => {
  it('add up to one whole pass: one connection or three give the same hashes and findings on a damaged candidate', async () => {
    // Two candidates damaged alike (the generation is not part of a row's hash): a failed
    // reconciliation cannot be repeated on the same release.
    const damage = (table: string) => `
      UPDATE ${table} SET tax_cents = tax_cents + 1 WHERE order_id IN (250, 600);
      UPDATE ${table} SET region = 'west' WHERE order_id = 300;
      DELETE FROM ${table} WHERE order_id = 480;
      UPDATE ${table} SET _gf_deleted = true WHERE order_id = 700;
      INSERT INTO ${table} (generation, order_id, created_at, region, amount_cents, tax_cents)
      SELECT generation, 99999, created_at, region, amount_cents, tax_cents FROM ${table} WHERE order_id = 500;
      ANALYZE ${table}`;
    const a = await fresh();
    const b = await fresh();
    await tdb.pool.query(damage(a.table));
    await tdb.pool.query(damage(b.table));
    const one = await reconcile(db, a.id, { connections: 1 });
    const three = await reconcile(db, b.id, { connections: 3 });
    expect(one.state).toBe('RECONCILIATION_REQUIRED');
    expect(three.summary.timings).toHaveProperty('stored.3');
    expect(await partitionHashes(three.id)).toEqual(await partitionHashes(one.id));
    expect(await findingsOf(three.id)).toEqual(await findingsOf(one.id));
    expect(three.summary.roots).toEqual(one.summary.roots);
    expect(three.summary.oldGeneration).toEqual(one.summary.oldGeneration);
    expect(three.summary.nulls).toEqual(one.summary.nulls);
    const dual = (await findingsOf(one.id)).filter((f) => f.check_name === 'dual_compute' && f.key !== null).map((f) => [f.kind, f.key, f.column_name]);
    expect(dual).toEqual(
      expect.arrayContaining([
        ['value', { order_id: 250 }, 'tax_cents'],
        ['value', { order_id: 300 }, 'region'],
        ['missing', { order_id: 480 }, null],
        ['value', { order_id: 600 }, 'tax_cents'],
        ['missing', { order_id: 700 }, null],
        ['extra', { order_id: 99999 }, null],
      ]),
    );
    expect(one.findings.byKind.tombstone).toBe(1);
  });
});

describe('a transform that yields a key twice', () => {
  it('counts every stored row once, the dual compute has both copies, and each such key is listed as duplicate', async () => {
    const { id, table } = await fresh();
    // A second, identical rate for one region: the transform's join now fans out for every
    // order of that region, and both copies equal the stored row.
    // Capture needs the key: its owner lifts it around the change (the release was planned with it).
    await removeCapture(tdb.pool, { table: 'public.tax_rates' });
    await tdb.pool.query(`ALTER TABLE public.tax_rates DROP CONSTRAINT tax_rates_pkey;
      INSERT INTO public.tax_rates SELECT * FROM public.tax_rates WHERE region = 'north'`);
    try {
      const res = await reconcile(db, id, { connections: 2 });
      const { rows } = await db.query<{ stored: string; north: string }>(
        `SELECT count(*)::text AS stored, count(*) FILTER (WHERE region = 'north')::text AS north FROM ${table}
          WHERE created_at >= $1 AND created_at < $2 AND NOT _gf_deleted`,
        [WINDOW.from, WINDOW.to],
      );
      expect(res.state).toBe('RECONCILIATION_REQUIRED');
      expect(res.summary.rows.stored).toBe(rows[0]!.stored);
      expect(BigInt(res.summary.rows.dual)).toBe(BigInt(rows[0]!.stored) + BigInt(rows[0]!.north));
      expect(res.summary.oldGeneration).toMatchObject({ rows: rows[0]!.stored, missing: '0', extra: '0' });
      const found = await findingsOf(res.id);
      // The receipts still describe the stored rows: the fan-out is the dual compute's alone.
      expect(found.filter((f) => f.kind === 'receipt_mismatch')).toEqual([]);
      expect(found.filter((f) => f.kind === 'dual_mismatch').map((f) => f.partition)).toEqual([WINDOW.day2, WINDOW.day3]);
      const dups = found.filter((f) => f.kind === 'duplicate');
      expect(String(dups.length)).toBe(rows[0]!.north);
      expect(found.filter((f) => f.check_name === 'dual_compute' && ['missing', 'extra', 'value'].includes(f.kind))).toEqual([]);
      expect(found.some((f) => f.kind === 'dependency_changed')).toBe(true);
    } finally {
      await tdb.pool.query(`DELETE FROM public.tax_rates a USING public.tax_rates b WHERE a.ctid > b.ctid AND a.region = b.region;
        ALTER TABLE public.tax_rates ADD PRIMARY KEY (region)`);
      await captureAsOwner(tdb.pool, 'public.tax_rates');
    }
  });
});
