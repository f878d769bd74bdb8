import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { durationLiteral, type DurationUnit, InvalidDurationError, parseDuration } from '../src/index.ts';

const MS: Record<DurationUnit, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const unit = fc.constantFrom<DurationUnit>('ms', 's', 'm', 'h', 'd');
const bareUnit = fc.constantFrom<DurationUnit | null>('ms', 's', 'm', 'h', 'd', null);

function problem(text: string, bare: DurationUnit | null, bounds = {}): string {
  try {
    parseDuration(text, bare, bounds);
  } catch (err) {
    expect(err).toBeInstanceOf(InvalidDurationError);
    return (err as InvalidDurationError).message;
  }
  throw new Error(`${text} parsed`);
}

describe('the duration grammar', () => {
  it('reads a whole number with any unit as that many units, whatever a bare number would mean', () => {
    fc.assert(
      fc.property(fc.nat(100_000), unit, bareUnit, (n, u, bare) => {
        expect(parseDuration(`${n}${u}`, bare)).toBe(n * MS[u]);
        expect(parseDuration(` ${n} ${u} `, bare)).toBe(n * MS[u]);
      }),
    );
  });

  it('reads min as m, so the PostgreSQL spelling of existing settings keeps working', () => {
    fc.assert(fc.property(fc.nat(100_000), bareUnit, (n, bare) => {
      expect(parseDuration(`${n}min`, bare)).toBe(parseDuration(`${n}m`, bare));
    }));;
    expect(parseDuration('2m', 'ms')).toBe(120_000);
    expect(parseDuration('5min', null)).toBe(300_000);
  });

  it('reads a bare number in the unit its setting names, and refuses it where the setting names none', () => {
    fc.assert(fc.property(fc.nat(100_000), unit, (n, u) => {
      expect(parseDuration(String(n), u)).toBe(n * MS[u]);
    }));
    expect(problem('7', null)).toMatch(/a bare number needs a unit; got '7'$/);
  });

  it('takes fractions and rounds them to whole milliseconds', () => {
    expect(parseDuration('1.5s', null)).toBe(1500);
    expect(parseDuration('0.25m', null)).toBe(15_000);
    expect(parseDuration('.5', 's')).toBe(500);
    expect(parseDuration('2.4ms', null)).toBe(2);
  });

  it('writes milliseconds back in the grammar with the largest whole unit, and reads them back the same', () => {
    expect([0, 250, 30_000, 120_000, 90_000, 3_600_000, 7 * 86_400_000].map(durationLiteral)).toEqual(['0ms', '250ms', '30s', '2m', '90s', '1h', '7d']);
    fc.assert(fc.property(fc.nat(Number.MAX_SAFE_INTEGER), (ms) => {
      expect(parseDuration(durationLiteral(ms), null)).toBe(ms);
    }));
  });

  it('refuses anything else, saying which forms it accepts', () => {
    for (const text of ['', 's', '-1s', '1x', '1 2s', '1e3', '0x10', 'Infinity', '30S', '1.s', '7 days', `${'9'.repeat(20)}d`]) {
      expect(problem(text, 's')).toBe(
        `must be a duration: a number and a unit ms, s, m (minutes, also min), h or d, e.g. 500ms, 30s, 2m, 24h; a bare number is seconds; got '${text}'`,
      );
    }
  });

  it('either returns whole milliseconds or throws InvalidDurationError, for any text', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.stringMatching(/^\s?[\d.]{0,6}\s?(ms|s|min|m|h|d|x)?\s?$/)), bareUnit, (text, bare) => {
        let ms: number;
        try {
          ms = parseDuration(text, bare);
        } catch (err) {
          expect(err).toBeInstanceOf(InvalidDurationError);
          return;
        }
        expect(Number.isSafeInteger(ms) && ms >= 0).toBe(true);
      }),
    );
  });

  it('holds a setting to its bounds, naming them in the grammar', () => {
    expect(problem('0s', 's', { exclusiveMin: true })).toBe("must be longer than 0; got '0s'");
    expect(problem('5', 'ms', { min: 10, max: 60_000 })).toBe("must be at least 10ms; got '5'");
    expect(problem('25h', null, { max: 86_400_000 })).toBe("must be at most 1d; got '25h'");
    expect(parseDuration('0', 'ms')).toBe(0);
    expect(parseDuration('24h', null, { max: 86_400_000 })).toBe(86_400_000);
  });
});
