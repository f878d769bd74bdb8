// SQL fragments the reconciler's queries share: time bounds, the partition a row falls in,
// key ranges. Identifiers are always quoted; values always travel as parameters.
import { quoteIdent } from '@genfill/contracts';

const q = quoteIdent;

/**
 * Collects a query's values and hands out their placeholders. PostgreSQL refuses a value
 * that no placeholder uses, so optional ones (the timezone, needed only by zone-less time
 * columns) are added lazily, on first use.
 */
export class Params {
  readonly values: unknown[] = [];
  add(value: unknown): string {
    this.values.push(value);
    return `$${this.values.length}`;
  }
  lazy(value: unknown): () => string {
    let ref: string | undefined;
    return () => (ref ??= this.add(value));
  }
}

export function col(alias: string, name: string): string {
  return `${q(alias)}.${q(name)}`;
}

/**
 * A timestamptz parameter as the time column compares it: a zone-less column (timestamp,
 * date) holds wall-clock times of the release's frozen timezone, exactly as the build
 * compares them (`time >= (bound AT TIME ZONE tz)`).
 */
export function timeBound(timeType: string, param: string, tz: () => string): string {
  return timeType === 'timestamp with time zone' ? `${param}::timestamptz` : `(${param}::timestamptz AT TIME ZONE ${tz()})`;
}

/** `<t> >= lower AND <t> < upper` for a column of the given type. */
export function inRange(timeExpr: string, timeType: string, lo: string, hi: string, tz: () => string): string {
  return `${timeExpr} >= ${timeBound(timeType, lo, tz)} AND ${timeExpr} < ${timeBound(timeType, hi, tz)}`;
}

/**
 * A CTE `<name>(lo, hi)` holding the build partitions' bounds as arrays sorted by lower, in
 * the column's type. `width_bucket(t, lo)` then finds a row's partition by binary search in
 * one pass over a table that has no index on time, instead of one scan per partition.
 */
export function boundsCte(name: string, timeType: string, lowers: string, uppers: string, tz: () => string): string {
  const conv = (x: string) => (timeType === 'timestamp with time zone' ? x : `(${x} AT TIME ZONE ${tz()})`);
  return `${q(name)} AS MATERIALIZED (
  SELECT array_agg(${conv('u.lo')} ORDER BY u.i) AS lo, array_agg(${conv('u.hi')} ORDER BY u.i) AS hi
    FROM unnest(${lowers}::timestamptz[], ${uppers}::timestamptz[]) WITH ORDINALITY AS u(lo, hi, i))`;
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
