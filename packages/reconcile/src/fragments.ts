// SQL fragments the reconciler's queries share: time bounds, the partition a row falls in,
// key ranges. Identifiers are always quoted; values always travel as parameters.
import { quoteIdent, wallClockBounds } from '@genfill/contracts';

const q = quoteIdent;

/**
 * Collects a query's values and hands out their placeholders. PostgreSQL refuses a value
 * that no placeholder uses, so optional ones (a bound as an instant or as a wall clock,
 * whichever the compared column needs) are added lazily, on first use.
 */
export class Params {
  readonly values: unknown[] = [];
  add(value: unknown): string {
    this.values.push(value);
    return `$${this.values.length}`;
  }
  lazy(value: unknown): () => string {
    return this.lazyOf(() => value);
  }
  /** Like lazy, the value computed on first use too. */
  lazyOf(compute: () => unknown): () => string {
    let ref: string | undefined;
    return () => (ref ??= this.add(compute()));
  }
}

export function col(alias: string, name: string): string {
  return `${q(alias)}.${q(name)}`;
}

/**
 * A time bound (or an array of them) as a column of the given type compares it: the instant
 * as `timestamptz`; for a zone-less column (timestamp, date), which holds wall-clock times
 * of the release's frozen timezone, that wall clock as `timestamp`, exactly as the build
 * compares them. The wall clocks are computed in TypeScript (wallClockBounds), never with
 * `AT TIME ZONE` in SQL: PostgreSQL reads some zone names (CET, EET, …) as fixed
 * abbreviations. Each form is added as a parameter on first use.
 */
export type Bound = (timeType: string) => string;

function isInstant(timeType: string): boolean {
  return timeType === 'timestamp with time zone';
}

function bound(instant: () => string, wall: () => string, array: boolean): Bound {
  const suffix = array ? '[]' : '';
  return (timeType) => (isInstant(timeType) ? `${instant()}::timestamptz${suffix}` : `${wall()}::timestamp${suffix}`);
}

/** [lower, upper) of UTC instants, as Bounds. */
export function timeBounds(p: Params, lower: string, upper: string, timezone: string): { lo: Bound; hi: Bound } {
  let wall: { lower: string; upper: string } | undefined;
  const walls = () => (wall ??= wallClockBounds(lower, upper, timezone));
  return {
    lo: bound(p.lazy(lower), p.lazyOf(() => walls().lower), false),
    hi: bound(p.lazy(upper), p.lazyOf(() => walls().upper), false),
  };
}

/** The lowers and the uppers of partitions (UTC instants), each as one array Bound. */
export function boundArrays(p: Params, parts: readonly { lower: string; upper: string }[], timezone: string): { lowers: Bound; uppers: Bound } {
  let walls: { lower: string; upper: string }[] | undefined;
  const wall = () => (walls ??= parts.map((x) => wallClockBounds(x.lower, x.upper, timezone)));
  return {
    lowers: bound(p.lazy(parts.map((x) => x.lower)), p.lazyOf(() => wall().map((w) => w.lower)), true),
    uppers: bound(p.lazy(parts.map((x) => x.upper)), p.lazyOf(() => wall().map((w) => w.upper)), true),
  };
}

/** `<t> >= lower AND <t> < upper` for a column of the given type. */
export function inRange(timeExpr: string, timeType: string, lo: Bound, hi: Bound): string {
  return `${timeExpr} >= ${lo(timeType)} AND ${timeExpr} < ${hi(timeType)}`;
}

/**
 * A CTE `<name>(lo, hi)` holding the build partitions' bounds as arrays sorted by lower, in
 * the column's type. `width_bucket(t, lo)` then finds a row's partition by binary search in
 * one pass over a table that has no index on time, instead of one scan per partition.
 */
export function boundsCte(name: string, timeType: string, lowers: Bound, uppers: Bound): string {
  return `${q(name)} AS MATERIALIZED (SELECT ${lowers(timeType)} AS lo, ${uppers(timeType)} AS hi)`;
}

/**
 * The 1-based index of the build partition holding `timeExpr`, NULL when none does (before
 * the first, after the last, or — with `checkUpper` — in a gap of a broken manifest).
 */
export function bucketOf(timeExpr: string, timeType: string, bounds: string, checkUpper: boolean): string {
  const t = timeType === 'date' ? `${timeExpr}::timestamp` : timeExpr;
  const lo = `(SELECT lo FROM ${q(bounds)})`;
  const hi = `(SELECT hi FROM ${q(bounds)})`;
  // Rows are restricted to [from, to) already; when the partitions tile it without a gap,
  // the lower bound alone decides (and the binary search runs once per row, not twice).
  if (!checkUpper) return `nullif(width_bucket(${t}, ${lo}), 0)`;
  return `(CASE WHEN ${t} < ${hi}[width_bucket(${t}, ${lo})] THEN width_bucket(${t}, ${lo}) END)`;
}

export interface KeyColumn {
  name: string;
  type: string;
}

/**
 * `(<prefix…>, a.k1, a.k2) > ($n::t1, …)`: a row comparison, so a btree on the key (after an
 * optional equality prefix such as the generation) can range-scan it.
 */
export function keyCompare(
  alias: string,
  keys: readonly KeyColumn[],
  op: '>' | '<=',
  firstParam: number,
  prefix: { expr: string; param: string } | null,
): string {
  const left = keys.map((k) => col(alias, k.name));
  const right = keys.map((k, i) => `$${firstParam + i}::${k.type}`);
  if (prefix) {
    left.unshift(prefix.expr);
    right.unshift(prefix.param);
  }
  return `(${left.join(', ')}) ${op} (${right.join(', ')})`;
}

/** `jsonb_build_object('k1', a.k1, …)::text`: a finding's key, kept as PostgreSQL's JSON text. */
export function keyJson(alias: string, keys: readonly { name: string }[]): string {
  return `jsonb_build_object(${keys.map((k) => `${literal(k.name)}, ${col(alias, k.name)}`).join(', ')})::text`;
}

/** `ARRAY[a.k1::text, …]`: a key as text, to be sent back as parameters with a cast. */
export function keyText(alias: string, keys: readonly { name: string }[]): string {
  return `ARRAY[${keys.map((k) => `${col(alias, k.name)}::text`).join(', ')}]`;
}

export function orderByKey(alias: string, keys: readonly { name: string }[], dir: 'ASC' | 'DESC' = 'ASC'): string {
  return keys.map((k) => `${col(alias, k.name)} ${dir}`).join(', ');
}

/**
 * A column name as an SQL string literal, for jsonb keys. Column names come from the
 * catalog, not from input, but are quoted like any other text.
 */
export function literal(s: string): string {
  return `'${s.replace(/'/g, "''")}'`;
}

/** The transform's text as a subquery body: a trailing semicolon would end the statement. */
export function transformBody(sql: string): string {
  return sql.trim().replace(/;\s*$/, '');
}
