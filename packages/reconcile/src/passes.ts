// What the aggregate passes share, and the source pass. The passes read each relation once for
// the whole range and group by build partition: the stored and dual passes (merge.ts) read the
// candidate, the old generation and the dual compute; the source pass counts the rows each
// partition read and sums the conserved columns over them.
//
// Why one pass for the whole range rather than one query per partition: the generation
// tables have no index on time, so a query per partition would scan the table once per
// partition. width_bucket() puts each row in its partition by binary search instead. For
// the dual compute this runs the transform once over [from, to); its contract is row-local
// (one output row per source row), so that is the per-partition result, grouped.
import type { Conn } from '@genfill/registry';
import { boundArrays, boundsCte, bucketOf, col, inRange, Params, timeBounds, type Bound } from './fragments.ts';
import type { Digest } from './roots.ts';
import { columnType, sourceType, type PartitionRef, type Subject } from './subject.ts';

const BOUNDS = 'genfill_bounds';

// Types with min()/max() aggregates whose text form casts back: the first key column's
// envelope per partition (see Envelope in bisect.ts) and the key slices of the fused pass
// (merge.ts) are computed for these only.
const ORDERED_TYPES = /^(smallint|integer|bigint|numeric|text|character varying|character|date|timestamp|time)\b/;

export function hasEnvelope(s: Subject): boolean {
  return ORDERED_TYPES.test(columnType(s, s.key[0]!)) && ORDERED_TYPES.test(sourceType(s, s.key[0]!));
}

/**
 * What every pass and listing binds: the build partitions' bounds and [from, to), each as
 * instants or as wall clocks of the release's timezone, whichever the compared column needs.
 */
export interface RangeRefs {
  p: Params;
  /** The build partitions tile [from, to) with no gap (closure proved): a bucket needs no upper check. */
  gapless: boolean;
  lowers: Bound;
  uppers: Bound;
  from: Bound;
  to: Bound;
}

export function rangeParams(s: Subject, build: readonly PartitionRef[]): RangeRefs {
  const p = new Params();
  const { lowers, uppers } = boundArrays(p, build, s.timezone);
  const { lo: from, hi: to } = timeBounds(p, s.from, s.to, s.timezone);
  return {
    p,
    gapless: build.every((x, i) => i === 0 || build[i - 1]!.upper === x.lower) && build[0]?.lower === s.from && build.at(-1)?.upper === s.to,
    lowers,
    uppers,
    from,
    to,
  };
}

/** `t` inside [from, to), for a column of the given type. */
export function inRelease(r: RangeRefs, timeExpr: string, timeType: string): string {
  return inRange(timeExpr, timeType, r.from, r.to);
}

/** The bounds CTE of the build partitions, in the given column type. */
export function bounds(r: RangeRefs, timeType: string): string {
  return boundsCte(BOUNDS, timeType, r.lowers, r.uppers);
}


/** The 1-based build partition of a time value (see bucketOf). */
export function bucket(r: RangeRefs, timeExpr: string, timeType: string): string {
  return bucketOf(timeExpr, timeType, BOUNDS, !r.gapless);
}

export interface Sql {
  text: string;
  values: unknown[];
}

export interface CandidateBucket {
  /** 1-based index into the build partitions sorted by lower; null: in none of them. */
  bucket: number | null;
  rows: bigint;
  tombstones: bigint;
  nullTime: bigint;
  digest: Digest;
  sums: Record<string, string>;
  nulls: Record<string, bigint>;
  keyMin: string | null;
  keyMax: string | null;
}

export interface OldBucket {
  bucket: number | null;
  /** Live rows of the old generation in the partition (by the candidate's time when both have the key). */
  rows: bigint;
  missing: bigint;
  extra: bigint;
  changed: Record<string, bigint>;
}

export interface SourceBucket {
  bucket: number | null;
  rows: bigint;
  sums: Record<string, string>;
}

/** Source rows per partition (the receipt's rows_in) and the conserved sums over them. */
export function sourcePassSql(s: Subject, build: readonly PartitionRef[]): Sql {
  const timeType = sourceType(s, s.time);
  const r = rangeParams(s, build);
  const sums = s.conserved.map((c, i) => `coalesce(sum(${col('s', c)}), 0)::text AS "sum_${i}"`);
  const text = `WITH ${bounds(r, timeType)}
SELECT ${bucket(r, col('s', s.time), timeType)} AS bucket, count(*)::text AS rows${sums.map((x) => `, ${x}`).join('')}
  FROM ${s.sourceRel} AS s
 WHERE ${inRelease(r, col('s', s.time), timeType)}
 GROUP BY 1`;
  return { text, values: r.p.values };
}

export async function sourcePass(conn: Conn, s: Subject, build: readonly PartitionRef[]): Promise<SourceBucket[]> {
  const { text, values } = sourcePassSql(s, build);
  const { rows } = await conn.query<Record<string, string | number | null>>(text, values);
  return rows.map((r) => ({
    bucket: r.bucket === null ? null : Number(r.bucket),
    rows: BigInt(r.rows!),
    sums: Object.fromEntries(s.conserved.map((c, i) => [c, String(r[`sum_${i}`])])),
  }));
}

export interface DualBucket {
  bucket: number | null;
  rows: bigint;
  keyMin: string | null;
  keyMax: string | null;
  digest: Digest;
  sums: Record<string, string>;
}

/** The source restricted to [from, to), as the CTE `source` the transform reads. */
export function sourceCte(s: Subject, where: string): string {
  return `source AS (SELECT * FROM ${s.sourceRel} AS s WHERE ${where})`;
}
