// Findings are stored in the registry (migration 0007), in the transaction that stores the
// reconciliation, so a service's findings are reachable from any machine; the NDJSON file is
// an export of those rows. A damaged candidate is reconciled and the rows, the count stored
// with the verdict, the per-partition counts and the exported lines must all agree.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { NotFoundError } from '@genfill/contracts';
import { defaultFindingsDir, exportFindings, storedFindings } from '@genfill/reconcile';
import { createPool } from '@genfill/registry';
import { releaseMaker, runGenfill, seedAdopted, WINDOW } from '../packages/reconcile/test/fixtures.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { workspace } from './support/fixtures.ts';

const tdb = await createTestDatabase('reconcile_findings');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'reconcile-findings-test', 6);
const env = { DATABASE_URL: tdb.url };
const { day2: DAY2, day3: DAY3 } = WINDOW;
// 240 orders a day from 2025-07-01: ids 241..480 on 2025-07-02, 481..720 on 2025-07-03.

/** A new release with its own candidate generation, built over WINDOW. */
const fresh = releaseMaker(db, 'found');

interface StoredRow {
  seq: number;
  partition: string | null;
  kind: string;
  check_name: string;
  column_name: string | null;
  key: string | null;
  detail: Record<string, unknown> | null;
}

const storedRows = async (reconciliation: string) =>
  (await db.query<StoredRow>(
    `SELECT seq, partition, kind, check_name, column_name, key::text AS key, detail
       FROM genfill.reconciliation_findings WHERE reconciliation_id = $1 ORDER BY seq`,
    [reconciliation],
  )).rows;

const lines = (file: string) => readFileSync(file, 'utf8').split('\n').slice(0, -1);

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: '2025-07-01T00:00:00Z', days: 5, perDay: 240 });
});
beforeEach(() => keepOnFailure(tdb));
afterAll(() => db.end());

describe('findings of a failing reconciliation', () => {
  let reconciliation: string;
  let out: string;

  it('are all in genfill.reconciliation_findings, exactly findings_count of them, numbered 1…n, and the export equals them line for line', async () => {
    const { id, table } = await fresh();
    await db.query(`DELETE FROM ${table} WHERE order_id IN (300, 301)`);
    await db.query(`UPDATE ${table} SET tax_cents = tax_cents + 1 WHERE order_id BETWEEN 500 AND 529`);
    await db.query(`UPDATE ${table} SET region = 'nowhere' WHERE order_id = 250`);
    await db.query(`UPDATE ${table} SET amount_cents = amount_cents + 1 WHERE order_id = 600`);
    out = join(workspace(), 'findings.ndjson');
    const res = await runCli(['reconcile', id, '--json', '--findings-out', out], env);
    expect(res.code).toBe(4);
    const result = JSON.parse(res.stdout);
    reconciliation = result.id;
    expect(result.findings.path).toBe(out);

    const rec = (await db.query(`SELECT findings_count::int AS n, findings_path, state FROM genfill.reconciliations WHERE id = $1`, [reconciliation])).rows[0];
    expect(rec).toEqual({ n: result.findings.count, findings_path: null, state: 'RECONCILIATION_REQUIRED' });
    const rows = await storedRows(reconciliation);
    // 2 missing ×2 checks, 30 values, region value + unexpected_diff, amount value + conserved, and partition-level ones.
    expect(rows.length).toBeGreaterThan(38);
    expect(rows).toHaveLength(rec.n);
    expect(rows.map((r) => r.seq)).toEqual(Array.from({ length: rec.n }, (_, i) => i + 1));
    const byKind: Record<string, number> = {};
    for (const r of rows) byKind[r.kind] = (byKind[r.kind] ?? 0) + 1;
    expect(byKind).toEqual(result.findings.byKind);
    expect(rows.filter((r) => r.kind === 'value' && r.column_name === 'tax_cents').map((r) => JSON.parse(r.key!).order_id)).toEqual(
      Array.from({ length: 30 }, (_, i) => 500 + i),
    );
    expect(rows.filter((r) => r.kind === 'missing').map((r) => [r.partition, r.key, r.check_name])).toEqual(
      expect.arrayContaining([
        [DAY2, '{"order_id": 300}', 'dual_compute'],
        [DAY2, '{"order_id": 301}', 'old_generation'],
      ]),
    );
    // The per-partition counts stored beside the hashes agree with the rows.
    const parts = (await db.query(`SELECT partition, findings::int AS n FROM genfill.reconciliation_partitions WHERE reconciliation_id = $1 ORDER BY partition`, [reconciliation])).rows;
    expect(parts).toEqual([DAY2, DAY3].map((p) => ({ partition: p, n: rows.filter((r) => r.partition === p).length })));

    // The export: one line per row, in seq order, with the key exactly as PostgreSQL wrote it.
    const text = lines(out);
    expect(text).toHaveLength(rows.length);
    rows.forEach((r, i) => {
      const want = {
        partition: r.partition,
        key: r.key === null ? null : JSON.parse(r.key),
        kind: r.kind,
        check: r.check_name,
        ...(r.column_name !== null ? { column: r.column_name } : {}),
        ...(r.detail !== null ? { detail: r.detail } : {}),
      };
      expect(JSON.parse(text[i]!)).toEqual(want);
      expect(text[i]).toContain(`"key":${r.key ?? 'null'},`);
      expect(Object.keys(JSON.parse(text[i]!))).toEqual(Object.keys(want));
    });
    // What the CLI printed first is the beginning of the same list.
    expect(result.findings.first.map((f: { kind: string; partition: string }) => [f.kind, f.partition])).toEqual(
      rows.slice(0, 20).map((r) => [r.kind, r.partition]),
    );
  });

  it('exports the same file again from the registry, from anywhere, chunk by chunk', async () => {
    const again = join(workspace(), 'again.ndjson');
    const x = await exportFindings(db, reconciliation, again);
    expect(x).toEqual({ path: again, count: lines(out).length });
    expect(readFileSync(again, 'utf8')).toBe(readFileSync(out, 'utf8'));
    // Small chunks give the same rows in the same order (the keyset pages meet exactly).
    const chunks: number[] = [];
    const seen: string[] = [];
    for await (const c of storedFindings(db, reconciliation, 7)) {
      chunks.push(c.length);
      for (const f of c) seen.push(`${f.kind} ${f.partition} ${f.keyJson}`);
    }
    expect(chunks.slice(0, -1).every((n) => n === 7)).toBe(true);
    expect(seen).toEqual((await storedRows(reconciliation)).map((r) => `${r.kind} ${r.partition} ${r.key}`));
  });

  it('cannot be changed or removed: the table is append-only', async () => {
    await expect(db.query(`UPDATE genfill.reconciliation_findings SET kind = 'extra' WHERE reconciliation_id = $1`, [reconciliation])).rejects.toThrow(/append-only/);
    await expect(db.query(`DELETE FROM genfill.reconciliation_findings WHERE reconciliation_id = $1`, [reconciliation])).rejects.toThrow(/append-only/);
    await expect(db.query(`TRUNCATE genfill.reconciliation_findings`)).rejects.toThrow(/append-only|cannot truncate/);
    expect((await storedRows(reconciliation)).length).toBe(lines(out).length);
  });

  it('are readable by people and the service, and written by the service alone', async () => {
    const can = async (role: string, privilege: string) =>
      (await db.query(`SELECT has_table_privilege($1, 'genfill.reconciliation_findings', $2) AS ok`, [role, privilege])).rows[0].ok as boolean;
    for (const role of ['genfill_operator', 'genfill_approver', 'genfill_reader', 'genfill_service']) expect(await can(role, 'SELECT')).toBe(true);
    expect(await can('genfill_service', 'INSERT')).toBe(true);
    for (const role of ['genfill_operator', 'genfill_approver', 'genfill_reader']) expect(await can(role, 'INSERT')).toBe(false);
    for (const role of ['genfill_operator', 'genfill_approver', 'genfill_reader', 'genfill_service']) {
      expect(await can(role, 'UPDATE')).toBe(false);
      expect(await can(role, 'DELETE')).toBe(false);
    }
  });

  it('refuses to export an id that is no reconciliation, leaving no file', async () => {
    const dir = workspace();
    await expect(exportFindings(db, '999999', join(dir, 'none.ndjson'))).rejects.toThrow(NotFoundError);
    expect(readdirSync(dir)).toEqual([]);
  });

  it('makes the default directory for an export, and leaves none behind when the export fails', async () => {
    const cwd = workspace();
    const file = join(defaultFindingsDir(cwd), 'again.ndjson');
    await expect(exportFindings(db, '999999', file, { createDir: true })).rejects.toThrow(NotFoundError);
    expect(readdirSync(cwd)).toEqual([]);
    expect(await exportFindings(db, reconciliation, file, { createDir: true })).toEqual({ path: file, count: lines(out).length });
    expect(readdirSync(join(cwd, '.genfill', 'findings'))).toEqual(['again.ndjson']);
  });
});

describe('the default export of genfill reconcile', () => {
  it('writes .genfill/findings/reconcile-<release>-<id>.ndjson when there are findings, and names it', async () => {
    const { id, table } = await fresh();
    await db.query(`UPDATE ${table} SET tax_cents = tax_cents + 1 WHERE order_id BETWEEN 250 AND 289`);
    const cwd = workspace();
    const res = await runGenfill(['reconcile', id], { cwd, env });
    expect(res.code).toBe(4);
    const rec = (await db.query(`SELECT id::text, findings_count::int AS n FROM genfill.reconciliations WHERE release = $1`, [id])).rows[0];
    const file = join(cwd, '.genfill', 'findings', `reconcile-${id}-${rec.id}.ndjson`);
    expect(readdirSync(cwd)).toEqual(['.genfill']);
    expect(readdirSync(join(cwd, '.genfill', 'findings'))).toEqual([`reconcile-${id}-${rec.id}.ndjson`]);
    expect(lines(file)).toHaveLength(rec.n);
    expect(res.stdout).toContain(`→ ${file}`);
    expect(res.stdout).toContain(`… ${rec.n - 20} more in ${file}`);
    expect(res.stderr).toContain(`genfill repair ${id} --reconciliation ${rec.id}`);
  });

  it('writes no file when there are no findings', async () => {
    const { id } = await fresh();
    const cwd = workspace();
    const res = await runGenfill(['reconcile', id], { cwd, env });
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(/findings {4}0\n/);
    expect(readdirSync(cwd)).toEqual([]);
  });
});
