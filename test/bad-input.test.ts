// Bad input gets a clear error naming the path, exit 2, and writes nothing (issue #2, item 7).
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { createExampleSchema, EXAMPLE_TRANSFORM, firstGenerationRelease, registryCounts, workspace, writeRelease } from './support/fixtures.ts';

const db = await createTestDatabase('bad_input');
const env = { DATABASE_URL: db.url };

beforeAll(async () => {
  expect((await runCli(['migrate'], env)).code).toBe(0);
  await createExampleSchema(db.pool);
  await db.pool.query(`CREATE TABLE public.orders_nullable_time (LIKE public.orders INCLUDING ALL)`);
  await db.pool.query(`ALTER TABLE public.orders_nullable_time ALTER COLUMN created_at DROP NOT NULL`);
});
beforeEach(() => keepOnFailure(db));

type Case = { name: string; write: (dir: string) => string; expect: RegExp };
const variant = (edit: (r: Record<string, any>) => void, transform?: string | null) => (dir: string) => {
  const r = firstGenerationRelease();
  edit(r);
  return writeRelease(dir, r, { transform });
};

const cases: Case[] = [
  {
    name: 'malformed YAML, with its line',
    write: (dir) => writeRelease(dir, 'schema: dataBackfillRelease.v1\nrelease: [unclosed\n  dataset: x\n'),
    expect: /release\.yaml:\d+:\d+: malformed YAML/,
  },
  { name: 'an unknown top-level key', write: variant((r) => (r.priority = 'high')), expect: /\(root\): unknown key priority/ },
  { name: 'an unknown nested key', write: variant((r) => (r.target.mode = 'x')), expect: /target: unknown key mode/ },
  { name: 'a missing required key', write: variant((r) => delete r.owner), expect: /owner: / },
  { name: 'from equal to to', write: variant((r) => (r.range.to = r.range.from)), expect: /range: from .* must be before to/ },
  { name: 'from after to', write: variant((r) => (r.range = { from: '2026-07-01T00:00:00Z', to: '2025-07-01T00:00:00Z' })), expect: /range: from .* must be before to/ },
  { name: 'an instant without an offset', write: variant((r) => (r.range.from = '2025-07-01T00:00:00')), expect: /range\.from: / },
  { name: 'an unknown timezone', write: variant((r) => (r.timezone = 'Mars/Olympus_Mons')), expect: /timezone: .*Mars\/Olympus_Mons/ },
  { name: 'a zero duration', write: variant((r) => (r.partition.every = 'P0D')), expect: /partition\.every: / },
  { name: 'a negative duration', write: variant((r) => (r.partition.every = '-P1D')), expect: /partition\.every: / },
  { name: 'a malformed duration', write: variant((r) => (r.partition.every = 'daily')), expect: /partition\.every: / },
  { name: 'an unknown write mode', write: variant((r) => (r.target.writeMode = 'MERGE')), expect: /target\.writeMode: must be REPLACE_RANGE or UPSERT/ },
  { name: 'UPSERT, which is not built', write: variant((r) => (r.target.writeMode = 'UPSERT')), expect: /target\.writeMode: UPSERT is not supported yet/ },
  { name: 'a missing transform file', write: variant(() => undefined, null), expect: /transform\.sql: cannot read transforms\/order-tax-fix\.sql .*ENOENT/ },
  {
    name: 'a NULL-able time column',
    write: variant((r) => (r.source.table = 'public.orders_nullable_time')),
    expect: /source\.time: created_at of public\.orders_nullable_time is NULL-able/,
  },
  { name: 'a source table that does not exist', write: variant((r) => (r.source.table = 'public.nope')), expect: /source\.table: public\.nope does not exist/ },
  {
    name: 'a window function in the transform',
    write: variant(() => undefined, EXAMPLE_TRANSFORM.replace('s.amount_cents,', 's.amount_cents + 0 * row_number() OVER () AS amount_cents,')),
    expect: /transform\.sql: .*window/i,
  },
  {
    name: 'now() in the transform',
    write: variant(() => undefined, EXAMPLE_TRANSFORM.replace('s.created_at,', 'now() AS created_at,')),
    expect: /transform\.sql: .*now/,
  },
  {
    name: 'output columns that do not fit the target',
    write: variant((r) => (r.target.table = 'public.orders_enriched'), 'SELECT s.order_id, s.created_at, s.region, s.amount_cents, 1.5::numeric AS tax_cents, 1 AS extra FROM source AS s'),
    expect: /transform\.sql: .*extra/,
  },
  {
    name: 'a transform output without the time column',
    write: variant(() => undefined, 'SELECT s.order_id, s.region, s.amount_cents, 0::bigint AS tax_cents FROM source AS s'),
    expect: /transform\.sql: .*created_at/,
  },
  {
    name: 'a conserved column the source does not have',
    write: variant((r) => (r.reconcile.conserved = ['tax_total'])),
    expect: /reconcile\.conserved\.0: conserved column tax_total is not a column of the source/,
  },
];

describe('bad input writes nothing', () => {
  for (const c of cases) {
    for (const verb of ['validate', 'submit'] as const) {
      it(`${verb} refuses ${c.name} with exit 2 and the path`, async () => {
        const before = await registryCounts(db.pool);
        const res = await runCli(['release', verb, c.write(workspace())], env);
        expect(res.stderr).toMatch(c.expect);
        expect(res.stderr).toMatch(/nothing was written/);
        expect(res.code).toBe(2);
        expect(await registryCounts(db.pool)).toEqual(before);
      });
    }
  }

  it('a release file that does not exist is exit 2', async () => {
    const res = await runCli(['release', 'validate', '/nonexistent/release.yaml'], env);
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/cannot read the release file: ENOENT/);
  });

  it('an unknown command or a missing argument is exit 2', async () => {
    expect((await runCli(['frobnicate'], env)).code).toBe(2);
    expect((await runCli(['plan'], env)).code).toBe(2);
  });
});
