// The columns of a relation, asked in one place. Row hashes, dependency pins, build
// statements, admission and reconciliation all depend on the same answer (user columns in
// attnum order, dropped ones skipped); the pg_attribute query that gives it had been written
// out eleven times with small drifts, so it lives here once.
import type { Conn, Db } from './db.ts';

export interface RelationColumn {
  name: string;
  /** format_type(atttypid, atttypmod), e.g. `numeric(12,2)`: safe to splice into a cast. */
  type: string;
  notNull: boolean;
  /** attnum */
  num: number;
}

/**
 * The relation's columns in attnum order, without system and dropped columns or the names in
 * `except`. `relation` is a name as `::regclass` reads it (`public.orders`,
 * `"genfill_data"."orders"`) or an oid. A missing relation raises PostgreSQL's own error
 * (42P01 relation … does not exist, 3F000 for a missing schema); an oid is not looked up and
 * gives no columns when nothing has it. Callers that treat a missing relation as an answer
 * check with `to_regclass` first, which leaves their transaction usable.
 */
export async function relationColumns(
  conn: Conn | Db,
  relation: string | number,
  opts: { except?: readonly string[] } = {},
): Promise<RelationColumn[]> {
  // regclass input takes an oid's decimal text as that oid, so one query serves both forms.
  const { rows } = await conn.query<RelationColumn>(
    `SELECT attname AS name, format_type(atttypid, atttypmod) AS type, attnotnull AS "notNull", attnum AS num
       FROM pg_attribute
      WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND NOT (attname = ANY($2::text[]))
      ORDER BY attnum`,
    [String(relation), [...(opts.except ?? [])]],
  );
  return rows;
}
