// `genfill diff <release>` (issue 17): old (the expected active generation) against new (the
// candidate) key by key — counts of keys changed, only in old, only in new, rows changed per
// column, a sample with both rows side by side — checked against a row-by-row comparison done
// here in the test. Tombstones count as absent; a release without an expected active
// generation, or with a generation that is gone, is refused (exit 3); nothing is written.
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createPool } from '@genfill/registry';
import { builtRelease, seedAdopted } from '../packages/reconcile/test/fixtures.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { firstGenerationRelease, registryCounts, workspace, writeRelease } from './support/fixtures.ts';
import { createTestQueues, keepQueuesOnFailure, REDIS_URL } from './support/redis.ts';

const tdb = await createTestDatabase('diff');
const queues = createTestQueues('diff');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'diff-test', 4);
const env = { DATABASE_URL: tdb.url, REDIS_URL, GENFILL_QUEUE_PREFIX: queues.prefix, GENFILL_LOG_LEVEL: 'silent' };
const cli = (...args: string[]) => runCli(args, env);
const COLUMNS = ['order_id', 'created_at', 'region', 'amount_cents', 'tax_cents'];

type Row = Record<string, string>;

/** A generation's live rows by key, as text, read straight from its partition. */
async function live(generation: string): Promise<Map<string, Row>> {
  const { rows } = await db.query<Row>(
    `SELECT t.order_id::text, to_json(t.created_at) #>> '{}' AS created_at, t.region, t.amount_cents::text, t.tax_cents::text
       FROM genfill_data."orders_enriched__${generation}" AS t WHERE NOT t._gf_deleted`,
  );
  return new Map(rows.map((r) => [r.order_id!, r]));
}

/** The comparison `genfill diff` must agree with, done key by key in JavaScript. */
async function expected(oldGen: string, newGen: string, sample: number) {
  const [o, n] = [await live(oldGen), await live(newGen)];
  const keys = [...new Set([...o.keys(), ...n.keys()])].sort((a, b) => Number(a) - Number(b));
  const columns = Object.fromEntries(COLUMNS.filter((c) => c !== 'order_id').map((c) => [c, 0]));
  const counts = { changed: 0, onlyInOld: 0, onlyInNew: 0, unchanged: 0 };
  const differing: { key: Row; old: Row | null; new: Row | null; changed: string[] }[] = [];
  for (const k of keys) {
    const a = o.get(k) ?? null;
    const b = n.get(k) ?? null;
    const changed = a && b ? Object.keys(columns).filter((c) => a[c] !== b[c]) : [];
    for (const c of changed) columns[c]!++;
    if (!b) counts.onlyInOld++;
    else if (!a) counts.onlyInNew++;
    else if (changed.length > 0) counts.changed++;
    else counts.unchanged++;
    if (!a || !b || changed.length > 0) differing.push({ key: { order_id: k }, old: a, new: b, changed });
  }
  return { counts, columns, sample: differing.slice(0, sample), differing: differing.length };
}

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: '2025-07-01T00:00:00Z', days: 3, perDay: 48 });
  await builtRelease(db, { id: 'fix@1', generation: 'g3', from: '2025-07-01T00:00:00Z', to: '2025-07-03T00:00:00Z' });
  // Beside the tax fix: a key the candidate deleted (a tombstone) and one it lacks, a key only
  // the candidate has, one the old generation holds as a tombstone, and a changed region.
  await db.query(`UPDATE genfill_data."orders_enriched__g3" SET _gf_deleted = true WHERE order_id = 10`);
  await db.query(`DELETE FROM genfill_data."orders_enriched__g3" WHERE order_id = 11`);
  await db.query(`INSERT INTO genfill_data."orders_enriched__g3" (generation, order_id, created_at, region, amount_cents, tax_cents)
                  VALUES ('g3', 5000, '2025-07-02T12:00:00Z', 'east', 1000, 200)`);
  await db.query(`UPDATE genfill_data."orders_enriched__g2" SET _gf_deleted = true WHERE order_id = 12`);
  await db.query(`UPDATE genfill_data."orders_enriched__g3" SET region = 'west' WHERE order_id = 13`);
});
beforeEach(() => {
  keepOnFailure(tdb);
  keepQueuesOnFailure(queues);
});

describe('genfill diff', () => {
  it('--json: counts, rows changed per column and the first differing keys side by side, as a key-by-key comparison finds them', async () => {
    const res = await cli('diff', 'fix@1', '--json', '--sample', '25');
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    const d = JSON.parse(res.stdout);
    const want = await expected('g2', 'g3', 25);
    expect(d).toEqual({ release: 'fix@1', dataset: 'orders_enriched', old: 'g2', new: 'g3', counts: want.counts, columns: want.columns, sample: want.sample });
    // What was set up above, in the counts: 10 (tombstone) and 11 only in old, 12 and 5000 only in new.
    expect(d.counts.onlyInOld).toBe(2);
    expect(d.counts.onlyInNew).toBe(2);
    expect(d.columns.region).toBe(1);
    expect(d.columns.tax_cents).toBeGreaterThan(10);
    expect(d.columns.amount_cents).toBe(0);
    expect(d.sample.find((e: { key: Row }) => e.key.order_id === '13').changed).toContain('region');
  });

  it('prints each sampled key with both rows side by side and the changed columns marked', async () => {
    const res = await cli('diff', 'fix@1', '--sample', '200');
    expect(res.code).toBe(0);
    const want = await expected('g2', 'g3', 200);
    const c = want.counts;
    expect(res.stdout).toContain('diff of release fix@1, dataset orders_enriched: old g2 → new g3');
    expect(res.stdout).toContain(`keys        ${c.changed} changed, ${c.onlyInOld} only in g2, ${c.onlyInNew} only in g3, ${c.unchanged} unchanged`);
    expect(res.stdout).toContain(`sample      ${want.differing} of ${want.differing} differing keys, in key order`);
    const o = (await live('g2')).get('13')!;
    const n = (await live('g3')).get('13')!;
    const block = res.stdout.split('\n\n').find((b) => b.startsWith('key {"order_id":"13"}'))!;
    expect(block.split('\n')[0]).toMatch(/^key \{"order_id":"13"\} {2}changed: region/);
    expect(block).toMatch(new RegExp(`\\n {2}\\* region\\s+${o.region}\\s+${n.region}`));
    expect(block).toMatch(new RegExp(`\\n {4}amount_cents\\s+${o.amount_cents}\\s+${n.amount_cents}`));
    const gone = res.stdout.split('\n\n').find((b) => b.startsWith('key {"order_id":"11"}'))!;
    expect(gone.split('\n')[0]).toBe('key {"order_id":"11"}  only in g2');
    expect(gone).toMatch(/\n {4}region\s+\S+\s+—/);
    expect(res.stdout.split('\n\n').find((b) => b.startsWith('key {"order_id":"5000"}'))!.split('\n')[0]).toBe('key {"order_id":"5000"}  only in g3');
  });

  it('with --sample 0 prints the counts only; it writes nothing and takes no reader lease', async () => {
    const before = await registryCounts(tdb.pool);
    const res = await cli('diff', 'fix@1', '--sample', '0', '--json');
    expect(res.code).toBe(0);
    expect(JSON.parse(res.stdout).sample).toEqual([]);
    expect(await registryCounts(tdb.pool)).toEqual(before);
    expect((await db.query('SELECT count(*)::int AS n FROM genfill.reader_leases')).rows[0].n).toBe(0);
  });

  it('refuses a release without an expected active generation (exit 3), an unknown release (exit 3) and a bad --sample (exit 2)', async () => {
    expect((await cli('release', 'submit', writeRelease(workspace(), firstGenerationRelease()))).code).toBe(0);
    const first = await cli('diff', 'orders-g1@1');
    expect(first.code).toBe(3);
    expect(first.stderr).toMatch(/^refused: release orders-g1@1 builds the first generation of orders_new \(no expected active generation\)/);
    const unknown = await cli('diff', 'nope@1');
    expect(unknown.code).toBe(3);
    expect(unknown.stderr).toMatch(/release nope@1 does not exist/);
    for (const bad of ['-1', 'many', '10001']) {
      const res = await cli('diff', 'fix@1', `--sample=${bad}`);
      expect(res.code).toBe(2);
      expect(res.stderr).toMatch(/--sample: must be a whole number from 0 to 10000/);
    }
  });

  it('refuses (exit 3) when the candidate is gone, naming why', async () => {
    await builtRelease(db, { id: 'four@1', generation: 'g4', from: '2025-07-02T00:00:00Z', to: '2025-07-03T00:00:00Z' });
    expect((await cli('diff', 'four@1', '--sample', '0')).code).toBe(0);
    expect((await cli('cancel', 'four@1', '--reason', 'not needed')).code).toBe(0);
    const res = await cli('diff', 'four@1');
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(/^refused: generation g4 of orders_enriched was abandoned at \S+: release four@1 was cancelled by postgres \(not needed\)/);
  });
});
