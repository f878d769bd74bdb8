import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { Temporal } from 'temporal-polyfill';
import { describe, expect, it } from 'vitest';
import { InvalidInputError } from '../src/errors.ts';
import {
  checkTimezone,
  computeGrid,
  coverageProof,
  type GridPartition,
  type GridSpec,
  locate,
  MAX_PARTITIONS,
  parseEvery,
  parseInstant,
  partitionId,
} from '../src/grid.ts';

const seconds = (p: GridPartition): number =>
  Number(Temporal.Instant.from(p.upper).epochNanoseconds - Temporal.Instant.from(p.lower).epochNanoseconds) / 1e9;

/** Runs fn and returns the InvalidInputError's paths (fails the test if it does not throw one). */
function problemPaths(fn: () => unknown): string[] {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(InvalidInputError);
    return (err as InvalidInputError).problems.map((p) => p.path);
  }
  throw new Error('expected an InvalidInputError');
}

describe('grid: SPEC examples', () => {
  it('Europe/Berlin P1D: local 30 March is 23 hours, the last Sunday of October 25 hours', () => {
    const grid = computeGrid({ from: '2025-03-29T23:00:00Z', to: '2025-11-01T23:00:00Z', timezone: 'Europe/Berlin', every: 'P1D' });
    expect(grid[0]).toMatchObject({ lower: '2025-03-29T23:00:00Z', upper: '2025-03-30T22:00:00Z' });
    expect(seconds(grid[0]!)).toBe(23 * 3600);
    const oct26 = grid.find((p) => p.lower === '2025-10-25T22:00:00Z')!;
    expect(oct26.upper).toBe('2025-10-26T23:00:00Z');
    expect(seconds(oct26)).toBe(25 * 3600);
    const lengths = grid.map(seconds);
    expect(lengths.filter((s) => s === 23 * 3600)).toHaveLength(1);
    expect(lengths.filter((s) => s === 25 * 3600)).toHaveLength(1);
    expect(lengths.filter((s) => s === 24 * 3600)).toHaveLength(grid.length - 2);
    // Every boundary is local midnight.
    for (const p of grid) expect(Temporal.Instant.from(p.lower).toZonedDateTimeISO('Europe/Berlin').hour).toBe(0);
  });

  it('P1M from 31 January (UTC): Jan 31, Feb 28, Mar 31, Apr 30, May 31 — not Mar 28', () => {
    const grid = computeGrid({ from: '2025-01-31T00:00:00Z', to: '2025-06-15T00:00:00Z', timezone: 'UTC', every: 'P1M' });
    expect(grid.map((p) => p.lower)).toEqual([
      '2025-01-31T00:00:00Z',
      '2025-02-28T00:00:00Z',
      '2025-03-31T00:00:00Z',
      '2025-04-30T00:00:00Z',
      '2025-05-31T00:00:00Z',
    ]);
    expect(grid.at(-1)!.upper).toBe('2025-06-15T00:00:00Z'); // clipped at `to`
    // In a leap year February ends on the 29th.
    const leap = computeGrid({ from: '2024-01-31T00:00:00Z', to: '2024-04-01T00:00:00Z', timezone: 'UTC', every: 'P1M' });
    expect(leap.map((p) => p.lower)).toEqual(['2024-01-31T00:00:00Z', '2024-02-29T00:00:00Z', '2024-03-31T00:00:00Z']);
  });

  it('PT1H over the repeated autumn hour in Europe/Berlin: 25 partitions of exactly 3600 s', () => {
    const grid = computeGrid({ from: '2025-10-25T22:00:00Z', to: '2025-10-26T23:00:00Z', timezone: 'Europe/Berlin', every: 'PT1H' });
    expect(grid).toHaveLength(25);
    for (const p of grid) expect(seconds(p)).toBe(3600);
    const localHours = grid.map((p) => Temporal.Instant.from(p.lower).toZonedDateTimeISO('Europe/Berlin').hour);
    expect(localHours.filter((h) => h === 2)).toHaveLength(2); // 02:00 CEST and 02:00 CET
  });

  it('the SPEC range 2025-07-01 → 2026-07-01 P1D UTC has exactly 365 partitions with exact ends', () => {
    const spec: GridSpec = { from: '2025-07-01T00:00:00Z', to: '2026-07-01T00:00:00Z', timezone: 'UTC', every: 'P1D' };
    const grid = computeGrid(spec);
    expect(grid).toHaveLength(365);
    expect(grid[0]!.lower).toBe(spec.from);
    expect(grid.at(-1)!.upper).toBe(spec.to);
    expect(grid[0]).toEqual({ seq: 0, id: 'b-20250701T000000Z', kind: 'build', lower: '2025-07-01T00:00:00Z', upper: '2025-07-02T00:00:00Z' });
    const proof = coverageProof(spec, grid);
    expect(proof).toMatchObject({ count: 365, contiguous: true, exactEnds: true, gaps: 0, overlaps: 0 });
    const lines = [...grid.map((p) => p.lower), spec.to].join('\n');
    expect(proof.boundariesSha256).toBe(createHash('sha256').update(lines).digest('hex'));
  });

  it('a row exactly at `to` is in no partition; a row at `from` is in the first', () => {
    const spec: GridSpec = { from: '2025-07-01T00:00:00Z', to: '2026-07-01T00:00:00Z', timezone: 'UTC', every: 'P1D' };
    const grid = computeGrid(spec);
    expect(locate(grid, spec.to)).toBeUndefined();
    expect(locate(grid, '2026-07-01T02:00:00+02:00')).toBeUndefined(); // the same instant, another offset
    expect(locate(grid, spec.from)).toBe(grid[0]);
    expect(locate(grid, '2025-06-30T23:59:59.999999Z')).toBeUndefined();
    expect(locate(grid, '2026-06-30T23:59:59.999999Z')).toBe(grid.at(-1));
    expect(locate(grid, '2025-07-02T00:00:00Z')).toBe(grid[1]);
    expect(locate([], spec.from)).toBeUndefined();
  });

  it('the same spec twice gives identical partitions and ids (determinism)', () => {
    const spec: GridSpec = { from: '2025-03-01T00:00:00+01:00', to: '2025-05-01T00:00:00+02:00', timezone: 'Europe/Berlin', every: 'PT5H' };
    const a = computeGrid(spec);
    const b = computeGrid({ ...spec });
    expect(b).toEqual(a);
    expect(new Set(a.map((p) => p.id)).size).toBe(a.length);
    expect(coverageProof(spec, b)).toEqual(coverageProof(spec, a));
  });
});

describe('grid: edge cases', () => {
  it('refuses a grid whose boundaries collapse (Pacific/Apia skipped 30 December 2011)', () => {
    const spec = { from: '2011-12-28T10:00:00Z', to: '2012-01-05T10:00:00Z', timezone: 'Pacific/Apia', every: 'P1D' };
    expect(problemPaths(() => computeGrid(spec))).toEqual(['partition.every']);
    expect(() => computeGrid(spec)).toThrow(/not strictly increasing/);
  });

  it('refuses more than 200 000 partitions, saying how many', () => {
    const spec = { from: '2025-01-01T00:00:00Z', to: '2026-01-01T00:00:00Z', timezone: 'UTC', every: 'PT1S' };
    expect(problemPaths(() => computeGrid(spec))).toEqual(['partition.every']);
    expect(() => computeGrid(spec)).toThrow(/about 31536000 partitions/);
    // Exactly at the limit is allowed.
    const atLimit = computeGrid({ from: '2025-01-01T00:00:00Z', to: '2025-01-03T07:33:20Z', timezone: 'UTC', every: 'PT1S' });
    expect(atLimit).toHaveLength(MAX_PARTITIONS);
  });

  it('reports every bad field at once, with release paths', () => {
    expect(problemPaths(() => computeGrid({ from: 'yesterday', to: '2025-01-01T00:00:00', timezone: 'Mars/Olympus', every: 'P0D' }))).toEqual([
      'range.from',
      'range.to',
      'timezone',
      'partition.every',
    ]);
    expect(problemPaths(() => computeGrid({ from: '2025-01-02T00:00:00Z', to: '2025-01-01T00:00:00Z', timezone: 'UTC', every: 'P1D' }))).toEqual(['range']);
    expect(problemPaths(() => computeGrid({ from: '2025-01-01T00:00:00.5Z', to: '2025-01-02T00:00:00Z', timezone: 'UTC', every: 'P1D' }))).toEqual(['range.from']);
  });

  it('a single partition shorter than `every` is clipped at `to`', () => {
    expect(computeGrid({ from: '2025-01-01T00:00:00Z', to: '2025-01-01T00:00:01Z', timezone: 'UTC', every: 'P1Y' })).toEqual([
      { seq: 0, id: 'b-20250101T000000Z', kind: 'build', lower: '2025-01-01T00:00:00Z', upper: '2025-01-01T00:00:01Z' },
    ]);
  });

  it('P2DT3H adds days in the zone and hours as elapsed time, each from `from`', () => {
    // 2025-03-29T00:00 Berlin (+01:00); +2 days lands after the spring gap at 00:00 +02:00, then +3 h.
    const grid = computeGrid({ from: '2025-03-28T23:00:00Z', to: '2025-04-05T00:00:00Z', timezone: 'Europe/Berlin', every: 'P2DT3H' });
    expect(grid.map((p) => p.lower)).toEqual(['2025-03-28T23:00:00Z', '2025-03-31T01:00:00Z', '2025-04-02T04:00:00Z', '2025-04-04T07:00:00Z']);
  });
});

describe('parseInstant / parseEvery / checkTimezone / partitionId', () => {
  it('parseInstant takes RFC 3339 with offset and refuses the rest, naming the path', () => {
    expect(parseInstant('2025-07-01T02:00:00+02:00', 'x').toString()).toBe('2025-07-01T00:00:00Z');
    expect(parseInstant('2025-07-01t00:00:00z', 'x').toString()).toBe('2025-07-01T00:00:00Z');
    expect(parseInstant('2025-07-01 00:00:00.25Z', 'x').toString()).toBe('2025-07-01T00:00:00.25Z');
    for (const bad of ['2025-07-01T00:00:00', '2025-07-01', '2025-02-30T00:00:00Z', '2025-07-01T24:00:00Z', '2025-06-30T23:59:60Z',
      '2025-07-01T00:00:00Z[Europe/Berlin]', '+002025-07-01T00:00:00Z', '2025-07-01T00:00:00+01', '', 'now']) {
      expect(problemPaths(() => parseInstant(bad, 'range.from')), bad).toEqual(['range.from']);
    }
    expect(problemPaths(() => parseInstant('2025-07-01T00:00:00.5Z', 'range.to', { wholeSeconds: true }))).toEqual(['range.to']);
    expect(problemPaths(() => parseInstant(42 as unknown as string, 'deadline'))).toEqual(['deadline']);
  });

  it('parseEvery takes positive whole ISO-8601 durations', () => {
    for (const ok of ['PT15M', 'PT5H', 'P1D', 'P1W', 'P1M', 'P3M', 'P1Y', 'P2DT3H', 'PT1S', 'P1Y2M3W4DT5H6M7S', 'PT0H1M']) {
      expect(parseEvery(ok).sign, ok).toBe(1);
    }
    expect(parseEvery('P1M').months).toBe(1);
    for (const bad of ['PT0S', 'P0D', 'P0Y0M', '-P1D', '+P1D', 'PT1.5H', 'PT0.5S', 'PT0,5S', 'P', 'PT', 'P1DT', '1D', 'p1d', 'P1H', 'P1D2Y', '', 'P99999999999Y']) {
      expect(problemPaths(() => parseEvery(bad)), bad).toEqual(['partition.every']);
    }
    expect(problemPaths(() => parseEvery('PT0S', 'rollbackWindow'))).toEqual(['rollbackWindow']);
  });

  it('checkTimezone returns the zone id and refuses unknown zones and offsets', () => {
    expect(checkTimezone('UTC')).toBe('UTC');
    expect(checkTimezone('utc')).toBe('UTC');
    expect(checkTimezone('europe/berlin')).toBe('Europe/Berlin');
    expect(checkTimezone('Australia/Lord_Howe')).toBe('Australia/Lord_Howe');
    for (const bad of ['Mars/Olympus', '+01:00', '-05:00', '', 'Europe/Berlin ', '2020-01-01T00:00[Europe/Berlin]']) {
      expect(problemPaths(() => checkTimezone(bad)), bad).toEqual(['timezone']);
    }
  });

  it('partitionId is deterministic, kind-prefixed and free of ":"', () => {
    const t = Temporal.Instant.from('2025-07-01T00:00:00Z');
    expect(partitionId('build', t)).toBe('b-20250701T000000Z');
    expect(partitionId('carry', t)).toBe('c-20250701T000000Z');
    expect(partitionId('build', Temporal.Instant.from('2025-07-01T00:00:00.5Z'))).toBe('b-20250701T000000.5Z');
    expect(partitionId('build', Temporal.Instant.from('-000001-01-01T00:00:00Z'))).toBe('b--0000010101T000000Z');
    expect(partitionId('build', t)).not.toContain(':');
  });
});

describe('coverageProof re-derives from the list', () => {
  const spec: GridSpec = { from: '2025-07-01T00:00:00Z', to: '2025-07-11T00:00:00Z', timezone: 'UTC', every: 'P1D' };
  const grid = computeGrid(spec);

  it('normalises the spec it echoes', () => {
    const proof = coverageProof({ ...spec, from: '2025-07-01T02:00:00+02:00', timezone: 'utc' }, grid);
    expect(proof).toMatchObject({ from: '2025-07-01T00:00:00Z', to: '2025-07-11T00:00:00Z', timezone: 'UTC', every: 'P1D', contiguous: true, exactEnds: true });
  });

  it('detects a missing partition as a gap', () => {
    const proof = coverageProof(spec, grid.filter((_, i) => i !== 4));
    expect(proof).toMatchObject({ count: 9, contiguous: false, exactEnds: true, gaps: 1, overlaps: 0 });
    expect(coverageProof(spec, grid.slice(1, -1))).toMatchObject({ exactEnds: false, gaps: 2, contiguous: true });
    expect(coverageProof(spec, [])).toMatchObject({ count: 0, contiguous: false, exactEnds: false, gaps: 1, overlaps: 0 });
  });

  it('detects a stretched partition as an overlap and a `to` claimed twice', () => {
    const stretched = grid.map((p, i) => (i === 3 ? { ...p, upper: grid[5]!.lower } : p));
    expect(coverageProof(spec, stretched)).toMatchObject({ contiguous: false, overlaps: 1, gaps: 0 });
    const pastTo = [...grid.slice(0, -1), { ...grid.at(-1)!, upper: '2025-07-11T00:00:01Z' }];
    expect(coverageProof(spec, pastTo)).toMatchObject({ contiguous: true, exactEnds: false, gaps: 0 });
  });

  it('detects an unsorted list, an empty partition and a tampered boundary', () => {
    const swapped = [grid[1]!, grid[0]!, ...grid.slice(2)];
    expect(coverageProof(spec, swapped)).toMatchObject({ contiguous: false, gaps: 0, overlaps: 0 });
    const empty = [...grid.slice(0, 3), { ...grid[3]!, upper: grid[3]!.lower }, ...grid.slice(3)];
    expect(coverageProof(spec, empty).contiguous).toBe(false);
    const moved = grid.map((p, i) => (i === 2 ? { ...p, upper: '2025-07-03T12:00:00Z' } : i === 3 ? { ...p, lower: '2025-07-03T12:00:00Z' } : p));
    const proof = coverageProof(spec, moved);
    expect(proof).toMatchObject({ contiguous: true, exactEnds: true, gaps: 0, overlaps: 0 });
    expect(proof.boundariesSha256).not.toBe(coverageProof(spec, grid).boundariesSha256);
  });

  it('refuses a malformed boundary in the list, naming it', () => {
    const bad = grid.map((p, i) => (i === 2 ? { ...p, lower: '2025-07-03' } : p));
    expect(problemPaths(() => coverageProof(spec, bad))).toEqual(['partitions[2].lower']);
  });
});

// ---------------------------------------------------------------------------------------------
// Properties

const ZONES = ['UTC', 'Europe/Berlin', 'America/New_York', 'Australia/Lord_Howe', 'Asia/Kathmandu', 'America/Sao_Paulo'];
const EVERY = ['PT15M', 'PT5H', 'P1D', 'P1W', 'P1M', 'P3M', 'P1Y', 'P2DT3H'];
const NOMINAL_SECONDS: Record<string, number> = {
  PT15M: 900, PT5H: 18_000, P1D: 86_400, P1W: 604_800, P1M: 2_678_400, P3M: 7_948_800, P1Y: 31_622_400, P2DT3H: 183_600,
};
const MIN_SEC = Temporal.Instant.from('2000-01-01T00:00:00Z').epochMilliseconds / 1000;
const MAX_SEC = Temporal.Instant.from('2041-01-01T00:00:00Z').epochMilliseconds / 1000;

/** from + k·every by a route that does not call ZonedDateTime.add: PlainDateTime date math, 'compatible' resolution, then exact time. */
function expectedBoundary(from: Temporal.Instant, timezone: string, every: Temporal.Duration, k: number): Temporal.Instant {
  const datePart = { years: every.years * k, months: every.months * k, weeks: every.weeks * k, days: every.days * k };
  // With no date part nothing goes through wall-clock time (which would move `from` inside a repeated hour).
  const startOfTime = Object.values(datePart).every((v) => v === 0)
    ? from
    : from.toZonedDateTimeISO(timezone).toPlainDateTime().add(datePart).toZonedDateTime(timezone, { disambiguation: 'compatible' }).toInstant();
  const timeSeconds = (every.hours * 3600 + every.minutes * 60 + every.seconds) * k;
  return Temporal.Instant.fromEpochMilliseconds(startOfTime.epochMilliseconds + timeSeconds * 1000);
}

const specArb = fc
  .record({
    fromSec: fc.integer({ min: MIN_SEC, max: MAX_SEC }),
    timezone: fc.constantFrom(...ZONES),
    every: fc.constantFrom(...EVERY),
    // Either an arbitrary length (usually clipping the last partition) or exactly n steps.
    aligned: fc.boolean(),
    steps: fc.integer({ min: 1, max: 40 }),
    fraction: fc.double({ min: 0.0001, max: 1, noNaN: true }),
  })
  .map(({ fromSec, timezone, every, aligned, steps, fraction }): GridSpec => {
    const from = Temporal.Instant.fromEpochMilliseconds(fromSec * 1000);
    const to = aligned
      ? from.toZonedDateTimeISO(timezone).add(scaled(every, steps)).toInstant()
      : Temporal.Instant.fromEpochMilliseconds((fromSec + Math.max(1, Math.floor(fraction * steps * NOMINAL_SECONDS[every]!))) * 1000);
    return { from: from.toString(), to: to.toString(), timezone, every };
  });

function scaled(every: string, k: number): Temporal.Duration {
  const d = Temporal.Duration.from(every);
  return Temporal.Duration.from({ years: d.years * k, months: d.months * k, weeks: d.weeks * k, days: d.days * k, hours: d.hours * k, minutes: d.minutes * k, seconds: d.seconds * k });
}

describe('grid properties (fast-check)', () => {
  it('covers [from, to) exactly, boundaries are from + k·every, ids unique, locate agrees', () => {
    fc.assert(
      fc.property(specArb, (spec) => {
        const grid = computeGrid(spec);
        const proof = coverageProof(spec, grid);
        expect(proof).toMatchObject({ contiguous: true, exactEnds: true, gaps: 0, overlaps: 0, count: grid.length });
        expect(grid.length).toBeGreaterThan(0);

        const from = Temporal.Instant.from(spec.from);
        const every = Temporal.Duration.from(spec.every);
        const zFrom = from.toZonedDateTimeISO(spec.timezone);
        grid.forEach((p, k) => {
          expect(p.seq).toBe(k);
          expect(p.kind).toBe('build');
          expect(Temporal.Instant.compare(Temporal.Instant.from(p.lower), Temporal.Instant.from(p.upper))).toBe(-1);
          expect(p.lower).toBe(zFrom.add(scaled(spec.every, k)).toInstant().toString());
          expect(p.lower).toBe(expectedBoundary(from, spec.timezone, every, k).toString());
          expect(p.id).toBe(partitionId('build', Temporal.Instant.from(p.lower)));
          expect(p.id).not.toContain(':');
        });
        expect(grid[0]!.lower).toBe(spec.from);
        expect(grid.at(-1)!.upper).toBe(spec.to);
        expect(new Set(grid.map((p) => p.id)).size).toBe(grid.length);

        for (const p of grid) {
          expect(locate(grid, p.lower)).toBe(p);
          expect(locate(grid, Temporal.Instant.from(p.upper).subtract({ nanoseconds: 1 }).toString())).toBe(p);
        }
        expect(locate(grid, spec.to)).toBeUndefined();
        expect(locate(grid, from.subtract({ nanoseconds: 1 }).toString())).toBeUndefined();
      }),
      { numRuns: 300 },
    );
  });

  it('refuses from >= to and zero, negative or fractional durations with InvalidInputError', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: MIN_SEC, max: MAX_SEC }),
        fc.integer({ min: 0, max: 10 * 365 * 86_400 }),
        fc.constantFrom(...ZONES),
        fc.constantFrom(...EVERY),
        fc.constantFrom('PT0S', 'P0D', 'PT0M', 'P0Y0M', 'P0W', 'PT0H0M0S', '-P1D', '-PT15M', 'PT0.5S', 'P0.5D'),
        (fromSec, back, timezone, every, badEvery) => {
          const from = Temporal.Instant.fromEpochMilliseconds(fromSec * 1000).toString();
          const to = Temporal.Instant.fromEpochMilliseconds((fromSec - back) * 1000).toString();
          expect(problemPaths(() => computeGrid({ from, to, timezone, every }))).toEqual(['range']);
          const later = Temporal.Instant.fromEpochMilliseconds((fromSec + 86_400) * 1000).toString();
          expect(problemPaths(() => computeGrid({ from, to: later, timezone, every: badEvery }))).toEqual(['partition.every']);
        },
      ),
      { numRuns: 200 },
    );
  });
});
