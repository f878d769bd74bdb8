// A `timestamp without time zone` source column holds wall-clock times of the release's
// timezone (SPEC "Release" → "Grid"). Issue 13, finding 4: the bounds were converted in SQL
// with `AT TIME ZONE`, and PostgreSQL reads `CET` as the fixed abbreviation +01:00 where the
// grid applies summer time, so a summer day's rows shifted by an hour — and the reconciler,
// converting the same way, agreed. Now such names are refused, and every bound of a zone-less
// column is a wall clock computed by Temporal and bound as `timestamp`.
import { loadRelease, sha256 } from '@genfill/contracts';
import { buildPartition, claimPartition } from '@genfill/builder';
import { planRelease, startBuilding } from '@genfill/planner';
import { createPool, migrate, submitReleaseVerb } from '@genfill/registry';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { checkTimezoneReading } from '../packages/planner/src/admission.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { createExampleSchema, firstGenerationRelease, registryCounts, workspace, writeRelease } from './support/fixtures.ts';

const tdb = await createTestDatabase('zoneless_time');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'zoneless-time-test');
const env = { DATABASE_URL: tdb.url };

const TRANSFORM = 'SELECT s.visit_id, s.seen_at, s.pages FROM source AS s';
/** Berlin's 2025-07-10 and 2025-07-11 (summer time, UTC+2). */
const JULY_10 = 'b-20250709T220000Z';
const JULY_11 = 'b-20250710T220000Z';

function visitsRelease(id: string, dataset: string, timezone: string): Record<string, any> {
  const r = firstGenerationRelease();
  Object.assign(r, {
    release: id,
    dataset,
    source: { table: 'public.visits', key: ['visit_id'], time: 'seen_at' },
    range: { from: '2025-07-09T22:00:00Z', to: '2025-07-11T22:00:00Z' },
    timezone,
    dependencies: [],
    reconcile: { conserved: ['pages'], expectedDiff: [] },
    transform: { sql: 'transforms/visits.sql' },
  });
  r.target.table = `public.${dataset}`;
  return r;
}

const keysOf = async (table: string) =>
  (await db.query<{ visit_id: string }>(`SELECT visit_id FROM ${table} ORDER BY visit_id`)).rows.map((r) => Number(r.visit_id));

/** Claim and build one partition, as a worker would. */
async function build(release: string, partition: string): Promise<void> {
  const c = await claimPartition(db, { release, partition, worker: 'test', leaseMs: 600_000 });
  if (c.kind !== 'claimed') throw new Error(`claim of ${partition} refused: ${JSON.stringify(c)}`);
  await buildPartition(db, { release, partition, attempt: c.attempt });
}

/** Plan, estimate, build July 10 and then July 11, returning the candidate's keys after each. */
async function planAndBuild(id: string, dataset: string): Promise<{ estimates: number[]; afterJuly10: number[]; afterJuly11: number[]; rowsIn: number[] }> {
  await planRelease(db, id);
  await startBuilding(db, id);
  const { rows: parts } = await db.query<{ id: string; est_rows: string }>('SELECT id, est_rows FROM genfill.partitions WHERE release = $1 ORDER BY seq', [id]);
  expect(parts.map((p) => p.id)).toEqual([JULY_10, JULY_11]);
  const table = `genfill_data."${dataset}__g1"`;
  await build(id, JULY_10);
  const afterJuly10 = await keysOf(table);
  await build(id, JULY_11);
  const afterJuly11 = await keysOf(table);
  const { rows: receipts } = await db.query<{ rows_in: string }>('SELECT rows_in FROM genfill.receipts WHERE release = $1 ORDER BY partition', [id]);
  return { estimates: parts.map((p) => Number(p.est_rows)), afterJuly10, afterJuly11, rowsIn: receipts.map((r) => Number(r.rows_in)) };
}

beforeAll(async () => {
  await migrate(db);
  await createExampleSchema(tdb.pool);
  await tdb.pool.query(`
    CREATE TABLE public.visits (visit_id bigint PRIMARY KEY, seen_at timestamp without time zone NOT NULL, pages int NOT NULL);
    INSERT INTO public.visits VALUES
      (1, '2025-07-09 23:30', 1),                  -- Berlin's 07-09: before the range (inside it, read as CET +01:00)
      (2, '2025-07-10 00:00', 2),                  -- the first instant of Berlin's 07-10
      (3, '2025-07-10 23:30', 4),                  -- the issue's row: Berlin's 07-10, not 07-11
      (4, '2025-07-11 00:30', 8),
      (5, '2025-07-11 23:59:59.999999', 16),       -- the last instant of the range
      (6, '2025-07-12 00:00', 32)                  -- the range's end, outside`);
}, 120_000);
beforeEach(() => keepOnFailure(tdb));
afterAll(() => db.end());

describe('zone names PostgreSQL reads as abbreviations', () => {
  for (const tz of ['CET', 'cet', 'EET', 'EST5EDT']) {
    it(`refuses timezone ${tz} with exit 2, naming a region zone, and writes nothing`, async () => {
      const file = writeRelease(workspace(), visitsRelease('visits-cet@1', 'visits_cet', tz), { transform: TRANSFORM });
      const before = await registryCounts(tdb.pool);
      for (const verb of ['validate', 'submit']) {
        const res = await runCli(['release', verb, file], env);
        expect(res.code, verb).toBe(2);
        expect(res.stderr, verb).toMatch(new RegExp(`timezone: ${tz} is not a region zone: PostgreSQL reads it as a time zone abbreviation`));
        expect(res.stderr, verb).toMatch(tz.toUpperCase() === 'EST5EDT' ? /use America\/New_York/ : /use Europe\//);
      }
      expect(await registryCounts(tdb.pool)).toEqual(before);
    });
  }

  it("are refused by the database's own abbreviation table too, case-insensitively, except UTC", async () => {
    const conn = await db.connect();
    try {
      expect(await checkTimezoneReading(conn, 'cet')).toEqual([
        { path: 'timezone', message: expect.stringMatching(/^cet is not a region zone: PostgreSQL reads it as the abbreviation CET, a fixed UTC\+01:00:00 all year, .*use Europe\/Paris or Europe\/Berlin$/) },
      ]);
      expect(await checkTimezoneReading(conn, 'Zulu')).toHaveLength(1);
      for (const ok of ['UTC', 'utc', 'Europe/Berlin', 'Etc/GMT-2']) expect(await checkTimezoneReading(conn, ok), ok).toEqual([]);
    } finally {
      conn.release();
    }
  });
});

describe('a `timestamp without time zone` source in Europe/Berlin', () => {
  it('validates and submits', async () => {
    const file = writeRelease(workspace(), visitsRelease('visits-berlin@1', 'visits_berlin', 'Europe/Berlin'), { transform: TRANSFORM });
    const res = await runCli(['release', 'submit', file], env);
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
  });

  it('puts the row at 23:30 on 2025-07-10 (Berlin) in the partition of 2025-07-10, in estimates, builds and receipts', async () => {
    const r = await planAndBuild('visits-berlin@1', 'visits_berlin');
    expect(r.estimates).toEqual([2, 2]);
    expect(r.afterJuly10).toEqual([2, 3]);
    expect(r.afterJuly11).toEqual([2, 3, 4, 5]);
    expect(r.rowsIn).toEqual([2, 2]);
  });

  it('is reconciled (exit 0): the reconciler reads the same wall-clock bounds', async () => {
    const res = await runCli(['reconcile', 'visits-berlin@1', '--findings-out', `${workspace()}/findings.ndjson`], env);
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(/visits-berlin@1 BUILT → RECONCILED/);
  });
});

describe('a release stored with timezone CET before such names were refused', () => {
  it('is built and reconciled as the grid reads CET (with summer time), not as PostgreSQL would (+01:00)', async () => {
    // As an earlier genfill recorded it: the file is valid for Europe/Berlin, the stored spec says CET.
    const loaded = loadRelease(writeRelease(workspace(), visitsRelease('visits-cet@1', 'visits_cet', 'Europe/Berlin'), { transform: TRANSFORM }));
    const spec = { ...loaded.spec, timezone: 'CET' };
    expect(await submitReleaseVerb(db, { spec, digest: sha256(JSON.stringify(spec)), transformSql: loaded.transformSql })).toBe('submitted');

    const r = await planAndBuild('visits-cet@1', 'visits_cet');
    // With `AT TIME ZONE 'CET'` July 10 was [07-09 23:00, 07-10 23:00): rows 1 and 2, and row 3 in July 11.
    expect(r.estimates).toEqual([2, 2]);
    expect(r.afterJuly10).toEqual([2, 3]);
    expect(r.afterJuly11).toEqual([2, 3, 4, 5]);

    const res = await runCli(['reconcile', 'visits-cet@1', '--findings-out', `${workspace()}/findings.ndjson`], env);
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
  });
});
