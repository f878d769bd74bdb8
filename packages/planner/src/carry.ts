// Carry partitions (SPEC invariant 2): a release with an expected active generation builds only
// [from, to); everything outside it is copied from the active generation by workers, in chunks
// short enough to be one small transaction each, with receipts like any partition. The copy
// reads the rows and the projector's frontier in one snapshot and takes that frontier as its
// watermark (packages/builder/src/carry.ts); catch-up then brings every chunk current.
//
// Chunks follow the data: the times of the active generation outside the range are cut at
// percentiles, about CARRY_ROWS rows a chunk. The first chunk is unbounded below and the last
// unbounded above: their stored bounds are the sentinels CARRY_MIN and CARRY_MAX, which the
// copy does not compare (a row of year 0 or 300000 is carried too).
import { Temporal } from 'temporal-polyfill';
import { CARRY_MAX, CARRY_MIN, quoteIdent, RefusedError, type GridPartition } from '@genfill/contracts';
import { qualifiedGenerationTable, relationColumns, type Conn, type ReleaseRow } from '@genfill/registry';

/** Rows per carry chunk (a short copy transaction). */
export const CARRY_ROWS = 50_000;

export interface CarryProof {
  partitions: number;
  /** Chunks below from: the first starts at CARRY_MIN (unbounded), the last ends at from. */
  before: number;
  after: number;
  contiguous: boolean;
  unboundedEnds: boolean;
  touchesRange: boolean;
}

/** A value of the time column as an instant: timestamptz as is, wall clocks in the release's zone. */
function instantOf(value: unknown, timeType: string, timezone: string): string {
  if (value instanceof Date) return value.toISOString();
  const text = String(value);
  const instant =
    timeType === 'date'
      ? Temporal.PlainDate.from(text).toZonedDateTime({ timeZone: timezone }).toInstant()
      : Temporal.PlainDateTime.from(text.replace(' ', 'T')).toZonedDateTime(timezone, { disambiguation: 'earlier' }).toInstant();
  return new Date(instant.epochMilliseconds).toISOString();
}

/** Every bound in one form (toISOString), so bounds compare as strings. */
const MIN_ISO = new Date(CARRY_MIN).toISOString();
const MAX_ISO = new Date(CARRY_MAX).toISOString();

function carryId(lower: string): string {
  if (lower === MIN_ISO) return 'c-unbounded';
  return `c-${new Date(lower).toISOString().replace('.000Z', 'Z').replace(/[-:]/g, '')}`;
}

async function cuts(conn: Conn, table: string, time: string, where: string, value: unknown, timeType: string, timezone: string, rowsPerChunk: number): Promise<string[]> {
  const t = quoteIdent(time);
  const { rows } = await conn.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${table} WHERE ${where}`, [value]);
  const chunks = Math.ceil(Number(rows[0]!.n) / rowsPerChunk);
  if (chunks <= 1) return [];
  const fractions = Array.from({ length: chunks - 1 }, (_, i) => (i + 1) / chunks);
  // percentile_disc over a text column would sort as text: keep the column's type, read it as text.
  const { rows: p } = await conn.query<{ v: unknown }>(
    `SELECT unnest(percentile_disc($2::float8[]) WITHIN GROUP (ORDER BY ${t}))${timeType === 'timestamp with time zone' ? '' : '::text'} AS v FROM ${table} WHERE ${where}`,
    [value, fractions],
  );
  return [...new Set(p.map((r) => instantOf(r.v, timeType, timezone)))].sort();
}

/**
 * The carry chunks of `release` outside [from, to), numbered from `seq`, or none for a first
 * generation. Refuses when the active generation's time column is gone.
 */
export async function carryPartitions(conn: Conn, release: ReleaseRow, seq: number, rowsPerChunk = CARRY_ROWS): Promise<{ partitions: GridPartition[]; proof: CarryProof | null }> {
  if (!release.expected_active) return { partitions: [], proof: null };
  const spec = release.spec;
  const table = qualifiedGenerationTable(release.dataset, release.expected_active);
  const time = spec.source.time;
  const column = (await relationColumns(conn, table)).find((c) => c.name === time);
  if (!column) throw new RefusedError(`the active generation ${release.expected_active} has no column ${time}: it cannot be carried`);
  const type = column.type;
  const from = new Date(spec.range.from).toISOString();
  const to = new Date(spec.range.to).toISOString();
  // The range's ends as the column compares them: the first and last chunk's inner bound.
  const bound = (iso: string) => {
    if (type === 'timestamp with time zone') return iso;
    const wall = Temporal.Instant.from(iso).toZonedDateTimeISO(release.timezone).toPlainDateTime().toString();
    return type === 'date' ? wall.slice(0, 10) : wall;
  };
  const t = quoteIdent(time);
  const before = (await cuts(conn, table, time, `${t} < $1`, bound(from), type, release.timezone, rowsPerChunk)).filter((c) => c > MIN_ISO && c < from);
  const after = (await cuts(conn, table, time, `${t} >= $1`, bound(to), type, release.timezone, rowsPerChunk)).filter((c) => c > to && c < MAX_ISO);
  const lowers = [MIN_ISO, ...before];
  const uppers = [...before, from];
  const parts: GridPartition[] = lowers.map((lower, i) => ({ seq: seq + i, id: carryId(lower), kind: 'carry', lower, upper: uppers[i]! }));
  const afterLowers = [to, ...after];
  const afterUppers = [...after, MAX_ISO];
  parts.push(...afterLowers.map((lower, i) => ({ seq: seq + lowers.length + i, id: carryId(lower), kind: 'carry' as const, lower, upper: afterUppers[i]! })));
  const norm = (s: string) => new Date(s).getTime();
  const contiguous = parts.every((p, i) => i === 0 || i === lowers.length || norm(parts[i - 1]!.upper) === norm(p.lower));
  return {
    partitions: parts,
    proof: {
      partitions: parts.length,
      before: lowers.length,
      after: afterLowers.length,
      contiguous,
      unboundedEnds: parts[0]!.lower === MIN_ISO && parts.at(-1)!.upper === MAX_ISO,
      touchesRange: norm(parts[lowers.length - 1]!.upper) === norm(from) && norm(parts[lowers.length]!.lower) === norm(to),
    },
  };
}
