// The consumption query's plan behind one long transaction (SPEC "Capture rules"): it reads
// the (source_table, txid) index, only the partitions below xmax(S), and only the rows it
// returns plus the long transaction's — where `txid >= xmin(F)` reads the whole log. Counted
// in rows (EXPLAIN ANALYZE), not milliseconds, so the test does not depend on the machine;
// bench/capture.ts --only consume measures the time.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createPool, migrate } from '@genfill/registry';
import { consumeStatement, parseSnapshot } from '../src/index.ts';
import { createTestDatabase, keepOnFailure } from '../../../test/support/db.ts';

const tdb = await createTestDatabase('consume_plan');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'consume-plan-test', 3);

const SOURCE = 'public.t';
const TXS = 200;
const PER_TX = 1000;
const LATER = 5 * 20;

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Actual Rows'?: number;
  'Actual Loops'?: number;
  'Rows Removed by Filter'?: number;
  'Rows Removed by Index Recheck'?: number;
  Plans?: PlanNode[];
}

function nodes(n: PlanNode): PlanNode[] {
  return [n, ...(n.Plans ?? []).flatMap(nodes)];
}

/** Rows the scans of change_log partitions produced or threw away. */
function rowsExamined(plan: PlanNode): number {
  return nodes(plan)
    .filter((n) => n['Relation Name']?.startsWith('change_log'))
    .reduce((sum, n) => sum + ((n['Actual Rows'] ?? 0) + (n['Rows Removed by Filter'] ?? 0) + (n['Rows Removed by Index Recheck'] ?? 0)) * (n['Actual Loops'] ?? 1), 0);
}

let F = '';
let S = '';
let longXid = '';

beforeAll(async () => {
  await migrate(db);
  const insert = (c: { query: typeof db.query }, from: number, n: number) =>
    c.query(
      `INSERT INTO genfill.change_log (event_id, source_table, key, op, row, revision)
       SELECT e, $1, jsonb_build_object('id', i % 5000), 'upsert', jsonb_build_object('id', i % 5000, 'v', i), e
         FROM (SELECT nextval('genfill.change_log_event_seq') AS e, i FROM generate_series($2::int, $2::int + $3::int - 1) AS i) s`,
      [SOURCE, from, n],
    );
  // One long transaction holds xmin(F) back while TXS transactions log TXS × PER_TX events.
  const long = await db.connect();
  await long.query('BEGIN');
  await insert(long, 4990, 3); // keys no later event touches
  longXid = (await long.query<{ x: string }>(`SELECT pg_current_xact_id()::text AS x`)).rows[0]!.x;
  for (let t = 0; t < TXS; t++) await insert(db, t * PER_TX, PER_TX);
  await db.query('ANALYZE genfill.change_log');
  F = (await db.query<{ s: string }>(`SELECT pg_current_snapshot()::text AS s`)).rows[0]!.s;
  for (let t = 0; t < 5; t++) await insert(db, t * 20, 20);
  await long.query('COMMIT');
  long.release();
  S = (await db.query<{ s: string }>(`SELECT pg_current_snapshot()::text AS s`)).rows[0]!.s;
}, 120_000);
beforeEach(() => keepOnFailure(tdb));
afterAll(() => db.end());

async function explain(text: string, values: unknown[]): Promise<PlanNode> {
  const { rows } = await db.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${text}`, values);
  return rows[0]['QUERY PLAN'][0].Plan as PlanNode;
}

describe('the consumption query behind a long transaction', () => {
  it('reads the source/txid index of the partitions below xmax(S) and only the rows it needs', async () => {
    // The long transaction is in progress in F (snapshots are cluster-wide: others may be too).
    expect(parseSnapshot(F).xip).toContain(BigInt(longXid));
    const q = consumeStatement({ sourceTable: SOURCE, from: F, to: S, order: 'event' });
    const plan = await explain(q.text, q.values);
    const scans = nodes(plan).filter((n) => n['Relation Name']?.startsWith('change_log'));
    // The partition holding the events is read through its (source_table, txid) index.
    const indexed = nodes(plan).filter((n) => /Index Scan/.test(n['Node Type']) && /source_table_txid_idx$/.test(n['Index Name'] ?? ''));
    expect(indexed.length).toBeGreaterThan(0);
    expect(scans.filter((n) => n['Node Type'] === 'Seq Scan' && n['Relation Name'] !== 'change_log_default')).toEqual([]);
    // Partitions made ahead (txids from xmax(S) on) are pruned at plan time.
    const ahead = await db.query<{ name: string }>(
      `SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'genfill.change_log'::regclass AND c.relname <> 'change_log_default'
          AND substring(pg_get_expr(c.relpartbound, c.oid) FROM 'FROM \\(''(\\d+)''\\)')::numeric >= pg_snapshot_xmax($1::pg_snapshot)::text::numeric`,
      [S],
    );
    expect(ahead.rows.length).toBeGreaterThan(0);
    expect(scans.map((n) => n['Relation Name'])).not.toEqual(expect.arrayContaining([ahead.rows[0]!.name]));
    // The rows it returns (the later events and the long transaction's) and hardly more.
    const returned = (await db.query(q.text, q.values)).rowCount!;
    expect(returned).toBe(LATER + 3);
    expect(rowsExamined(plan)).toBeLessThanOrEqual(2 * (LATER + 3));
  });

  it('where txid >= xmin(F) reads every event logged since the long transaction began', async () => {
    const naive = `SELECT DISTINCT ON (key) event_id, key FROM genfill.change_log
      WHERE source_table = $1 AND txid >= pg_snapshot_xmin($2::pg_snapshot)
        AND pg_visible_in_snapshot(txid, $3::pg_snapshot) AND NOT pg_visible_in_snapshot(txid, $2::pg_snapshot)
      ORDER BY key, event_id DESC`;
    const plan = await explain(naive, [SOURCE, F, S]);
    expect((await db.query(naive, [SOURCE, F, S])).rowCount).toBe(LATER + 3);
    expect(rowsExamined(plan)).toBeGreaterThanOrEqual(TXS * PER_TX);
  });
});
