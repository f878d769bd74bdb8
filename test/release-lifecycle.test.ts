// submit → plan → status through the CLI against a real database (SPEC invariant 1, the
// release contract's immutability and the overlap rule).
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { createTestQueues } from './support/redis.ts';
import { createExampleSchema, exampleRelease, firstGenerationRelease, registryCounts, workspace, writeRelease } from './support/fixtures.ts';

const db = await createTestDatabase('lifecycle');
const env = { DATABASE_URL: db.url, GENFILL_QUEUE_PREFIX: createTestQueues('lifecycle').prefix };
const cli = (...args: string[]) => runCli(args, env);

beforeAll(async () => {
  expect((await cli('migrate')).code).toBe(0);
  await createExampleSchema(db.pool);
});
beforeEach(() => keepOnFailure(db));

describe('release submit', () => {
  it('records a valid release as DRAFT with its digest and who submitted it', async () => {
    const file = writeRelease(workspace(), firstGenerationRelease());
    const res = await cli('release', 'submit', file);
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(/submitted orders-g1@1 \(digest sha256:[0-9a-f]{64}\)/);
    const { rows } = await db.pool.query(`SELECT state, submitted_by, digest FROM genfill.releases WHERE id = 'orders-g1@1'`);
    expect(rows).toEqual([{ state: 'DRAFT', submitted_by: 'postgres', digest: expect.stringMatching(/^sha256:/) }]);
  });

  it('treats identical content submitted again as a no-op, even from another directory', async () => {
    const before = await registryCounts(db.pool);
    const res = await cli('release', 'submit', writeRelease(workspace(), firstGenerationRelease()));
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(/^unchanged: orders-g1@1/);
    expect(await registryCounts(db.pool)).toEqual(before);
  });

  it('refuses the same release id with other content (exit 3) and writes nothing', async () => {
    const before = await registryCounts(db.pool);
    const r = firstGenerationRelease();
    r.budget.workers = 8;
    const res = await cli('release', 'submit', writeRelease(workspace(), r));
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(/release orders-g1@1 already exists with digest sha256:\w+, this file has sha256:\w+/);
    expect(await registryCounts(db.pool)).toEqual(before);
  });

  it('counts a change in the transform file as other content', async () => {
    const res = await cli('release', 'submit', writeRelease(workspace(), firstGenerationRelease(), { transform: 'SELECT s.order_id, s.created_at, s.region, s.amount_cents, 0::bigint AS tax_cents FROM source s' }));
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(/already exists with digest/);
  });

  it('refuses a release whose range overlaps another on the same dataset and generation (exit 3)', async () => {
    const before = await registryCounts(db.pool);
    const r = firstGenerationRelease();
    r.release = 'orders-g1-overlap@1';
    r.range = { from: '2026-06-30T00:00:00Z', to: '2026-08-01T00:00:00Z' };
    const res = await cli('release', 'submit', writeRelease(workspace(), r));
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(/overlaps release orders-g1@1 \(\["2025-07-01 00:00:00\+00","2026-07-01 00:00:00\+00"\)\)/);
    expect(await registryCounts(db.pool)).toEqual(before);
  });

  it('accepts a release that starts exactly at the other one\'s `to` (half-open ranges touch)', async () => {
    const r = firstGenerationRelease();
    r.release = 'orders-g1-next@1';
    r.range = { from: '2026-07-01T00:00:00Z', to: '2026-08-01T00:00:00Z' };
    const res = await cli('release', 'submit', writeRelease(workspace(), r));
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
  });

  it('refuses a release that contradicts the registered dataset', async () => {
    const r = firstGenerationRelease();
    r.release = 'orders-other-target@1';
    r.target.generation = 'g9';
    r.target.table = 'public.orders_enriched';
    const before = await registryCounts(db.pool);
    const res = await cli('release', 'submit', writeRelease(workspace(), r));
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(/dataset orders_new is registered with other settings: target.table is public.orders_new/);
    expect(await registryCounts(db.pool)).toEqual(before);
  });
});

describe('plan', () => {
  it('pins the manifest: 365 daily partitions, a stored coverage proof and the dependency hash', async () => {
    const res = await cli('plan', 'orders-g1@1', '--json');
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    const plan = JSON.parse(res.stdout);
    expect(plan).toMatchObject({
      status: 'planned',
      state: 'BUILDING',
      partitions: 365,
      first: { lower: '2025-07-01T00:00:00Z', upper: '2025-07-02T00:00:00Z' },
      last: { lower: '2026-06-30T00:00:00Z', upper: '2026-07-01T00:00:00Z' },
      coverage: { count: 365, contiguous: true, exactEnds: true, gaps: 0, overlaps: 0, rangeUnion: ['["2025-07-01 00:00:00+00","2026-07-01 00:00:00+00")'] },
    });
    expect(plan.dependencies).toEqual([{ relation: 'public.tax_rates', row_count: '3', content_hash: expect.stringMatching(/^\d+$/) }]);
    const stored = await db.pool.query(`SELECT partition_count, coverage_proof->>'boundariesSha256' AS sha FROM genfill.manifests WHERE release = 'orders-g1@1'`);
    expect(stored.rows).toEqual([{ partition_count: 365, sha: plan.coverage.boundariesSha256 }]);
    const gen = await db.pool.query(`SELECT state, transform_map FROM genfill.generations WHERE dataset = 'orders_new' AND generation = 'g1'`);
    expect(gen.rows[0].state).toBe('CANDIDATE');
    expect(gen.rows[0].transform_map).toEqual([{ from: '2025-07-01T00:00:00Z', to: '2026-07-01T00:00:00Z', transform: expect.stringMatching(/^sha256:/), release: 'orders-g1@1' }]);
  });

  it('puts a row exactly at `to` in no partition and a row at `from` in the first', async () => {
    const at = async (instant: string) =>
      (await db.pool.query(`SELECT seq FROM genfill.partitions WHERE release = 'orders-g1@1' AND $1::timestamptz <@ tstzrange(lower, upper, '[)')`, [instant])).rows;
    expect(await at('2026-07-01T00:00:00Z')).toEqual([]);
    expect(await at('2025-07-01T00:00:00Z')).toEqual([{ seq: 0 }]);
    expect(await at('2026-06-30T23:59:59.999999Z')).toEqual([{ seq: 364 }]);
  });

  it('is harmless when run again, and when run twice at once', async () => {
    const before = await registryCounts(db.pool);
    const again = await cli('plan', 'orders-g1@1');
    expect(again.code).toBe(0);
    expect(again.stdout).toMatch(/^already planned: orders-g1@1 is BUILDING/);
    expect(await registryCounts(db.pool)).toEqual(before);

    // One open release per candidate generation: orders-g1-next@1 (submitted beside
    // orders-g1@1 into g1) waits until orders-g1@1 is done; refused, nothing written.
    const refused = await cli('plan', 'orders-g1-next@1');
    expect(refused.code).toBe(3);
    expect(refused.stderr).toMatch(/release orders-g1@1 \(BUILDING\) is open on candidate generation g1: one open release per candidate/);
    expect(await registryCounts(db.pool)).toEqual(before);

    const other = firstGenerationRelease();
    other.release = 'orders-other@1';
    other.dataset = 'orders_other';
    other.target.table = 'public.orders_other';
    other.range = { from: '2026-07-01T00:00:00Z', to: '2026-08-01T00:00:00Z' };
    expect((await cli('release', 'submit', writeRelease(workspace(), other))).code).toBe(0);
    const [a, b] = await Promise.all([cli('plan', 'orders-other@1', '--json'), cli('plan', 'orders-other@1', '--json')]);
    expect([a.code, b.code], a.stderr + b.stderr).toEqual([0, 0]);
    expect([JSON.parse(a.stdout).status, JSON.parse(b.stdout).status].sort()).toEqual(['already-planned', 'planned']);
    const n = await db.pool.query(`SELECT count(*)::int AS n FROM genfill.partitions WHERE release = 'orders-other@1'`);
    expect(n.rows[0].n).toBe(31);
  });

  it('creates the candidate as a partition of a new parent and the user-facing name as a view showing no candidate rows', async () => {
    const parts = await db.pool.query(
      `SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) AS bound FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'genfill_data.orders_new'::regclass`,
    );
    expect(parts.rows).toEqual([{ relname: 'orders_new__g1', bound: "FOR VALUES IN ('g1')" }]);
    const cols = await db.pool.query(
      `SELECT attname FROM pg_attribute WHERE attrelid = 'genfill_data.orders_new'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`,
    );
    expect(cols.rows.map((r) => r.attname)).toEqual(['generation', 'order_id', 'created_at', 'region', 'amount_cents', 'tax_cents', '_gf_rev', '_gf_deleted']);
    await db.pool.query(`INSERT INTO genfill_data.orders_new__g1 (generation, order_id, created_at, region, amount_cents, tax_cents) VALUES ('g1', 1, now(), 'north', 100, 19)`);
    const seen = await db.pool.query('SELECT count(*)::int AS n FROM public.orders_new');
    expect(seen.rows[0].n).toBe(0);
    await db.pool.query(`DELETE FROM genfill_data.orders_new__g1`);
  });

  it('refuses a first generation whose target name is a table it does not manage, pointing at adopt', async () => {
    const r = firstGenerationRelease();
    r.release = 'orders-plain@1';
    r.dataset = 'orders_plain';
    r.target.table = 'public.legacy_enriched';
    await db.pool.query('CREATE TABLE public.legacy_enriched (LIKE public.orders_enriched)');
    expect((await cli('release', 'submit', writeRelease(workspace(), r))).code).toBe(0);
    const res = await cli('plan', 'orders-plain@1');
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(/public.legacy_enriched exists and is not a genfill view: adopt it/);
    const parent = await db.pool.query(`SELECT to_regclass('genfill_data.orders_plain') AS p`);
    expect(parent.rows[0].p).toBeNull();
  });

  it('refuses a release whose expected active generation was never adopted, naming it (exit 3)', async () => {
    const dir = workspace();
    const r = exampleRelease();
    r.release = 'orders-needs-adopt@1';
    r.target.generation = 'g7';
    expect((await cli('release', 'submit', writeRelease(dir, r))).code).toBe(0);
    const res = await cli('plan', 'orders-needs-adopt@1');
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(/has no generation tax-fix-g2 .*genfill dataset adopt/);
    const st = await db.pool.query(`SELECT state FROM genfill.releases WHERE id = 'orders-needs-adopt@1'`);
    expect(st.rows[0].state).toBe('DRAFT');
  });

  it('refuses a new dataset whose target name another dataset already owns', async () => {
    const r = firstGenerationRelease();
    r.release = 'orders-same-target@1';
    r.dataset = 'orders_twin';
    const res = await cli('release', 'submit', writeRelease(workspace(), r));
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(/public.orders_new is already the target of dataset orders_new/);
  });

  it('refuses an unknown release with exit 3', async () => {
    const res = await cli('plan', 'no-such-release');
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(/release no-such-release does not exist/);
  });
});

describe('status', () => {
  it('shows state, manifest and history, with --json for scripts', async () => {
    const human = await cli('status', 'orders-g1@1');
    expect(human.code).toBe(0);
    expect(human.stdout).toMatch(/state\s+BUILDING/);
    expect(human.stdout).toMatch(/partitions\s+365 \(PENDING 365\)/);
    expect(human.stdout).toMatch(/plan\s+DRAFT → SNAPSHOT_PINNED\s+by postgres/);
    // By default a summary without the partitions; --partitions lists them (one page of 1,000).
    const summary = JSON.parse((await cli('status', 'orders-g1@1', '--json')).stdout);
    expect(summary.partitions).toBeUndefined();
    expect(summary).toMatchObject({ counts: { PENDING: 365 }, summary: { byKind: { build: { PENDING: 365 } }, failed: { ranges: [], moreRanges: 0 }, slowest: [] } });
    const res = await cli('status', 'orders-g1@1', '--json', '--partitions');
    const s = JSON.parse(res.stdout);
    expect(s.page).toEqual({ number: 1, size: 1000, total: 365, pages: 1, status: null });
    expect(s.partitions).toHaveLength(365);
    expect(s.partitions[0]).toMatchObject({ id: expect.stringMatching(/^b-20250701T000000Z$/), status: 'PENDING', attempt: 0, kind: 'build' });
    expect(s.history.map((h: { action: string }) => h.action)).toEqual(['submit', 'plan', 'build']);
    expect(s.paused).toEqual({ operator: false, throttle: false });
  });

  it('lists every release when none is named', async () => {
    const res = await cli('status', '--json');
    expect(res.code).toBe(0);
    expect(JSON.parse(res.stdout).map((r: { release: string }) => r.release)).toContain('orders-g1@1');
  });
});

describe('validate', () => {
  it('validates the SPEC example against the database and prints its digest', async () => {
    const dir = workspace();
    const file = writeRelease(dir, exampleRelease());
    const res = await cli('release', 'validate', file, '--json');
    expect(res.stderr).toBe('');
    expect(JSON.parse(res.stdout)).toMatchObject({ valid: true, release: 'order-tax-fix@3', partitions: 365, checkedDatabase: true });
  });

  it('gives the same digest to a JSON file with the same content', async () => {
    const dir = workspace();
    const yamlRes = await cli('release', 'validate', writeRelease(dir, exampleRelease()), '--json', '--offline');
    const jsonFile = join(dir, 'release.json');
    writeFileSync(jsonFile, JSON.stringify(exampleRelease()));
    const jsonRes = await cli('release', 'validate', jsonFile, '--json', '--offline');
    expect(JSON.parse(jsonRes.stdout).digest).toBe(JSON.parse(yamlRes.stdout).digest);
  });
});
