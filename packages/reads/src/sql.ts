// SQL fragments the pinned reads and the diff share: how a stored value leaves the database
// as JSON, how two values are compared, how a key given as JSON is matched. Identifiers are
// quoted; values travel as parameters. Column types come from the catalog (format_type), so
// they are safe to splice into a cast.
import { quoteIdent as q } from '@genfill/contracts';

export interface Column {
  name: string;
  type: string;
}

/** A data row as a reader gets it: column name → JSON value. */
export type Row = Record<string, unknown>;

export function col(alias: string, name: string): string {
  return `${q(alias)}.${q(name)}`;
}

// JSON numbers become JavaScript doubles: bigint and numeric leave as their exact text.
const EXACT_AS_TEXT = /^(bigint|numeric|money)(\(.*\))?$/;
const EXACT_ARRAY_AS_TEXT = /^(bigint|numeric|money)(\(.*\))?\[\]$/;

/** The value of a column (`ref`, an SQL expression) as it goes out in a row's JSON. */
export function outputValue(c: Column & { ref: string }): string {
  const ref = c.ref;
  if (EXACT_AS_TEXT.test(c.type)) return `${ref}::text`;
  if (EXACT_ARRAY_AS_TEXT.test(c.type)) return `${ref}::text[]`;
  return ref;
}

/**
 * A LATERAL projection of the row's columns as they go out; `row_to_json` of it keeps the
 * parent's column order (jsonb would sort the names).
 */
export function outputRow(alias: string, columns: readonly Column[]): string {
  return `(SELECT ${columns.map((c) => `${outputValue({ ...c, ref: col(alias, c.name) })} AS ${q(c.name)}`).join(', ')})`;
}

/** The key columns' text forms, as a cursor carries them. */
export function keyText(alias: string, key: readonly string[]): string {
  return `(SELECT ${key.map((k) => `${col(alias, k)}::text AS ${q(k)}`).join(', ')})`;
}

// Types without an equality operator compare by a form that has one.
const COMPARE_AS_TEXT = /^(xml|point|line|lseg|box|path|polygon|circle)(\[\])?$/;

/** `a IS DISTINCT FROM b` for a column of this type. */
export function distinct(a: string, b: string, type: string): string {
  if (type === 'json' || type === 'json[]') {
    const as = type === 'json' ? 'jsonb' : 'jsonb[]';
    return `${a}::${as} IS DISTINCT FROM ${b}::${as}`;
  }
  if (COMPARE_AS_TEXT.test(type)) return `${a}::text IS DISTINCT FROM ${b}::text`;
  return `${a} IS DISTINCT FROM ${b}`;
}

/** Collects a query's values and hands out their placeholders. */
export class Params {
  readonly values: unknown[] = [];
  add(value: unknown): string {
    this.values.push(value);
    return `$${this.values.length}`;
  }
}

/**
 * For each key column, its value in a key given as a JSON object, typed like the column:
 * `($json::jsonb ->> $name)::<type>`. The JSON goes to PostgreSQL as text, so a big integer
 * keeps every digit (JSON.parse would round it).
 */
export function keyValues(p: Params, json: string, key: readonly Column[]): string[] {
  const ref = p.add(json);
  return key.map((k) => `(${ref}::jsonb ->> ${p.add(k.name)}::text)::${k.type}`);
}
