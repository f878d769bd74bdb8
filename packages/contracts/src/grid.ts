// The partition grid of a release (SPEC "Release" → "Grid", invariant 1 "Coverage").
// Boundaries are from + k·every, each computed afresh from `from` with Temporal's
// ZonedDateTime.add: cumulative additions would drift (31 Jan + P1M + P1M is 28 Mar, not 31 Mar).

import { createHash } from 'node:crypto';
import { Temporal } from 'temporal-polyfill';
import { InvalidInputError, type Problem } from './errors.ts';

export interface GridSpec {
  from: string;
  to: string;
  timezone: string;
  every: string;
}
export type PartitionKind = 'build' | 'carry';
export interface GridPartition {
  /** k in `lower = from + k·every` (0-based). */
  seq: number;
  id: string;
  kind: PartitionKind;
  lower: string;
  upper: string;
}
export interface CoverageProof {
  from: string;
  to: string;
  timezone: string;
  every: string;
  count: number;
  contiguous: boolean;
  exactEnds: boolean;
  overlaps: number;
  gaps: number;
  boundariesSha256: string;
}

/**
 * The stored bounds of the carry chunks that are unbounded below and above (invariant 2): a
 * copy does not compare them, so a row of any time is carried.
 */
export const CARRY_MIN = '0001-01-01T00:00:00Z';
export const CARRY_MAX = '9999-12-31T00:00:00Z';
export function isCarryMin(d: Date): boolean {
  return d.getTime() === Date.parse(CARRY_MIN);
}
export function isCarryMax(d: Date): boolean {
  return d.getTime() === Date.parse(CARRY_MAX);
}

/** A manifest larger than this is a mistake in `partition.every` or `range`, not a plan. */
export const MAX_PARTITIONS = 200_000;

// Strict RFC 3339: Temporal alone would also take bracketed annotations, expanded years and
// sub-minute offsets, and would silently turn a leap second :60 into :59.
const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;
const DURATION = /^P(?!$)(\d+Y)?(\d+M)?(\d+W)?(\d+D)?(T(?=\d)(\d+H)?(\d+M)?(\d+S)?)?$/;

function invalid(path: string, message: string): never {
  throw new InvalidInputError([{ path, message }]);
}

export function parseInstant(value: string, path: string, options: { wholeSeconds?: boolean } = {}): Temporal.Instant {
  if (typeof value !== 'string') invalid(path, `expected an RFC 3339 timestamp string, got ${typeof value}`);
  const m = RFC3339.exec(value);
  if (!m) {
    return invalid(path, `${JSON.stringify(value)} is not an RFC 3339 timestamp with an offset, like 2025-07-01T00:00:00Z or 2025-07-01T02:00:00+02:00`);
  }
  if (Number(m[6]) > 59) invalid(path, `${value}: leap seconds are not representable; use :59 or the next minute`);
  if ((m[7]?.length ?? 0) > 10) invalid(path, `${value}: at most nanosecond precision (9 fractional digits)`);
  let instant: Temporal.Instant;
  try {
    instant = Temporal.Instant.from(value.replace(' ', 'T'));
  } catch (err) {
    return invalid(path, `${value} is not a valid instant: ${(err as Error).message}`);
  }
  // Range ends become partition bounds, ids and timestamptz values (microseconds): a
  // sub-second end is a typo, and nanoseconds would not survive the database.
  if (options.wholeSeconds && instant.epochNanoseconds % 1_000_000_000n !== 0n) {
    invalid(path, `${value}: must be a whole second (no fractional seconds)`);
  }
  return instant;
}

export function parseEvery(value: string, path = 'partition.every'): Temporal.Duration {
  if (typeof value !== 'string') invalid(path, `expected an ISO-8601 duration string, got ${typeof value}`);
  if (/^\s*[-+\u2212]/.test(value)) invalid(path, `${value}: the duration must be positive (no sign)`);
  if (/[.,]/.test(value)) invalid(path, `${value}: fractional components are not allowed; use a smaller unit (PT90M, not PT1.5H)`);
  if (!DURATION.test(value)) invalid(path, `${JSON.stringify(value)} is not an ISO-8601 duration like PT15M, PT5H, P1D, P1W, P1M or P2DT3H`);
  let d: Temporal.Duration;
  try {
    d = Temporal.Duration.from(value);
  } catch (err) {
    return invalid(path, `${value} is not a valid duration: ${(err as Error).message}`);
  }
  if (d.sign === 0) invalid(path, `${value} is zero; a partition needs a positive length`);
  const parts = [d.years, d.months, d.weeks, d.days, d.hours, d.minutes, d.seconds, d.milliseconds, d.microseconds, d.nanoseconds];
  if (parts.some((p) => p < 0)) invalid(path, `${value}: every component must be positive`);
  if (parts.some((p) => !Number.isInteger(p))) invalid(path, `${value}: fractional components are not allowed`);
  if (parts.slice(0, 7).every((p) => p === 0)) invalid(path, `${value}: a sub-second duration is not a partition length`);
  return d;
}

export function checkTimezone(tz: string, path = 'timezone'): string {
  if (typeof tz !== 'string' || tz.trim() === '') invalid(path, 'expected an IANA time zone name such as UTC or Europe/Berlin');
  // Temporal also accepts fixed offsets ('+01:00'); the spec asks for a named zone.
  if (/^[-+\u2212]/.test(tz)) invalid(path, `${tz}: a fixed offset is not an IANA zone; use UTC or a zone such as Etc/GMT-1`);
  try {
    // Temporal normalises case ('europe/berlin' → 'Europe/Berlin') and keeps links as written.
    return new Temporal.ZonedDateTime(0n, tz).timeZoneId;
  } catch {
    return invalid(path, `${tz} is not a known IANA time zone`);
  }
}

/** UTC, like 2025-07-01T00:00:00Z (fraction only when non-zero). */
function formatInstant(i: Temporal.Instant): string {
  // Temporal's toString costs ~8 µs; a 200k-partition grid formats every boundary twice.
  if (i.epochNanoseconds % 1_000_000_000n === 0n) return new Date(i.epochMilliseconds).toISOString().replace('.000Z', 'Z');
  return i.toString();
}

export function partitionId(kind: PartitionKind, lower: Temporal.Instant): string {
  return idOf(kind, formatInstant(lower));
}

function idOf(kind: PartitionKind, iso: string): string {
  if (kind !== 'build' && kind !== 'carry') throw new InvalidInputError([{ path: 'kind', message: `unknown partition kind ${String(kind)}` }]);
  // ISO basic format: BullMQ reserves ':' in job ids; an expanded year keeps its sign.
  const sign = iso[0] === '+' || iso[0] === '-' ? iso[0] : '';
  return `${kind === 'build' ? 'b' : 'c'}-${sign}${iso.slice(sign.length).replace(/[-:]/g, '')}`;
}

interface ParsedSpec {
  from: Temporal.Instant;
  to: Temporal.Instant;
  timeZone: string;
  every: Temporal.Duration;
}

/** Validates every field and reports all problems at once (`release validate` prints each). */
function parseSpec(spec: GridSpec): ParsedSpec {
  const problems: Problem[] = [];
  const attempt = <T>(fn: () => T): T | undefined => {
    try {
      return fn();
    } catch (err) {
      if (!(err instanceof InvalidInputError)) throw err;
      problems.push(...err.problems);
      return undefined;
    }
  };
  const from = attempt(() => parseInstant(spec.from, 'range.from', { wholeSeconds: true }));
  const to = attempt(() => parseInstant(spec.to, 'range.to', { wholeSeconds: true }));
  const timeZone = attempt(() => checkTimezone(spec.timezone, 'timezone'));
  const every = attempt(() => parseEvery(spec.every, 'partition.every'));
  if (from && to && Temporal.Instant.compare(from, to) >= 0) {
    problems.push({ path: 'range', message: `from (${spec.from}) must be before to (${spec.to}); the range is half-open [from, to)` });
  }
  if (problems.length > 0 || !from || !to || !timeZone || !every) throw new InvalidInputError(problems);
  return { from, to, timeZone, every };
}

function scale(d: Temporal.Duration, k: number): Temporal.Duration {
  return Temporal.Duration.from({
    years: d.years * k,
    months: d.months * k,
    weeks: d.weeks * k,
    days: d.days * k,
    hours: d.hours * k,
    minutes: d.minutes * k,
    seconds: d.seconds * k,
  });
}

/** The time components of `every` as exact seconds (parseEvery admits no sub-second part). */
function exactSeconds(every: Temporal.Duration): number {
  return every.hours * 3600 + every.minutes * 60 + every.seconds;
}

/** from, from + 1·every, …, the last one below `to`, then `to` itself (epoch nanoseconds). */
function gridBoundaries({ from, to, timeZone, every }: ParsedSpec): bigint[] {
  const tooMany = (what: string): InvalidInputError =>
    new InvalidInputError([
      {
        path: 'partition.every',
        message: `${every.toString()} over [${from.toString()}, ${to.toString()}) would make ${what} partitions; at most ${MAX_PARTITIONS} are allowed — choose a longer partition.every or a shorter range`,
      },
    ]);
  const start = from.toZonedDateTimeISO(timeZone);
  const end = to.epochNanoseconds;
  try {
    // Estimate first so an absurd grid is refused without computing 200k boundaries.
    const spanSeconds = Number((end - from.epochNanoseconds) / 1_000_000_000n);
    const estimate = Math.ceil(spanSeconds / every.total({ unit: 'seconds', relativeTo: start }));
    if (estimate > MAX_PARTITIONS) throw tooMany(`about ${estimate}`);

    const out: bigint[] = [from.epochNanoseconds];
    // Time components only: ZonedDateTime.add is exact elapsed time then, whatever the zone, so
    // from + k·every is arithmetic on the epoch (a tenth of the cost of add() per boundary).
    const exact = every.years === 0 && every.months === 0 && every.weeks === 0 && every.days === 0;
    const step = BigInt(exactSeconds(every)) * 1_000_000_000n;
    for (let k = 1; ; k++) {
      const next = exact ? out[0]! + BigInt(k) * step : start.add(scale(every, k)).epochNanoseconds;
      const prev = out[out.length - 1]!;
      // Possible when a zone skips a whole local day (Pacific/Apia, 30 Dec 2011): two k land on one instant.
      if (next <= prev) {
        throw new InvalidInputError([
          {
            path: 'partition.every',
            message: `boundaries are not strictly increasing in ${timeZone}: from + ${k}·${every.toString()} is ${Temporal.Instant.fromEpochNanoseconds(next).toString()}, not after ${Temporal.Instant.fromEpochNanoseconds(prev).toString()} (a time zone transition swallows a partition); choose another partition.every, timezone or range`,
          },
        ]);
      }
      if (next >= end) {
        out.push(end);
        return out;
      }
      if (out.length >= MAX_PARTITIONS) throw tooMany(`more than ${MAX_PARTITIONS}`);
      out.push(next);
    }
  } catch (err) {
    if (err instanceof RangeError) {
      throw new InvalidInputError([
        { path: 'partition.every', message: `from + k·${every.toString()} leaves the representable date range (${err.message})` },
      ]);
    }
    throw err;
  }
}

/** formatInstant of epoch nanoseconds. */
function formatNs(ns: bigint): string {
  if (ns % 1_000_000_000n === 0n) return new Date(Number(ns / 1_000_000n)).toISOString().replace('.000Z', 'Z');
  return Temporal.Instant.fromEpochNanoseconds(ns).toString();
}

export function computeGrid(spec: GridSpec): GridPartition[] {
  const b = gridBoundaries(parseSpec(spec)).map(formatNs);
  const partitions: GridPartition[] = [];
  for (let i = 0; i + 1 < b.length; i++) {
    partitions.push({ seq: i, id: idOf('build', b[i]!), kind: 'build', lower: b[i]!, upper: b[i + 1]! });
  }
  return partitions;
}

/** The sha256 of a grid's boundaries as coverageProof hashes them: each lower, then the last upper. */
function boundariesSha256(boundaries: string[]): string {
  return createHash('sha256').update(boundaries.join('\n')).digest('hex');
}

/**
 * One step of the grid as a database computes it (registry `insertGrid`): whole months (years
 * included) and whole days (weeks included) added to the wall clock of `from` in the zone,
 * then exact seconds.
 */
export interface GridSteps {
  months: number;
  days: number;
  seconds: number;
}

/**
 * What plan needs from the reference grid without building it: the coverage proof of
 * computeGrid(spec) (equal to coverageProof(spec, computeGrid(spec))) and the steps from
 * which a database recomputes the same boundaries; the database's grid must hash the same.
 */
export function plannedGrid(spec: GridSpec): { proof: CoverageProof; steps: GridSteps } {
  const parsed = parseSpec(spec);
  const b = gridBoundaries(parsed).map(formatNs);
  const { every } = parsed;
  return {
    proof: {
      from: formatInstant(parsed.from),
      to: formatInstant(parsed.to),
      timezone: parsed.timeZone,
      every: every.toString(),
      count: b.length - 1,
      contiguous: true,
      exactEnds: true,
      overlaps: 0,
      gaps: 0,
      boundariesSha256: boundariesSha256(b),
    },
    steps: { months: every.years * 12 + every.months, days: every.weeks * 7 + every.days, seconds: exactSeconds(every) },
  };
}

/**
 * Re-derives coverage from `partitions` alone (a manifest read back from the registry, say),
 * so it proves what is stored rather than what computeGrid meant to produce.
 * gaps: maximal uncovered stretches of [from, to), ends included. overlaps: partitions that
 * start before an earlier-starting one ends. The hash covers each lower (in the given order)
 * and the last upper, normalised to UTC — for a contiguous list, exactly its boundaries.
 */
export function coverageProof(spec: GridSpec, partitions: GridPartition[]): CoverageProof {
  const { from, to, timeZone, every } = parseSpec(spec);
  const parsed = partitions.map((p, i) => ({
    lower: parseInstant(p.lower, `partitions[${i}].lower`),
    upper: parseInstant(p.upper, `partitions[${i}].upper`),
  }));
  const cmp = Temporal.Instant.compare;

  let contiguous = parsed.length > 0;
  for (let i = 0; i < parsed.length; i++) {
    const p = parsed[i]!;
    if (cmp(p.lower, p.upper) >= 0) contiguous = false;
    const next = parsed[i + 1];
    if (next && !next.lower.equals(p.upper)) contiguous = false;
  }
  const first = parsed[0];
  const last = parsed[parsed.length - 1];
  const exactEnds = !!first && !!last && first.lower.equals(from) && last.upper.equals(to);

  const sorted = [...parsed].sort((a, b) => cmp(a.lower, b.lower) || cmp(a.upper, b.upper));
  let gaps = 0;
  let overlaps = 0;
  let reach: Temporal.Instant | undefined;
  for (const p of sorted) {
    if (reach && cmp(p.lower, reach) < 0) overlaps++;
    const coveredTo = reach && cmp(reach, from) > 0 ? reach : from;
    const holeEnd = cmp(p.lower, to) < 0 ? p.lower : to;
    if (cmp(coveredTo, holeEnd) < 0) gaps++;
    if (!reach || cmp(p.upper, reach) > 0) reach = p.upper;
  }
  if (cmp(reach && cmp(reach, from) > 0 ? reach : from, to) < 0) gaps++;

  const boundaries = parsed.map((p) => formatInstant(p.lower));
  if (last) boundaries.push(formatInstant(last.upper));
  return {
    from: formatInstant(from),
    to: formatInstant(to),
    timezone: timeZone,
    every: every.toString(),
    count: partitions.length,
    contiguous,
    exactEnds,
    overlaps,
    gaps,
    boundariesSha256: boundariesSha256(boundaries),
  };
}

// Parsed bounds per partition object, re-parsed if its strings change: locate is called per
// row, and parsing every probe would dominate.
const boundsCache = new WeakMap<GridPartition, { lower: string; upper: string; lo: bigint; hi: bigint }>();
function bounds(p: GridPartition, i: number): { lo: bigint; hi: bigint } {
  const hit = boundsCache.get(p);
  if (hit && hit.lower === p.lower && hit.upper === p.upper) return hit;
  const entry = {
    lower: p.lower,
    upper: p.upper,
    lo: parseInstant(p.lower, `partitions[${i}].lower`).epochNanoseconds,
    hi: parseInstant(p.upper, `partitions[${i}].upper`).epochNanoseconds,
  };
  boundsCache.set(p, entry);
  return entry;
}

/** The partition whose half-open [lower, upper) holds `instant`; the list must be sorted by lower and not overlap. */
export function locate(partitions: GridPartition[], instant: string): GridPartition | undefined {
  const t = parseInstant(instant, 'instant').epochNanoseconds;
  // Last partition with lower <= t.
  let lo = 0;
  let hi = partitions.length - 1;
  let found = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >>> 1;
    if (bounds(partitions[mid]!, mid).lo <= t) {
      found = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  if (found < 0) return undefined;
  const p = partitions[found]!;
  return t < bounds(p, found).hi ? p : undefined;
}
