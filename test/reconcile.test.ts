// The reconciler (SPEC invariant 10, "Release gate"): a candidate built by the real workers'
// code is damaged by SQL, and `genfill reconcile` must block it (exit 4) naming the
// partition and every key in its NDJSON findings — or prove it (exit 0) when it is intact.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createLogger } from '@genfill/observability';
import { createPool } from '@genfill/registry';
import { startReconcilerService } from '@genfill/reconcile';
import { candidate, plannedRelease, readFindings, releaseMaker, seedAdopted, WINDOW, type FindingLine } from '../packages/reconcile/test/fixtures.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { workspace } from './support/fixtures.ts';

const tdb = await createTestDatabase('reconcile');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'reconcile-test', 6);
const env = { DATABASE_URL: tdb.url };
const dir = workspace();
const { from: FROM, to: TO, day2: DAY2, day3: DAY3 } = WINDOW;
// 240 orders a day from 2025-07-01: ids 241..480 on 2025-07-02, 481..720 on 2025-07-03.

/** A new release with its own candidate generation, built over [FROM, TO). */
const fresh = releaseMaker(db, 'fix');

async function reconcileCli(id: string, ...extra: string[]) {
  const out = join(dir, `${id}-${Date.now()}.ndjson`);
  const res = await runCli(['reconcile', id, '--findings-out', out, ...extra], env);
  return { ...res, out, findings: existsSync(out) ? readFindings(out) : [] };
}

const state = async (id: string) => (await db.query(`SELECT state FROM genfill.releases WHERE id = $1`, [id])).rows[0].state as string;
const keyed = (fs: FindingLine[], kind: string) => fs.filter((f) => f.kind === kind).map((f) => ({ partition: f.partition, key: f.key, check: f.check, column: f.column }));

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: '2025-07-01T00:00:00Z', days: 5, perDay: 240 });
});
beforeEach(() => keepOnFailure(tdb));
afterAll(() => db.end());

describe('a clean candidate', () => {
  let id: string;
  let table: string;

  it('is RECONCILED (exit 0), with its snapshot, per-partition hashes and an empty findings file stored under an id', async () => {
    ({ id, table } = await fresh());
    const res = await reconcileCli(id);
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(new RegExp(`reconciled: ${id} BUILT → RECONCILED; reconciliation #\\d+`));
    expect(res.stdout).toMatch(/changed rows: tax_cents \d+/);
    expect(await state(id)).toBe('RECONCILED');
    expect(readFileSync(res.out, 'utf8')).toBe('');
    const rec = (await db.query(`SELECT id, state, findings_count, snapshot::text AS snapshot, from_state, summary FROM genfill.reconciliations WHERE release = $1`, [id])).rows;
    expect(rec).toHaveLength(1);
    expect(rec[0]).toMatchObject({ state: 'RECONCILED', findings_count: '0', from_state: 'BUILT' });
    expect(rec[0].snapshot).toMatch(/^\d+:\d+:/);
    expect(rec[0].summary.oldGeneration.changed.tax_cents.expected).toBe(true);
    // The changed-row count per column, against a plain join written here.
    const { rows: want } = await db.query<{ n: string }>(
      `SELECT count(*)::text AS n FROM ${table} AS n JOIN ${candidate('g2')} AS o USING (order_id)
        WHERE n.created_at >= $1 AND n.created_at < $2 AND n.tax_cents IS DISTINCT FROM o.tax_cents`,
      [FROM, TO],
    );
    expect(Number(want[0]!.n)).toBeGreaterThan(0);
    expect(rec[0].summary.oldGeneration.changed.tax_cents.rows).toBe(want[0]!.n);
    expect(rec[0].summary.oldGeneration.changed.region.rows).toBe('0');
    // The roots it recomputed are the receipts' roots, partition by partition.
    const parts = (await db.query(
      `SELECT p.partition, p.stored_rows::text, p.stored_key_root::text AS k, p.stored_row_root::text AS r, p.dual_row_root::text AS d,
              c.rows_out::text, c.key_root::text AS ck, c.row_root::text AS cr
         FROM genfill.reconciliation_partitions p JOIN genfill.receipts c ON c.id = p.receipt_id
        WHERE p.reconciliation_id = $1 ORDER BY 1`,
      [rec[0].id],
    )).rows;
    expect(parts.map((p) => p.partition)).toEqual([DAY2, DAY3]);
    for (const p of parts) {
      expect(p).toMatchObject({ stored_rows: '240', rows_out: '240', k: p.ck, r: p.cr, d: p.cr });
    }
  });

  it('records a new reconciliation without a state change when a RECONCILED release passes again', async () => {
    const before = (await db.query(`SELECT max(id)::int AS id FROM genfill.reconciliations WHERE release = $1`, [id])).rows[0].id;
    const res = await reconcileCli(id, '--json');
    expect(res.code).toBe(0);
    const out = JSON.parse(res.stdout);
    expect(out).toMatchObject({ release: id, from: 'RECONCILED', state: 'RECONCILED', transition: false, findings: { count: 0 } });
    expect(Number(out.id)).toBeGreaterThan(before);
    expect(out.summary.rows).toMatchObject({ source: '480', stored: '480', dual: '480', tombstones: '0' });
    expect(out.summary.conserved.amount_cents.ok).toBe(true);
    expect(await state(id)).toBe('RECONCILED');
    const log = (await db.query(`SELECT action, from_state, to_state FROM genfill.release_log WHERE release = $1 AND action = 'reconcile' ORDER BY id`, [id])).rows;
    expect(log).toEqual([
      { action: 'reconcile', from_state: 'BUILT', to_state: 'RECONCILED' },
      { action: 'reconcile', from_state: null, to_state: null },
    ]);
  });

  it('moves a RECONCILED release to RECONCILIATION_REQUIRED when it no longer passes', async () => {
    await db.query(`DELETE FROM ${candidate('g3')} WHERE order_id = 242`);
    const res = await reconcileCli(id);
    expect(res.code).toBe(4);
    expect(await state(id)).toBe('RECONCILIATION_REQUIRED');
    expect(keyed(res.findings, 'missing')).toContainEqual({ partition: DAY2, key: { order_id: 242 }, check: 'dual_compute', column: undefined });
  });
});

describe('damage is blocked with its partition and key named', () => {
  it('a missing key: exit 4, named by the dual compute and by the old generation', async () => {
    const { id, table } = await fresh();
    await db.query(`DELETE FROM ${table} WHERE order_id = 300`);
    const res = await reconcileCli(id);
    expect(res.code).toBe(4);
    expect(res.stderr).toMatch(/RECONCILIATION_REQUIRED.*genfill repair/);
    expect(res.stdout).toMatch(/reconciliation required: .* BUILT → RECONCILIATION_REQUIRED/);
    expect(res.stdout).toContain(res.out);
    expect(res.stdout).toMatch(/missing\s+b-20250702T000000Z \{"order_id":300\} \(dual_compute\)/);
    expect(res.stdout).toMatch(/missing\s+b-20250702T000000Z \{"order_id":300\} \(old_generation\)/);
    expect(keyed(res.findings, 'missing')).toEqual([
      { partition: DAY2, key: { order_id: 300 }, check: 'dual_compute', column: undefined },
      { partition: DAY2, key: { order_id: 300 }, check: 'old_generation', column: undefined },
    ]);
    expect(res.findings.find((f) => f.kind === 'receipt_mismatch')).toMatchObject({ partition: DAY2, detail: { rows_out: { receipt: '240', recomputed: '239' } } });
    expect(await state(id)).toBe('RECONCILIATION_REQUIRED');
    // The registry holds the findings (0007); the file is their export and no path is recorded.
    const rec = (await db.query(
      `SELECT state, findings_count::int AS n, findings_path,
              (SELECT count(*)::int FROM genfill.reconciliation_findings f WHERE f.reconciliation_id = r.id) AS stored
         FROM genfill.reconciliations r WHERE release = $1`,
      [id],
    )).rows[0];
    expect(rec).toEqual({ state: 'RECONCILIATION_REQUIRED', n: res.findings.length, findings_path: null, stored: res.findings.length });
  });

  it('an extra key: exit 4 naming it', async () => {
    const { id, table } = await fresh();
    await db.query(`INSERT INTO ${table} (generation, order_id, created_at, region, amount_cents, tax_cents)
                    SELECT generation, 99001, '2025-07-03T10:00:00Z', 'north', 500, 95 FROM ${table} LIMIT 1`);
    const res = await reconcileCli(id);
    expect(res.code).toBe(4);
    expect(keyed(res.findings, 'extra')).toEqual([
      { partition: DAY3, key: { order_id: 99001 }, check: 'dual_compute', column: undefined },
      { partition: DAY3, key: { order_id: 99001 }, check: 'old_generation', column: undefined },
    ]);
  });

  it('a wrong value under the right key: exit 4 naming key and column', async () => {
    const { id, table } = await fresh();
    await db.query(`UPDATE ${table} SET tax_cents = tax_cents + 1 WHERE order_id = 500`);
    const res = await reconcileCli(id);
    expect(res.code).toBe(4);
    expect(keyed(res.findings, 'value')).toEqual([{ partition: DAY3, key: { order_id: 500 }, check: 'dual_compute', column: 'tax_cents' }]);
    // tax_cents is in expectedDiff: differing from the old generation is not a finding.
    expect(keyed(res.findings, 'unexpected_diff')).toEqual([]);
  });

  it('a changed column outside expectedDiff: exit 4 with unexpected_diff naming key and column', async () => {
    const { id, table } = await fresh();
    await db.query(`UPDATE ${table} SET region = 'nowhere' WHERE order_id = 250`);
    const res = await reconcileCli(id);
    expect(res.code).toBe(4);
    expect(keyed(res.findings, 'unexpected_diff')).toEqual([{ partition: DAY2, key: { order_id: 250 }, check: 'old_generation', column: 'region' }]);
    expect(keyed(res.findings, 'value')).toEqual([{ partition: DAY2, key: { order_id: 250 }, check: 'dual_compute', column: 'region' }]);
    expect(res.stdout).toMatch(/region 1 \(NOT in expectedDiff\)/);
  });

  it('a conserved sum off by one: exit 4 with the partition sums and the key', async () => {
    const { id, table } = await fresh();
    await db.query(`UPDATE ${table} SET amount_cents = amount_cents + 1 WHERE order_id = 600`);
    const res = await reconcileCli(id);
    expect(res.code).toBe(4);
    const sum = res.findings.find((f) => f.kind === 'conserved_sum')!;
    expect(sum).toMatchObject({ partition: DAY3, column: 'amount_cents', check: 'conserved' });
    expect(BigInt(sum.detail!.candidate as string) - BigInt(sum.detail!.source as string)).toBe(1n);
    expect(keyed(res.findings, 'conserved')).toEqual([{ partition: DAY3, key: { order_id: 600 }, check: 'conserved', column: 'amount_cents' }]);
    expect(keyed(res.findings, 'value')).toEqual([{ partition: DAY3, key: { order_id: 600 }, check: 'dual_compute', column: 'amount_cents' }]);
  });

  it('one key added and one removed in a partition (counts match): blocked, both named', async () => {
    const { id, table } = await fresh();
    await db.query(`DELETE FROM ${table} WHERE order_id = 260`);
    await db.query(`INSERT INTO ${table} (generation, order_id, created_at, region, amount_cents, tax_cents)
                    SELECT generation, 99002, '2025-07-02T06:00:00Z', 'north', 500, 95 FROM ${table} LIMIT 1`);
    const res = await reconcileCli(id);
    expect(res.code).toBe(4);
    const mismatch = res.findings.find((f) => f.kind === 'dual_mismatch')!;
    const d = mismatch.detail as { stored: { rows: { count: string } }; dual: { rows: { count: string } } };
    expect(d.stored.rows.count).toBe(d.dual.rows.count);
    expect(keyed(res.findings, 'missing').filter((f) => f.check === 'dual_compute')).toEqual([{ partition: DAY2, key: { order_id: 260 }, check: 'dual_compute', column: undefined }]);
    expect(keyed(res.findings, 'extra').filter((f) => f.check === 'dual_compute')).toEqual([{ partition: DAY2, key: { order_id: 99002 }, check: 'dual_compute', column: undefined }]);
  });

  it('a tombstone in a fresh build: exit 4 naming it, and its key counts as missing', async () => {
    const { id, table } = await fresh();
    await db.query(`UPDATE ${table} SET _gf_deleted = true WHERE order_id = 270`);
    const res = await reconcileCli(id, '--json');
    expect(res.code).toBe(4);
    expect(JSON.parse(res.stdout).summary.rows.tombstones).toBe('1');
    expect(keyed(res.findings, 'tombstone')).toEqual([{ partition: DAY2, key: { order_id: 270 }, check: 'candidate', column: undefined }]);
    expect(keyed(res.findings, 'missing').map((f) => f.key)).toEqual([{ order_id: 270 }, { order_id: 270 }]);
  });

  it('a receipt whose root no longer matches the stored rows: exit 4 receipt_mismatch', async () => {
    const { id } = await fresh();
    await db.query(`UPDATE genfill.receipts SET row_root = mod(row_root + 1, 18446744073709551616) WHERE release = $1 AND partition = $2`, [id, DAY3]);
    const res = await reconcileCli(id);
    expect(res.code).toBe(4);
    expect(res.findings.map((f) => f.kind)).toEqual(['receipt_mismatch']);
    expect(res.findings[0]).toMatchObject({ partition: DAY3, key: null, detail: { row_root: { receipt: expect.any(String), recomputed: expect.any(String) } } });
  });
});

describe('refusals', () => {
  it('refuses a release that is not BUILT or RECONCILED with exit 3, recording nothing', async () => {
    await plannedRelease(db, { id: 'not-built@1', generation: 'gnb', from: FROM, to: TO });
    const before = (await db.query(`SELECT count(*)::int AS n FROM genfill.reconciliations`)).rows[0].n;
    const res = await reconcileCli('not-built@1');
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(/not-built@1 is SNAPSHOT_PINNED: only a BUILT or RECONCILED release can be reconciled/);
    expect(existsSync(res.out)).toBe(false);
    expect((await db.query(`SELECT count(*)::int AS n FROM genfill.reconciliations`)).rows[0].n).toBe(before);
    expect((await runCli(['reconcile', 'no-such@1'], env)).code).toBe(3);
  });

  it('refuses a findings path it cannot write (exit 2) before recording anything', async () => {
    const { id } = await fresh();
    const res = await runCli(['reconcile', id, '--findings-out', join(dir, 'no-such-dir', 'f.ndjson')], env);
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/--findings-out: cannot write findings in .*no-such-dir: ENOENT/);
    expect(await state(id)).toBe('BUILT');
    expect((await db.query(`SELECT count(*)::int AS n FROM genfill.reconciliations WHERE release = $1`, [id])).rows[0].n).toBe(0);
    expect((await reconcileCli(id)).code).toBe(0);
  });

  it('refuses a RECONCILIATION_REQUIRED release until it is repaired', async () => {
    const { id, table } = await fresh();
    await db.query(`DELETE FROM ${table} WHERE order_id = 700`);
    expect((await reconcileCli(id)).code).toBe(4);
    const again = await reconcileCli(id);
    expect(again.code).toBe(3);
    expect(again.stderr).toMatch(/is RECONCILIATION_REQUIRED/);
  });
});

describe('genfill reconciler (service)', () => {
  it('reconciles every BUILT release once per round and leaves the others alone', async () => {
    const a = await fresh();
    const b = await fresh();
    await db.query(`UPDATE ${b.table} SET tax_cents = 0 WHERE order_id = 400`);
    const log = createLogger('reconciler-test', 'silent');
    const service = startReconcilerService({ db, log, intervalMs: 3_600_000, reconcile: { findingsDir: dir } });
    try {
      const round = await service.runOnce();
      expect(round.failed).toEqual([]);
      expect(round.reconciled.map((r) => [r.release, r.state]).sort()).toEqual([
        [a.id, 'RECONCILED'],
        [b.id, 'RECONCILIATION_REQUIRED'],
      ]);
      const again = await service.runOnce();
      expect(again.reconciled).toEqual([]);
    } finally {
      await service.close();
    }
    expect(await state(a.id)).toBe('RECONCILED');
    expect(await state(b.id)).toBe('RECONCILIATION_REQUIRED');
  });
});
