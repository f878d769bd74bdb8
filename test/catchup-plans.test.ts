// Issue 29, finding 8: catch-up at the projector's pace whatever the statistics say. The
// candidate is analysed when the release becomes BUILT; and on a candidate with no statistics
// at all, no statement of a catch-up round — the staging, the typed keys with their rows, the
// times before and after, the held events, the root, the apply — nests a scan inside a loop
// with a join filter, or runs a subquery over the staged events once per row (the plans that ran
// 100k × 40k pg_visible_in_snapshot calls, and a 1M-event round for minutes): every join to the
// candidate is a probe of its primary key, every join of staged events a hash — also when
// work_mem is too small for a hashed subquery.
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { containmentMinimum, formatSnapshot, parseSnapshot } from '@genfill/capture';
import { createLogger } from '@genfill/observability';
import { startBuilding } from '@genfill/planner';
import { applyStatement, applyStep, EVENTS_TABLE, loadDataset, projectDataset } from '@genfill/projector';
import { createPool, rootAgg, rowHashExpr } from '@genfill/registry';
import { catchupStatements } from '@genfill/switch';
import { buildAll, candidate, plannedRelease, seedAdopted } from '../packages/reconcile/test/fixtures.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';

const tdb = await createTestDatabase('cuplans');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'cuplans-test', 8);
const log = createLogger('cuplans-test', 'silent');
const FROM = '2025-07-01T00:00:00Z';
const TO = '2025-07-03T00:00:00Z';
const drain = () => projectDataset('orders_enriched', { db, log, untilIdle: true, id: 'cuplans-test', leaseMs: 60_000 });

interface PlanNode {
  'Node Type': string;
  'Parent Relationship'?: string;
  'Subplan Name'?: string;
  'Join Filter'?: string;
  'Relation Name'?: string;
  'CTE Name'?: string;
  Plans?: PlanNode[];
}

/** What a plan node (and its subtree) scans: relations, CTEs (every CTE of a round is over the staged events), functions. */
function scans(node: PlanNode, out: string[] = []): string[] {
  if (node['Relation Name']) out.push(node['Relation Name']);
  if (node['CTE Name']) out.push(`cte ${node['CTE Name']}`);
  for (const p of node.Plans ?? []) scans(p, out);
  return out;
}

const STAGED_OR_CANDIDATE = /^(gf_projector_events|gf_catchup_keys|orders_enriched__g3|cte .*)$/;

/**
 * Every Nested Loop with a Join Filter whose inner side, rescanned for each outer row, scans the
 * staged events (their table, their typed keys, a CTE over them) or the candidate: each compares
 * every outer row with every inner one. A loop whose inner side is an index probe (Index Cond)
 * has no Join Filter; one over a registry table the planner knows (a tombstone look-up) is not
 * over the staged events.
 */
function filteredLoops(node: PlanNode, out: string[] = []): string[] {
  const inner = node.Plans?.[1];
  if (node['Node Type'] === 'Nested Loop' && node['Join Filter'] && inner && scans(inner).some((x) => STAGED_OR_CANDIDATE.test(x))) {
    out.push(`${node['Join Filter']} over ${scans(inner).join(', ')}`);
  }
  // A correlated subquery run once per outer row over the staged events (not hashed): the same thing.
  for (const p of node.Plans ?? []) {
    if (p['Parent Relationship'] === 'SubPlan' && !/^hashed /.test(p['Subplan Name'] ?? '') && scans(p).some((x) => STAGED_OR_CANDIDATE.test(x))) {
      out.push(`${p['Subplan Name']} over ${scans(p).join(', ')}`);
    }
    filteredLoops(p, out);
  }
  return out;
}

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: FROM, days: 4, perDay: 1500 });
  await plannedRelease(db, { id: 'pl@1', generation: 'g3', from: FROM, to: TO });
  // Changes after the projector's frontier (the carry chunks' watermark) and before the build
  // (inside the build partitions' watermarks: held), in and out of the range, and one key deleted.
  await tdb.pool.query(`UPDATE public.orders SET amount_cents = amount_cents + 1 WHERE order_id % 2 = 0`);
  await tdb.pool.query(`DELETE FROM public.orders WHERE order_id % 97 = 0`);
  await startBuilding(db, 'pl@1');
  await buildAll(db, 'pl@1');
  // And after the build: not held.
  await tdb.pool.query(`UPDATE public.orders SET amount_cents = amount_cents + 1 WHERE order_id % 3 = 0`);
  await drain();
});
beforeEach(() => keepOnFailure(tdb));

describe('a catch-up round over a candidate', () => {
  it('finds the candidate analysed once the release is BUILT', async () => {
    const { rows } = await tdb.pool.query(
      `SELECT c.reltuples::bigint AS n, (SELECT count(*)::int FROM pg_statistic s WHERE s.starelid = c.oid) AS columns
         FROM pg_class c WHERE c.oid = '${candidate('g3')}'::regclass`,
    );
    expect(Number(rows[0].n)).toBeGreaterThan(0);
    expect(rows[0].columns).toBeGreaterThan(0);
  });

  it('plans no statement with a nested loop filtering one side against the other, on a candidate without statistics', async () => {
    // Un-analyse the candidate: no column statistics, no row count.
    await tdb.pool.query(`DELETE FROM pg_statistic WHERE starelid = '${candidate('g3')}'::regclass`);
    await tdb.pool.query(`UPDATE pg_class SET reltuples = -1 WHERE oid = '${candidate('g3')}'::regclass`);
    const conn = await db.connect();
    const plans: { name: string; loops: string[] }[] = [];
    const explain = async (name: string, text: string, values: unknown[] = []) => {
      const { rows } = await conn.query<{ 'QUERY PLAN': { Plan: PlanNode }[] }>(`EXPLAIN (FORMAT JSON) ${text}`, values);
      plans.push({ name, loops: filteredLoops(rows[0]!['QUERY PLAN'][0]!.Plan) });
    };
    let staged = 0;
    let held = 0;
    try {
      await conn.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      // A round of a million events does not fit a hash of work_mem: plan as if it did not here.
      await conn.query(`SET LOCAL work_mem = '64kB'`);
      const { rows: w } = await conn.query<{ w: string }>(`SELECT watermark::text AS w FROM genfill.receipts WHERE release = 'pl@1'`);
      const cf = formatSnapshot(containmentMinimum(w.map((x) => parseSnapshot(x.w))));
      const { rows: f } = await conn.query<{ s: string }>(`SELECT snapshot::text AS s FROM genfill.frontiers WHERE dataset = 'orders_enriched' AND generation = 'g2'`);
      const ds = await loadDataset(conn, 'orders_enriched', { generation: 'g3' });
      const st = catchupStatements({ release: 'pl@1', dataset: ds.name, generation: 'g3', key: ds.key, time: ds.time, timeType: ds.timeType, timezone: 'UTC' });
      await expect(
        applyStep(conn, ds, { from: cf, to: f[0]!.s }, {
          staged: async () => {
            staged = (await conn.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${EVENTS_TABLE}`)).rows[0]!.n;
            await conn.query(st.keys[0]!);
            await explain('keys', st.keys[1]!);
            for (const q of st.keys) await conn.query(q);
            await explain('before', st.before);
            await explain('times', st.times);
            held = (await conn.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_temp.gf_catchup_keys WHERE held`)).rows[0]!.n;
            await explain('held', st.held);
            await explain('root', `SELECT ${rootAgg(rowHashExpr(['key', 'revision'], 'e'))}::text AS root FROM ${EVENTS_TABLE} AS e`);
            const a = applyStatement(ds);
            await explain('apply', a.text, a.values);
            throw new Error('explained');
          },
        }),
      ).rejects.toThrow('explained');
    } finally {
      await conn.query('ROLLBACK');
      conn.release();
    }
    // The round is a real one: thousands of events, most of them held by the build partitions.
    expect(staged).toBeGreaterThan(3000);
    expect(held).toBeGreaterThan(500);
    expect(plans.map((p) => p.name)).toEqual(['keys', 'before', 'times', 'held', 'root', 'apply']);
    expect(plans.filter((p) => p.loops.length > 0)).toEqual([]);
  });
});
