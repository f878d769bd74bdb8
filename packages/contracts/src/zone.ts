// The release's timezone as PostgreSQL and genfill must both read it (SPEC "Release" → "Grid").
//
// Why zone names are refused that Temporal accepts: PostgreSQL looks a zone name up as a time
// zone abbreviation first (pg_timezone_abbrevs, case-insensitively) and only then as an IANA
// zone. `CET`, `MET`, `EET`, `WET`, `EST`, … are both: Temporal applies the IANA zone's rules
// (CET has summer time), PostgreSQL's `AT TIME ZONE 'CET'` the fixed abbreviation (+01:00 all
// year). So the release accepts UTC and Area/Location zones only; no abbreviation contains a
// '/', and PostgreSQL and Temporal read those names, Etc/GMT±N included, from the same tz
// database (checked against PostgreSQL 15: Etc/GMT-2 is +02:00 in both).
//
// Why wall clocks are bound rather than converted in SQL: a zone-less `timestamp`/`date`
// column holds wall-clock times of the release's timezone. Converting each bound in
// TypeScript with Temporal (the same arithmetic that made the grid) and binding a `timestamp`
// means PostgreSQL never interprets the zone name at all — not even one a later tz database
// or a custom `timezone_abbreviations` setting reads differently.
import { Temporal } from 'temporal-polyfill';
import { InvalidInputError, type Problem } from './errors.ts';
import { checkTimezone, parseInstant } from './grid.ts';

/** Region zones to name instead of the legacy zones PostgreSQL also knows as abbreviations. */
const SUGGESTIONS: Record<string, string> = {
  CET: 'Europe/Paris or Europe/Berlin',
  MET: 'Europe/Paris or Europe/Berlin',
  EET: 'Europe/Athens or Europe/Helsinki',
  WET: 'Europe/Lisbon',
  EST: 'America/New_York (America/Panama for no summer time)',
  MST: 'America/Denver (America/Phoenix for no summer time)',
  HST: 'Pacific/Honolulu',
  EST5EDT: 'America/New_York',
  CST6CDT: 'America/Chicago',
  MST7MDT: 'America/Denver',
  PST8PDT: 'America/Los_Angeles',
};

function suggestion(tz: string): string {
  const known = SUGGESTIONS[tz.toUpperCase()];
  if (known) return known;
  let canonical = '';
  try {
    // ICU knows where a legacy link points (Japan → Asia/Tokyo, Zulu → UTC).
    canonical = new Intl.DateTimeFormat('en', { timeZone: tz }).resolvedOptions().timeZone;
  } catch {
    // Not a zone ICU knows: the generic advice below.
  }
  if (canonical === 'UTC' || canonical.includes('/')) return canonical;
  return 'a region zone such as Europe/Berlin';
}

/**
 * The refusal of a zone name PostgreSQL would read otherwise, naming the zone to use instead.
 * `reading`: how PostgreSQL reads it, when known (from pg_timezone_abbrevs).
 */
export function ambiguousZoneProblem(tz: string, path = 'timezone', reading?: string): Problem {
  return {
    path,
    message:
      `${tz} is not a region zone: PostgreSQL reads it ${reading ?? 'as a time zone abbreviation with a fixed offset'}, ` +
      `while the grid applies the zone's rules (summer time), so zone-less times would shift; use ${suggestion(tz)}`,
  };
}

/**
 * A release's timezone: an IANA zone (checkTimezone) that is UTC or an Area/Location zone.
 * Returns the normalised id. The database adds pg_timezone_abbrevs at admission.
 */
export function checkRegionZone(tz: string, path = 'timezone'): string {
  const id = checkTimezone(tz, path);
  if (id === 'UTC' || id.includes('/')) return id;
  throw new InvalidInputError([ambiguousZoneProblem(tz, path)]);
}

export interface WallClockBounds {
  /** A `timestamp` literal, like 2025-07-01T00:00:00 (a fraction only when non-zero). */
  lower: string;
  upper: string;
}

// An offset looked up through Temporal costs ~25 µs (the polyfill asks Intl), and a reconciler
// or row estimate converts every boundary of a grid of up to 200 000 partitions. Offsets
// change a few times a year, so each zone remembers the last offset it found and until when
// it holds (the next transition): sorted boundaries almost always hit it. Offsets and
// transitions are whole seconds, so milliseconds carry them exactly.
const spans = new Map<string, { from: number; to: number; offsetMs: number }>();

function offsetMsAt(ms: number, timezone: string): number {
  const hit = spans.get(timezone);
  if (hit && hit.from <= ms && ms < hit.to) return hit.offsetMs;
  const zdt = Temporal.Instant.fromEpochMilliseconds(ms).toZonedDateTimeISO(timezone);
  const offsetMs = zdt.offsetNanoseconds / 1e6;
  spans.set(timezone, { from: ms, to: zdt.getTimeZoneTransition('next')?.epochMilliseconds ?? Infinity, offsetMs });
  return offsetMs;
}

/** The UTC form the registry's queries return (whole seconds, then up to 9 fraction digits). */
const UTC_SECONDS = /^(\d{4}-\d{2}-(\d{2})T(\d{2}):\d{2}:\d{2})(?:\.(\d{1,9}))?Z$/;

function viaTemporal(instant: string | Date, timezone: string, path: string): string {
  const i = instant instanceof Date ? Temporal.Instant.fromEpochMilliseconds(instant.getTime()) : parseInstant(instant, path);
  return i.toZonedDateTimeISO(timezone).toPlainDateTime().toString();
}

/** The wall clock of an instant in a zone, as Temporal.PlainDateTime#toString writes it. */
function wallClock(instant: string | Date, timezone: string, path: string): string {
  // Whole seconds as epoch milliseconds, and the fraction's digits (kept as text: a
  // microsecond bound must not round through a double).
  let seconds: number;
  let fraction: string;
  if (instant instanceof Date) {
    const ms = instant.getTime();
    seconds = Math.floor(ms / 1000) * 1000;
    fraction = String(ms - seconds).padStart(3, '0');
  } else {
    const m = UTC_SECONDS.exec(instant);
    seconds = m ? Date.parse(`${m[1]}Z`) : NaN;
    // Date.parse rolls 02-30 over into March and reads 24:00 as the next day: check the day and hour.
    const d = new Date(seconds);
    // Any other form an instant may take (an offset, a bad date): Temporal all the way.
    if (!m || Number.isNaN(seconds) || d.getUTCDate() !== Number(m[2]) || d.getUTCHours() !== Number(m[3])) return viaTemporal(instant, timezone, path);
    fraction = m[4] ?? '';
  }
  const wall = new Date(seconds + offsetMsAt(seconds, timezone));
  const year = wall.getUTCFullYear();
  // Outside 0000–9999 toISOString writes an expanded year: Temporal decides the form there.
  if (Number.isNaN(year) || year < 0 || year > 9999) return viaTemporal(instant, timezone, path);
  const text = wall.toISOString().slice(0, 19);
  return /[1-9]/.test(fraction) ? `${text}.${fraction.replace(/0+$/, '')}` : text;
}

/**
 * A partition's half-open [lower, upper) as wall-clock times of the release's timezone: what
 * a zone-less `timestamp`/`date` column is compared with, bound as `timestamp` parameters.
 * An instant has exactly one wall clock, so a DST gap only makes a range shorter in wall
 * time (Europe/Berlin 2025-03-30 is [2025-03-30T00:00:00, 2025-03-31T00:00:00), 23 hours).
 */
export function wallClockBounds(lower: string | Date, upper: string | Date, timezone: string): WallClockBounds {
  return { lower: wallClock(lower, timezone, 'lower'), upper: wallClock(upper, timezone, 'upper') };
}
