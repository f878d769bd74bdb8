// One grammar for every duration genfill reads, from the environment and from the command line
// alike: a number (fractions allowed) and a unit — ms, s, m (minutes; `min`, PostgreSQL's
// spelling, means the same), h or d. `2m` is two minutes wherever a duration is read; before,
// three parsers disagreed (the PostgreSQL timeouts refused `2m`, `--max-freeze` refused `2h`).
//
// A bare number keeps the unit its setting has always documented, named by each caller as
// `bareUnit`: milliseconds for a PostgreSQL timeout (as the server reads it), seconds for
// `--max-freeze`. A setting that never took a bare number (the retention settings, where `7`
// could mean anything) passes null and still refuses one.
import { z } from 'zod';

export type DurationUnit = 'ms' | 's' | 'm' | 'h' | 'd';

const UNIT_MS: Record<DurationUnit | 'min', number> = { ms: 1, s: 1000, m: 60_000, min: 60_000, h: 3_600_000, d: 86_400_000 };
const UNIT_NAMES: Record<DurationUnit, string> = { ms: 'milliseconds', s: 'seconds', m: 'minutes', h: 'hours', d: 'days' };
const GRAMMAR = /^(\d+(?:\.\d+)?|\.\d+)\s*(ms|s|min|m|h|d)?$/;

/** The grammar in words, for --help and the docs. */
export const DURATION_GRAMMAR = 'a number and a unit ms, s, m (minutes, also min), h or d, e.g. 500ms, 30s, 2m, 24h';

/** What a bare number means for a setting: `a bare number is seconds`, or that it needs a unit. */
export function bareNumberMeans(bareUnit: DurationUnit | null): string {
  return bareUnit === null ? 'a bare number needs a unit' : `a bare number is ${UNIT_NAMES[bareUnit]}`;
}

/** The accepted forms, for an error message: the grammar and what a bare number means here. */
export function durationForms(bareUnit: DurationUnit | null): string {
  return `a duration: ${DURATION_GRAMMAR}; ${bareNumberMeans(bareUnit)}`;
}

export interface DurationBounds {
  /** Milliseconds; default 0 (zero is allowed: PostgreSQL reads a 0 timeout as none). */
  min?: number;
  /** Refuse min itself: a duration that must be longer than 0. */
  exclusiveMin?: boolean;
  /** Milliseconds, inclusive. */
  max?: number;
}

/** A text that is no duration, or one outside its setting's bounds; `problem` says which forms or bounds hold. */
export class InvalidDurationError extends Error {
  constructor(
    readonly text: string,
    readonly problem: string,
  ) {
    super(`${problem}; got '${text}'`);
    this.name = 'InvalidDurationError';
  }
}

/**
 * `text` in whole milliseconds (finer fractions are rounded). Throws InvalidDurationError for
 * anything else — a negative number, another unit, a bare number where `bareUnit` is null, a
 * value too large to count in milliseconds, a value outside `bounds` — its problem listing the
 * accepted forms or the bound.
 */
export function parseDuration(text: string, bareUnit: DurationUnit | null, bounds: DurationBounds = {}): number {
  const m = GRAMMAR.exec(text.trim());
  const unit = (m?.[2] ?? bareUnit) as DurationUnit | 'min' | null;
  const ms = m && unit !== null ? Math.round(Number(m[1]) * UNIT_MS[unit]) : NaN;
  if (!Number.isSafeInteger(ms)) throw new InvalidDurationError(text, `must be ${durationForms(bareUnit)}`);
  const min = bounds.min ?? 0;
  if (bounds.exclusiveMin ? ms <= min : ms < min) {
    throw new InvalidDurationError(text, bounds.exclusiveMin ? `must be longer than ${min === 0 ? '0' : durationLiteral(min)}` : `must be at least ${durationLiteral(min)}`);
  }
  if (bounds.max !== undefined && ms > bounds.max) throw new InvalidDurationError(text, `must be at most ${durationLiteral(bounds.max)}`);
  return ms;
}

/** Milliseconds written in the grammar with the largest unit that divides them: 30000 → `30s`, 120000 → `2m`. */
export function durationLiteral(ms: number): string {
  for (const unit of ['d', 'h', 'm', 's'] as const) {
    if (ms !== 0 && ms % UNIT_MS[unit] === 0) return `${ms / UNIT_MS[unit]}${unit}`;
  }
  return `${ms}ms`;
}

/**
 * A duration in the environment, as configSchema reads it: milliseconds, or whole seconds with
 * `in: 's'` for the settings whose consumers count seconds (a value that is not a whole number
 * of seconds is refused rather than rounded).
 */
export function durationSetting(o: { bareUnit: DurationUnit | null; in?: 'ms' | 's' } & DurationBounds) {
  const divisor = o.in === 's' ? 1000 : 1;
  return z.string().transform((text, ctx): number => {
    try {
      const ms = parseDuration(text, o.bareUnit, o);
      if (ms % divisor === 0) return ms / divisor;
      ctx.addIssue({ code: 'custom', message: 'must be a whole number of seconds' });
    } catch (err) {
      if (!(err instanceof InvalidDurationError)) throw err;
      ctx.addIssue({ code: 'custom', message: err.problem });
    }
    return z.NEVER;
  });
}
