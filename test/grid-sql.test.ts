// The grid computed by the database (registry insertGrid, what `genfill plan` stores) equals the
// reference grid of Temporal (contracts computeGrid) exactly — ids, seq, lower, upper — across
// zones with DST gaps and overlaps, half-hour and 45-minute offsets, grains from PT15M to P1Y,
// month ends and DST days (issue 19, part 1; SPEC "Release" → "Grid", invariant 1). Each case
// runs in a transaction that is rolled back; `session_replication_role = replica` skips only the
// foreign key to a manifest, so the rows meet the table's checks and exclusion constraint.
import fc from 'fast-check';
import { computeGrid, coverageProof, InvalidInputError, plannedGrid, RefusedError } from '@genfill/contracts';
import { createPool, insertGrid, storedCoverage, storedGrid, type Conn } from '@genfill/registry';
import { Temporal } from 'temporal-polyfill';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';

const tdb = await createTestDatabase('grid_sql');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'grid-sql-test', 2);
const RELEASE = 'grid@1';
type GridSpec = Parameters<typeof computeGrid>[0];

const ZONES = [
  'UTC',
  'America/New_York',
  'Europe/Berlin',
  'CET',
  'EET',
  'Australia/Lord_Howe',
  'Asia/Kathmandu',
  'Pacific/Chatham',
  'America/Sao_Paulo',
  'America/Santiago',
  'America/Havana',
  'Asia/Beirut',
  'Europe/London',
  'Australia/Adelaide',
  'Asia/Kolkata',
];
const GRAINS = ['PT15M', 'PT1H', 'PT5H', 'PT36H', 'P1D', 'P2DT3H', 'P1W', 'P1M', 'P1M1D', 'P3M', 'P1Y', 'P1Y2M'];

beforeAll(async () => {
  expect((await runCli(['migrate'], { DATABASE_URL: tdb.url, GENFILL_LOG_LEVEL: 'silent' })).code).toBe(0);
}, 120_000);
beforeEach(() => keepOnFailure(tdb));
afterAll(() => db.end());

/** `fn` in a transaction that is always rolled back, with the manifest's foreign key not enforced. */
async function rolledBack<T>(fn: (conn: Conn) => Promise<T>): Promise<T> {
  const conn = await db.connect();
  try {
    await conn.query('BEGIN');
    await conn.query(`SET LOCAL session_replication_role = replica`);
    return await fn(conn as unknown as Conn);
  } finally {
    await conn.query('ROLLBACK');
    conn.release();
  }
}

/** The database's grid of `spec`, read back as computeGrid's partitions, and its proof of the stored rows. */
async function sqlGrid(spec: GridSpec) {
  const { proof, steps } = plannedGrid(spec);
  return rolledBack(async (conn) => {
    const zone = async () => (await conn.query<{ tz: string }>(`SELECT current_setting('TimeZone') AS tz`)).rows[0]!.tz;
    const before = await zone();
    await insertGrid(conn, { release: RELEASE, from: proof.from, to: proof.to, timezone: proof.timezone, steps, count: proof.count });
    const after = await zone();
    const grid = (await storedGrid(conn, RELEASE)).sort((a, b) => a.seq - b.seq);
    return { grid, coverage: await storedCoverage(conn, RELEASE, proof), planned: proof, zones: { before, after } };
  });
}

const iso = (i: Temporal.Instant) => i.toString();

/** A `from` near what breaks naive grids: a DST transition, a month end, a local midnight or a wall clock in a repeated hour. */
const fromArb = fc
  .record({
    zone: fc.constantFrom(...ZONES),
    // 2000-01-01 … 2035-12-31: both tzdata copies (the server's, Node's ICU) agree there.
    epochSec: fc.integer({ min: 946_684_800, max: 2_082_758_399 }),
    anchor: fc.constantFrom('transition', 'month-end', 'midnight', 'any'),
    shiftMinutes: fc.constantFrom(0, -30, 30, -60, 60, -24 * 60, 24 * 60, 150, -90),
    disambiguation: fc.constantFrom('earlier' as const, 'later' as const),
  })
  .map(({ zone, epochSec, anchor, shiftMinutes, disambiguation }) => {
    let z = Temporal.Instant.fromEpochMilliseconds(epochSec * 1000).toZonedDateTimeISO(zone);
    if (anchor === 'transition') z = z.getTimeZoneTransition('next') ?? z;
    if (anchor === 'month-end') z = z.with({ day: z.daysInMonth, hour: 0, minute: 0, second: 0 }, { disambiguation });
    if (anchor === 'midnight') z = z.startOfDay();
    // A wall-clock shift, so a `from` lands in a repeated hour (either occurrence) or next to a gap.
    const wall = z.toPlainDateTime().add({ minutes: shiftMinutes });
    return { zone, from: wall.toZonedDateTime(zone, { disambiguation }).with({ second: 0, millisecond: 0, microsecond: 0, nanosecond: 0 }, { disambiguation }) };
  });

const specArb = fc
  .record({ start: fromArb, every: fc.constantFrom(...GRAINS), steps: fc.integer({ min: 1, max: 60 }), clip: fc.integer({ min: 0, max: 3 }) })
  .map(({ start, every, steps, clip }): GridSpec => {
    const d = Temporal.Duration.from(every);
    const scaled = Temporal.Duration.from({ years: d.years * steps, months: d.months * steps, weeks: d.weeks * steps, days: d.days * steps, hours: d.hours * steps, minutes: d.minutes * steps });
    // `to` on a boundary, or clipped before it by 0–3 hours (the last partition shorter).
    let to = start.from.add(scaled).toInstant().subtract({ hours: clip });
    if (Temporal.Instant.compare(to, start.from.toInstant()) <= 0) to = start.from.toInstant().add({ minutes: 1 });
    return { from: iso(start.from.toInstant()), to: iso(to), timezone: start.zone, every };
  });

describe('the grid in SQL equals the Temporal grid', () => {
  it('ids, seq, lower and upper agree for random zones, grains and ranges (fast-check)', async () => {
    await fc.assert(
      fc.asyncProperty(specArb, async (spec) => {
        let expected;
        try {
          expected = computeGrid(spec);
        } catch (err) {
          // A zone that skips a whole day can make two boundaries one: refused before SQL.
          if (err instanceof InvalidInputError) return;
          throw err;
        }
        const { grid, coverage, planned, zones } = await sqlGrid(spec);
        expect(grid).toEqual(expected);
        expect(planned).toEqual(coverageProof(spec, expected));
        expect(coverage).toEqual({ count: expected.length, contiguous: true, exactEnds: true, overlaps: 0, gaps: 0, boundariesSha256: planned.boundariesSha256 });
        // The zone was the statement's only: the session's is back.
        expect(zones.after).toBe(zones.before);
      }),
      { numRuns: 500 },
    );
  }, 60_000);

  it('takes the earlier instant of a repeated hour, as Temporal does, where a timestamptz cast takes the later', async () => {
    // 02:30 Berlin, then P1D: 26 October 2025 02:30 happens twice (CEST, then CET).
    const spec = { from: '2025-10-25T00:30:00Z', to: '2025-10-28T00:30:00Z', timezone: 'Europe/Berlin', every: 'P1D' };
    const pg = await rolledBack(async (conn) => {
      await conn.query(`SET LOCAL TimeZone = 'Europe/Berlin'`);
      const { rows } = await conn.query<{ pg: string }>(
        `SELECT to_char(timestamp '2025-10-26 02:30'::timestamptz AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS pg`,
      );
      return rows[0]!.pg;
    });
    expect(pg).toBe('2025-10-26T01:30:00Z'); // PostgreSQL's cast: CET, the later one
    const { grid } = await sqlGrid(spec);
    expect(grid.map((p) => p.lower)).toEqual(['2025-10-25T00:30:00Z', '2025-10-26T00:30:00Z', '2025-10-27T01:30:00Z']);
    expect(grid).toEqual(computeGrid(spec));
  });

  it('moves a wall clock in a skipped hour forward by the gap, like Temporal (02:30 Berlin on 30 March is 03:30 CEST)', async () => {
    const spec = { from: '2025-03-29T01:30:00Z', to: '2025-04-01T00:30:00Z', timezone: 'Europe/Berlin', every: 'P1D' };
    const { grid } = await sqlGrid(spec);
    expect(grid.map((p) => p.lower)).toEqual(['2025-03-29T01:30:00Z', '2025-03-30T01:30:00Z', '2025-03-31T00:30:00Z']);
    expect(grid).toEqual(computeGrid(spec));
  });

  it('adds months and days in one calendar step, then resolves the wall clock once (P1M1D into a gap)', async () => {
    // 28 Feb 02:30 Berlin + P1M1D = 29 March 02:30 (exists); ×2 = 30 April 02:30, never through 30 March's gap.
    const spec = { from: '2025-02-28T01:30:00Z', to: '2025-06-01T00:00:00Z', timezone: 'Europe/Berlin', every: 'P1M1D' };
    const { grid } = await sqlGrid(spec);
    expect(grid).toEqual(computeGrid(spec));
    // Through 2 months from 31 January: 28 February, then 31 March (never a cumulative 28 March).
    const monthEnds = { from: '2025-01-30T23:00:00Z', to: '2025-05-01T00:00:00Z', timezone: 'Europe/Berlin', every: 'P1M' };
    const months = await sqlGrid(monthEnds);
    expect(months.grid.map((p) => p.lower)).toEqual(['2025-01-30T23:00:00Z', '2025-02-27T23:00:00Z', '2025-03-30T22:00:00Z', '2025-04-29T22:00:00Z']);
    expect(months.grid).toEqual(computeGrid(monthEnds));
  });

  it('reads CET as the tzdata zone with summer time, not as the fixed abbreviation AT TIME ZONE reads', async () => {
    const { rows } = await db.query<{ abbreviation: string }>(`SELECT (timestamptz '2025-07-01 12:00Z' AT TIME ZONE 'CET')::text AS abbreviation`);
    expect(rows[0]!.abbreviation).toBe('2025-07-01 13:00:00'); // +01:00 all year: not what the release means
    const spec = { from: '2025-03-28T23:00:00Z', to: '2025-04-01T22:00:00Z', timezone: 'CET', every: 'P1D' };
    const { grid } = await sqlGrid(spec);
    expect(grid.map((p) => p.lower)).toEqual(['2025-03-28T23:00:00Z', '2025-03-29T23:00:00Z', '2025-03-30T22:00:00Z', '2025-03-31T22:00:00Z']);
    expect(grid).toEqual(computeGrid(spec));
  });

  it('stores a ten-year hourly grid of 87,672 partitions equal to the reference, with its proof', async () => {
    const spec = { from: '2015-07-01T00:00:00Z', to: '2025-07-01T00:00:00Z', timezone: 'Europe/Berlin', every: 'PT1H' };
    const { grid, coverage, planned } = await sqlGrid(spec);
    expect(grid).toHaveLength(87_672);
    expect(grid).toEqual(computeGrid(spec));
    expect(coverage).toMatchObject({ count: 87_672, contiguous: true, exactEnds: true, gaps: 0, overlaps: 0, boundariesSha256: planned.boundariesSha256 });
  }, 60_000);
});

describe('the proof re-derived in SQL', () => {
  it('agrees with coverageProof over the stored rows after a partition is removed or moved', async () => {
    const spec = { from: '2025-01-01T00:00:00Z', to: '2025-01-11T00:00:00Z', timezone: 'America/New_York', every: 'P1D' };
    const { proof, steps } = plannedGrid(spec);
    for (const change of [
      `DELETE FROM genfill.partitions WHERE release = $1 AND seq = 4`,
      `DELETE FROM genfill.partitions WHERE release = $1 AND seq IN (0, 9)`,
      `UPDATE genfill.partitions SET upper = upper - interval '1 hour' WHERE release = $1 AND seq = 2`,
      `UPDATE genfill.partitions SET lower = lower + interval '1 second' WHERE release = $1 AND seq = 0`,
      `DELETE FROM genfill.partitions WHERE release = $1`,
    ]) {
      await rolledBack(async (conn) => {
        await insertGrid(conn, { release: RELEASE, from: proof.from, to: proof.to, timezone: proof.timezone, steps, count: proof.count });
        await conn.query(change, [RELEASE]);
        const stored = await storedGrid(conn, RELEASE);
        const full = coverageProof(spec, stored);
        const figures = { count: full.count, contiguous: full.contiguous, exactEnds: full.exactEnds, overlaps: full.overlaps, gaps: full.gaps, boundariesSha256: full.boundariesSha256 };
        expect(await storedCoverage(conn, RELEASE, proof)).toEqual(figures);
        // Each change breaks the proof (a gap, or lost contiguity, or other boundaries).
        expect(figures.gaps > 0 || !figures.contiguous || !figures.exactEnds || figures.boundariesSha256 !== proof.boundariesSha256).toBe(true);
      });
    }
  });

  it('refuses a zone the server does not know, naming the fix', async () => {
    const err = await rolledBack((conn) =>
      insertGrid(conn, { release: RELEASE, from: '2025-01-01T00:00:00Z', to: '2025-01-02T00:00:00Z', timezone: 'Mars/Olympus_Mons', steps: { months: 0, days: 0, seconds: 3600 }, count: 24 }).catch((e: unknown) => e),
    );
    expect(err).toBeInstanceOf(RefusedError);
    expect((err as Error).message).toMatch(/PostgreSQL does not know the time zone Mars\/Olympus_Mons .*update the server's tzdata or choose another zone/);
  });
});
