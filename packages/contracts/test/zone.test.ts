import fc from 'fast-check';
import { Temporal } from 'temporal-polyfill';
import { describe, expect, it } from 'vitest';
import { InvalidInputError } from '../src/errors.ts';
import { computeGrid } from '../src/grid.ts';
import { ambiguousZoneProblem, checkRegionZone, wallClockBounds } from '../src/zone.ts';

function refusal(fn: () => unknown): { path: string; message: string } {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(InvalidInputError);
    const problems = (err as InvalidInputError).problems;
    expect(problems).toHaveLength(1);
    return problems[0]!;
  }
  throw new Error('expected an InvalidInputError');
}

describe('checkRegionZone', () => {
  it('refuses the zone names PostgreSQL reads as fixed abbreviations, naming a region zone instead', () => {
    const cases: [string, RegExp][] = [
      ['CET', /Europe\/Paris or Europe\/Berlin/],
      ['cet', /Europe\/Paris or Europe\/Berlin/],
      ['MET', /Europe\/Paris or Europe\/Berlin/],
      ['EET', /Europe\/Athens/],
      ['WET', /Europe\/Lisbon/],
      ['EST', /America\/New_York/],
      ['MST', /America\/Denver/],
      ['HST', /Pacific\/Honolulu/],
      ['EST5EDT', /America\/New_York/],
      ['CST6CDT', /America\/Chicago/],
      ['MST7MDT', /America\/Denver/],
      ['PST8PDT', /America\/Los_Angeles/],
      ['GMT', /use UTC$/],
      ['Zulu', /use UTC$/],
      ['UCT', /use UTC$/],
      ['Japan', /use Asia\/Tokyo$/],
    ];
    for (const [tz, suggestion] of cases) {
      const p = refusal(() => checkRegionZone(tz));
      expect(p.path, tz).toBe('timezone');
      expect(p.message, tz).toMatch(new RegExp(`^${tz} is not a region zone: PostgreSQL reads it as a time zone abbreviation`));
      expect(p.message, tz).toMatch(suggestion);
    }
  });

  it('keeps UTC, Area/Location zones and Etc/GMT±N, normalised', () => {
    expect(checkRegionZone('UTC')).toBe('UTC');
    expect(checkRegionZone('utc')).toBe('UTC');
    expect(checkRegionZone('europe/berlin')).toBe('Europe/Berlin');
    expect(checkRegionZone('Etc/UTC')).toBe('Etc/UTC');
    // POSIX sign inversion, read alike by Temporal and PostgreSQL (both use the tz database):
    // Etc/GMT-2 is two hours ahead of UTC.
    expect(checkRegionZone('Etc/GMT-2')).toBe('Etc/GMT-2');
    expect(wallClockBounds('2025-07-01T12:00:00Z', '2025-07-01T13:00:00Z', 'Etc/GMT-2').lower).toBe('2025-07-01T14:00:00');
    expect(checkRegionZone('America/Argentina/Buenos_Aires')).toBe('America/Argentina/Buenos_Aires');
  });

  it('still refuses unknown zones and offsets as unknown, not as abbreviations', () => {
    expect(refusal(() => checkRegionZone('Mars/Olympus')).message).toMatch(/not a known IANA time zone/);
    expect(refusal(() => checkRegionZone('+01:00')).message).toMatch(/fixed offset/);
  });

  it('words the database reading when it is known', () => {
    expect(ambiguousZoneProblem('CET', 'timezone', 'as the abbreviation CET, a fixed UTC+01:00:00 all year')).toEqual({
      path: 'timezone',
      message: expect.stringMatching(/^CET is not a region zone: PostgreSQL reads it as the abbreviation CET, a fixed UTC\+01:00:00 all year, .*use Europe\/Paris or Europe\/Berlin$/),
    });
  });
});

describe('wallClockBounds', () => {
  it('gives a Berlin summer day as local midnight to midnight (UTC+2)', () => {
    expect(wallClockBounds('2025-07-09T22:00:00Z', '2025-07-10T22:00:00Z', 'Europe/Berlin')).toEqual({
      lower: '2025-07-10T00:00:00',
      upper: '2025-07-11T00:00:00',
    });
  });

  it('gives a Berlin winter day as local midnight to midnight (UTC+1)', () => {
    expect(wallClockBounds('2025-01-14T23:00:00Z', '2025-01-15T23:00:00Z', 'Europe/Berlin')).toEqual({
      lower: '2025-01-15T00:00:00',
      upper: '2025-01-16T00:00:00',
    });
  });

  it('gives the 23-hour DST-gap day its two midnights, and an hour across the gap [01:00, 03:00)', () => {
    const [day] = computeGrid({ from: '2025-03-29T23:00:00Z', to: '2025-03-30T22:00:00Z', timezone: 'Europe/Berlin', every: 'P1D' });
    expect(wallClockBounds(day!.lower, day!.upper, 'Europe/Berlin')).toEqual({ lower: '2025-03-30T00:00:00', upper: '2025-03-31T00:00:00' });
    // 02:00–03:00 does not exist in Berlin that night: the hour from 00:00Z ends at 03:00 local.
    expect(wallClockBounds('2025-03-30T00:00:00Z', '2025-03-30T01:00:00Z', 'Europe/Berlin')).toEqual({
      lower: '2025-03-30T01:00:00',
      upper: '2025-03-30T03:00:00',
    });
  });

  it('reads CET as the tz database does (summer time), and agrees with Date inputs and fractions', () => {
    // What PostgreSQL's AT TIME ZONE 'CET' got wrong: 22:00Z in July is midnight, not 23:00.
    expect(wallClockBounds('2025-07-10T22:00:00Z', '2025-07-11T22:00:00Z', 'CET').lower).toBe('2025-07-11T00:00:00');
    expect(wallClockBounds(new Date('2025-07-09T22:00:00Z'), new Date('2025-07-10T22:00:00.5Z'), 'Europe/Berlin')).toEqual({
      lower: '2025-07-10T00:00:00',
      upper: '2025-07-11T00:00:00.5',
    });
    expect(wallClockBounds('2025-07-09T22:00:00.000000Z', '2025-07-10T22:00:00.000000Z', 'UTC').lower).toBe('2025-07-09T22:00:00');
  });

  it('matches Temporal for every boundary of a year of Berlin days', () => {
    const grid = computeGrid({ from: '2024-12-31T23:00:00Z', to: '2025-12-31T23:00:00Z', timezone: 'Europe/Berlin', every: 'P1D' });
    expect(grid).toHaveLength(365);
    for (const p of grid) {
      const w = wallClockBounds(p.lower, p.upper, 'Europe/Berlin');
      expect(w.lower.endsWith('T00:00:00'), p.id).toBe(true);
      expect(Temporal.PlainDateTime.from(w.upper).since(Temporal.PlainDateTime.from(w.lower)).total({ unit: 'hours' }), p.id).toBe(24);
    }
  });
});

describe('wallClockBounds agrees with Temporal', () => {
  const zones = ['Europe/Berlin', 'America/New_York', 'Australia/Lord_Howe', 'Pacific/Apia', 'Asia/Kathmandu', 'America/Santiago', 'UTC', 'Etc/GMT+5', 'Africa/Casablanca'];
  const reference = (ns: bigint, tz: string) => Temporal.Instant.fromEpochNanoseconds(ns).toZonedDateTimeISO(tz).toPlainDateTime().toString();

  it('for any instant and zone, in any order and from strings, Dates and fractions', () => {
    const instant = fc.bigInt({ min: -62_135_596_800n * 1_000_000_000n, max: 4_102_444_800n * 1_000_000_000n });
    fc.assert(
      fc.property(instant, instant, fc.constantFrom(...zones), fc.boolean(), (a, b, tz, whole) => {
        const [x, y] = whole ? [a - (a % 1_000_000_000n), b - (b % 1_000_000_000n)] : [a, b];
        const w = wallClockBounds(Temporal.Instant.fromEpochNanoseconds(x).toString(), Temporal.Instant.fromEpochNanoseconds(y).toString(), tz);
        expect(w).toEqual({ lower: reference(x, tz), upper: reference(y, tz) });
        const ms = x / 1_000_000n;
        expect(wallClockBounds(new Date(Number(ms)), new Date(Number(ms)), tz).lower).toBe(reference(ms * 1_000_000n, tz));
      }),
      { numRuns: 1000 },
    );
  });

  it('across the transitions of a sorted grid, as a reconciler converts it', () => {
    for (const tz of zones) {
      const grid = computeGrid({ from: '2025-01-01T00:00:00Z', to: '2026-01-01T00:00:00Z', timezone: tz, every: 'PT5H' });
      for (const p of grid) {
        const w = wallClockBounds(p.lower, p.upper, tz);
        expect(w.lower, `${tz} ${p.lower}`).toBe(reference(Temporal.Instant.from(p.lower).epochNanoseconds, tz));
      }
    }
  });

  it('outside the years 0000–9999', () => {
    const bc = new Date(Date.UTC(-1, 6, 1));
    expect(wallClockBounds(bc, bc, 'Europe/Berlin').lower).toBe(reference(BigInt(bc.getTime()) * 1_000_000n, 'Europe/Berlin'));
    expect(wallClockBounds(bc, bc, 'Europe/Berlin').lower).toMatch(/^-000001-07-01T00:53:28$/);
  });

  it('refuses text that is not an instant, as the grid does', () => {
    for (const bad of ['2025-02-30T00:00:00Z', '2025-07-01T24:00:00Z', '2025-07-01T00:00:60Z', '2025-07-01T00:00:00']) {
      expect(() => wallClockBounds(bad, '2025-07-02T00:00:00Z', 'UTC'), bad).toThrow(InvalidInputError);
    }
  });
});
