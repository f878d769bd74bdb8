// The apply of one projector batch is ONE statement (no per-event round trip): the latest event
// per key visible in S and not in F (the consumption primitive of @genfill/capture), the
// events' images as the transform's `source` — per transform-map entry, by the row's time —,
// and, in the same statement:
//   - an upsert that lands only when the event's revision is newer than the row's _gf_rev;
//   - a tombstone for a delete, or for an upsert the transform yields no row for: the row the
//     generation holds is flagged (_gf_deleted, its last image kept, which satisfies the
//     table's constraints); a key the generation holds no row for is remembered in
//     genfill.projector_tombstones, which the insert's version check reads — so an older event
//     of the key, whenever it is applied, never resurrects it;
//   - the refusals: an output key the batch's upsert events do not have (the transform changed
//     the key) or an output key twice (fan-out). Either writes nothing: every write is guarded
//     by the check, and the statement returns what it found for the caller to stop on.
import { quoteIdent, type Query } from '@genfill/contracts';
import type { Conn } from '@genfill/registry';
import { consumeStatement, newEventsWhere } from '@genfill/capture';
import { qualifiedGenerationTable } from '@genfill/registry';
import { queryUserSql } from '@genfill/transform';
import { entryFilter, type ProjectedDataset } from './dataset.ts';

export interface ApplyCounts {
  /** Latest events per key in (F, S]. */
  events: number;
  /** Skipped: the key is quarantined up to this revision. */
  quarantined: number;
  upserted: number;
  /** Rows flagged deleted (their image kept). */
  flagged: number;
  /** Keys the generation held no row for, remembered as deleted. */
  remembered: number;
  /** Older or equal revisions: no-ops. */
  noops: number;
  /** Output keys produced twice, when the transform fans out. */
  fanout: Record<string, unknown>[] | null;
  /** Output keys none of the batch's upsert events has. */
  stray: Record<string, unknown>[] | null;
}

const SAMPLE = 10;

/**
 * The batch's events, staged first (stageStatement) in a temporary table of the session: its
 * row count is what the planner sees (a table never analysed is estimated from its size), so
 * the joins of a 50,000-event batch are hashed. Over the consumption query directly, the
 * planner saw a handful of rows (it cannot estimate pg_visible_in_snapshot) and joined the
 * transform's output back to the events with a nested loop: 25 million comparisons for 5,000
 * events, 4 s of a 4.2 s batch (bench/projector, before).
 */
export const EVENTS_TABLE = 'pg_temp.gf_projector_events';

export const CREATE_EVENTS_TABLE = `CREATE TEMPORARY TABLE IF NOT EXISTS gf_projector_events
  (event_id bigint, key jsonb, op text, row jsonb, revision bigint, txid xid8) ON COMMIT DELETE ROWS`;

/**
 * Stage, for each key with an event in (F, S] of the dataset's source, the key's latest event
 * visible in S over the whole log — not the latest in the window: under a capped (prefix)
 * frontier F (batch.ts) a transaction below F's xmax counts as seen although it committed after
 * one F does not see, so the window can hold a key's insert while the delete that superseded it
 * lies "before" F (issue 29, finding 1). For one key, event ids follow commit order (0009), so
 * a superseding event has an event id above the window's event and is among the events at or
 * above the window's smallest event id (0033's index): a second, bounded read.
 */
export function stageStatement(ds: ProjectedDataset, range: { from: string; to: string }): Query {
  const latest = ds.order === 'revision' ? 'a.revision DESC, a.event_id DESC' : 'a.event_id DESC';
  const text = `INSERT INTO ${EVENTS_TABLE} (event_id, key, op, row, revision, txid)
WITH w AS MATERIALIZED (SELECT event_id, key FROM genfill.change_log WHERE ${newEventsWhere()}),
a AS (
  SELECT event_id, key, op, row, revision, txid FROM genfill.change_log
   WHERE source_table = $1 AND event_id >= (SELECT min(event_id) FROM w)
     AND txid < pg_snapshot_xmax($3::pg_snapshot) AND pg_visible_in_snapshot(txid, $3::pg_snapshot)
)
SELECT DISTINCT ON (a.key) a.event_id, a.key, a.op, a.row, a.revision, a.txid
  FROM a WHERE a.key IN (SELECT w.key FROM w)
 ORDER BY a.key, ${latest}`;
  return { text, values: [ds.sourceTable, range.from, range.to] };
}

/**
 * Over the staged events: \$1 generation, \$2 dataset, \$3 an optional list of keys (jsonb[])
 * the batch is restricted to — the poison search runs it on halves. `probe`: only run the
 * transform (count its output), write nothing.
 */
export function applyStatement(ds: ProjectedDataset, opts: { probe?: boolean } = {}): Query {
  const q = quoteIdent;
  const gen = qualifiedGenerationTable(ds.name, ds.generation);
  const keys = ds.key.map(q);
  const gk = ds.key.map((k) => q(`gk_${k}`));
  const cols = ds.columns.map(q);
  const srcCols = ds.sourceColumns.map(q);
  const outs = ds.map.map(
    (e, i) => `out_${i} AS (
  WITH source AS (SELECT ${srcCols.map((c) => `i.${c}`).join(', ')} FROM img AS i WHERE ${entryFilter(e, ds.time, 'i')})
  SELECT ${cols.map((c) => `t.${c}`).join(', ')} FROM (
${e.sql.trim().replace(/;\s*$/, '')}
  ) AS t
)`,
  );
  const keyObject = (alias: string) => `jsonb_build_object(${ds.key.map((k) => `'${k.replace(/'/g, "''")}', ${alias}.${q(k)}`).join(', ')})`;
  const head = `WITH ev AS MATERIALIZED (
  SELECT c.* FROM ${EVENTS_TABLE} AS c
   WHERE $3::jsonb[] IS NULL OR c.key = ANY ($3::jsonb[])
),
qv AS MATERIALIZED (
  SELECT ev.* FROM ev
   WHERE NOT EXISTS (SELECT 1 FROM genfill.quarantined_keys x WHERE x.dataset = $2 AND x.key = ev.key AND ev.revision <= x.up_to_revision)
),
qk AS MATERIALIZED (
  SELECT qv.event_id, qv.key, qv.op, qv.revision, ${ds.key.map((k) => `p.${q(k)} AS ${q(`gk_${k}`)}`).join(', ')}
    FROM qv, jsonb_populate_record(NULL::${gen}, qv.key) AS p
),
img AS MATERIALIZED (
  SELECT r.* FROM qv, jsonb_populate_record(NULL::${ds.sourceTable}, qv.row) AS r WHERE qv.op = 'upsert'
),
${outs.join(',\n')},
out AS MATERIALIZED (${ds.map.map((_, i) => `SELECT * FROM out_${i}`).join(' UNION ALL ')})`;
  if (opts.probe) {
    return { text: `${head}\nSELECT count(*)::int AS n FROM out`, values: [ds.generation, ds.name, null] };
  }
  const text = `${head},
matched AS MATERIALIZED (
  SELECT o.*, k.revision AS gf_rev, k.op AS gf_op, k.event_id AS gf_event, k.key AS gf_key
    FROM out AS o LEFT JOIN qk AS k ON (${gk.map((c) => `k.${c}`).join(', ')}) = (${keys.map((c) => `o.${c}`).join(', ')}) AND k.op = 'upsert'
),
chk AS MATERIALIZED (
  SELECT (SELECT jsonb_agg(f.k) FROM (SELECT ${keyObject('o')} AS k FROM out AS o GROUP BY ${keys.map((c) => `o.${c}`).join(', ')} HAVING count(*) > 1 LIMIT ${SAMPLE}) AS f) AS fanout,
         (SELECT jsonb_agg(s.k) FROM (SELECT ${keyObject('m')} AS k FROM matched AS m WHERE m.gf_event IS NULL LIMIT ${SAMPLE}) AS s) AS stray
),
ok AS MATERIALIZED (SELECT fanout IS NULL AND stray IS NULL AS ok FROM chk),
ins AS (
  INSERT INTO ${gen} AS t (generation, ${cols.join(', ')}, _gf_rev, _gf_deleted)
  SELECT $1::text, ${cols.map((c) => `m.${c}`).join(', ')}, m.gf_rev, false FROM matched AS m
   WHERE (SELECT ok FROM ok)
     AND NOT EXISTS (SELECT 1 FROM genfill.projector_tombstones x
                      WHERE x.dataset = $2 AND x.generation = $1 AND x.key = m.gf_key AND x.revision >= m.gf_rev)
  ON CONFLICT (generation, ${keys.join(', ')}) DO UPDATE
     SET ${cols.filter((c) => !keys.includes(c)).map((c) => `${c} = EXCLUDED.${c}`).concat(['_gf_rev = EXCLUDED._gf_rev', '_gf_deleted = false']).join(', ')}
   WHERE t._gf_rev < EXCLUDED._gf_rev
  RETURNING 1
),
-- Deletes, and upserts the transform yields no row for: two branches, so the second is an
-- anti-join. As one "op = 'delete' OR NOT EXISTS (…)" it was a subquery per event, hashed only
-- while matched fits work_mem: a 1M-event catch-up round scanned matched once per event.
gone AS MATERIALIZED (
  SELECT k.* FROM qk AS k WHERE (SELECT ok FROM ok) AND k.op = 'delete'
  UNION ALL
  SELECT k.* FROM qk AS k
   WHERE (SELECT ok FROM ok) AND k.op <> 'delete'
     AND NOT EXISTS (SELECT 1 FROM matched AS m WHERE m.gf_event = k.event_id)
),
flag AS (
  UPDATE ${gen} AS t SET _gf_deleted = true, _gf_rev = g.revision
    FROM gone AS g
   WHERE t.generation = $1 AND (${keys.map((c) => `t.${c}`).join(', ')}) = (${gk.map((c) => `g.${c}`).join(', ')}) AND t._gf_rev < g.revision
  RETURNING 1
),
side AS (
  INSERT INTO genfill.projector_tombstones AS x (dataset, generation, key, revision)
  SELECT $2, $1, g.key, g.revision FROM gone AS g
   WHERE NOT EXISTS (SELECT 1 FROM ${gen} AS t WHERE t.generation = $1 AND (${keys.map((c) => `t.${c}`).join(', ')}) = (${gk.map((c) => `g.${c}`).join(', ')}))
  ON CONFLICT (dataset, generation, key) DO UPDATE SET revision = EXCLUDED.revision, at = clock_timestamp()
   WHERE x.revision < EXCLUDED.revision
  RETURNING 1
)
SELECT (SELECT count(*) FROM ev)::int AS events,
       (SELECT count(*) FROM ev)::int - (SELECT count(*) FROM qv)::int AS quarantined,
       (SELECT count(*) FROM ins)::int AS upserted,
       (SELECT count(*) FROM flag)::int AS flagged,
       (SELECT count(*) FROM side)::int AS remembered,
       (SELECT fanout FROM chk) AS fanout,
       (SELECT stray FROM chk) AS stray`;
  return { text, values: [ds.generation, ds.name, null] };
}

/** Events of a captured dependency visible in S and not in F: does anything the transform reads change? */
export function dependencyChangedStatement(relation: string, range: { from: string; to: string }): Query {
  const c = consumeStatement({ sourceTable: relation, from: range.from, to: range.to, order: 'event' });
  return { text: `SELECT EXISTS (${c.text}) AS changed`, values: c.values };
}

export interface ApplyRow {
  events: number;
  quarantined: number;
  upserted: number;
  flagged: number;
  remembered: number;
  fanout: Record<string, unknown>[] | null;
  stray: Record<string, unknown>[] | null;
}

export function countsOf(r: ApplyRow): ApplyCounts {
  const considered = r.events - r.quarantined;
  return { ...r, noops: Math.max(0, considered - r.upserted - r.flagged - r.remembered) };
}

/** What the transform did wrong with one of the staged events: the apply wrote nothing. */
export interface Poison {
  what: 'fan-out' | 'changed key';
  key: Record<string, unknown>;
}

export type Applied = { counts: ApplyCounts; poison: null } | { counts: null; poison: Poison };

/**
 * The one apply step of every writer of a generation from the log — a projector batch, a
 * catch-up round, the cutover's and the rollback's switch and a rollback's replay: stage the
 * latest event per key in (from, to] (stageStatement), let the caller look at the staged events
 * (`staged`: a catch-up reads the rows they move, a batch takes a savepoint for its poison
 * search), apply them (applyStatement) and check the transform's output. A fan-out or a changed
 * key writes nothing and comes back as `poison` for the caller to refuse or search; an error of
 * the statement is thrown as it is.
 */
export async function applyStep(conn: Conn, ds: ProjectedDataset, range: { from: string; to: string }, o: { staged?: () => Promise<void> } = {}): Promise<Applied> {
  await conn.query(CREATE_EVENTS_TABLE);
  const stage = stageStatement(ds, range);
  await conn.query(stage.text, stage.values);
  await o.staged?.();
  // The statement carries the transforms' text: extended protocol only (@genfill/transform).
  const row = (await queryUserSql<ApplyRow>(conn, applyStatement(ds))).rows[0]!;
  if (row.fanout) return { counts: null, poison: { what: 'fan-out', key: row.fanout[0]! } };
  if (row.stray) return { counts: null, poison: { what: 'changed key', key: row.stray[0]! } };
  return { counts: countsOf(row), poison: null };
}
