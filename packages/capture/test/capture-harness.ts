// What the capture tests check after writing a captured table: rebuild a copy from the change
// log (the latest event per key, its image through jsonb_populate_record) and compare it with
// the table row for row. A write the log missed, or two events of one key in the wrong order,
// leaves a difference.
import type pg from 'pg';

export interface LogMismatch {
  /** Rows of the table the rebuilt copy lacks (or holds with other values). */
  onlyInTable: unknown[];
  /** Rows the rebuilt copy has that the table does not. */
  onlyInLog: unknown[];
  /** Events whose revision is not their event id. */
  badRevisions: number;
}

/** `table` as the log names it (`public.t`); its columns must all have an equality operator. */
export async function logMismatch(pool: pg.Pool | pg.ClientBase, table: string): Promise<LogMismatch> {
  const { rows } = await pool.query<{ side: 'table' | 'log'; row: unknown }>(
    `WITH latest AS (
       SELECT DISTINCT ON (key) key, op, row FROM genfill.change_log WHERE source_table = $1 ORDER BY key, revision DESC),
     rebuilt AS (SELECT (jsonb_populate_record(NULL::${table}, row)).* FROM latest WHERE op = 'upsert')
     SELECT 'table' AS side, to_jsonb(x) AS row FROM (SELECT * FROM ${table} EXCEPT ALL SELECT * FROM rebuilt) x
     UNION ALL
     SELECT 'log', to_jsonb(y) FROM (SELECT * FROM rebuilt EXCEPT ALL SELECT * FROM ${table}) y`,
    [table],
  );
  const bad = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM genfill.change_log WHERE source_table = $1 AND revision <> event_id', [table]);
  return {
    onlyInTable: rows.filter((r) => r.side === 'table').map((r) => r.row),
    onlyInLog: rows.filter((r) => r.side === 'log').map((r) => r.row),
    badRevisions: bad.rows[0]!.n,
  };
}

export const NO_MISMATCH: LogMismatch = { onlyInTable: [], onlyInLog: [], badRevisions: 0 };

/** The events of `table` after event `after`, as `op(key…)` strings in event order. */
export async function eventsAfter(pool: pg.Pool, table: string, after: string | number = 0): Promise<string[]> {
  const { rows } = await pool.query<{ e: string }>(
    `SELECT op || '(' || (SELECT string_agg(v, ',' ORDER BY k) FROM jsonb_each_text(key) AS j(k, v)) || ')' AS e
       FROM genfill.change_log WHERE source_table = $1 AND event_id > $2 ORDER BY event_id`,
    [table, after],
  );
  return rows.map((r) => r.e);
}

export async function lastEventId(pool: pg.Pool): Promise<string> {
  const { rows } = await pool.query<{ n: string }>('SELECT coalesce(max(event_id), 0)::text AS n FROM genfill.change_log');
  return rows[0]!.n;
}

/** A small seeded generator, so a failing race can be replayed (the seed is in the message). */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const RETRYABLE = new Set(['23505', '40P01', '40001', '55P03']);

/**
 * One writer: `n` transactions, each the statements `step` returns, rolled back on a
 * unique violation or deadlock (both are outcomes two racing writers produce).
 */
export async function writer(
  client: pg.ClientBase,
  n: number,
  step: (rnd: () => number) => string[],
  rnd: () => number,
): Promise<{ committed: number; rolledBack: number }> {
  let committed = 0;
  let rolledBack = 0;
  for (let i = 0; i < n; i++) {
    const statements = step(rnd);
    try {
      await client.query('BEGIN');
      for (const s of statements) await client.query(s);
      await client.query('COMMIT');
      committed++;
    } catch (err) {
      await client.query('ROLLBACK');
      if (!RETRYABLE.has((err as { code?: string }).code ?? '')) throw new Error(`${(err as Error).message} in ${statements.join('; ')}`, { cause: err });
      rolledBack++;
    }
  }
  return { committed, rolledBack };
}
