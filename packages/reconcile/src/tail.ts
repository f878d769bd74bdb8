// The cutover's re-verification of the tail (SPEC invariant 9): exactly the keys with events
// visible in the candidate's catch-up frontier CF and not in `since` (the CF the approved
// reconciliation verified at, or the previous tail check's) are checked, key by key, against
// the transform of their latest logged image — the reconciler's own queries, never the
// catch-up code: the candidate's transform map is read from the registry and each entry's
// transform is run over the images of its time range. A key the log deleted, or that the
// transform filters, must have no live row; a quarantined key is reported, not checked. The
// catch-up frontier and the candidate are read in one REPEATABLE READ snapshot, so a round
// committing meanwhile is either wholly seen or not at all.
import { quoteIdent, quoteQualified, wallClockBounds } from '@genfill/contracts';
import { dataColumns, qualifiedGenerationTable, relationColumns, rowHashExpr, withTransaction, type Conn, type Db } from '@genfill/registry';
import { loadAdmittedTransform, queryUserSql } from '@genfill/transform';
import { literal } from './fragments.ts';

export interface TailMismatch {
  key: Record<string, unknown>;
  /** missing: the transform yields a row the candidate lacks; extra: a live row the log says is gone; value: the rows differ. */
  kind: 'missing' | 'extra' | 'value';
}

export interface TailCheck {
  release: string;
  since: string;
  /** The catch-up frontier the candidate was checked at. */
  to: string;
  /** The snapshot the check read (the candidate, the log and CF in one). */
  snapshot: string;
  keys: number;
  quarantined: number;
  mismatches: TailMismatch[];
  /** Mismatches found in all (the list holds the first `limit`). */
  mismatchCount: number;
  ms: number;
}

interface MapJson {
  from: string | null;
  to: string | null;
  transform: string;
  release: string | null;
}

/** `t >= from AND t < to` for one transform-map entry, in the time column's own type. */
function entryRange(expr: string, type: string, e: MapJson, timezone: string): string {
  const parts: string[] = [];
  const bound = (v: string, side: 'lower' | 'upper') =>
    type === 'timestamp with time zone' ? `${literal(v)}::timestamptz` : `${literal(wallClockBounds(v, v, timezone)[side])}::${type === 'date' ? 'date' : 'timestamp'}`;
  if (e.from) parts.push(`${expr} >= ${bound(e.from, 'lower')}`);
  if (e.to) parts.push(`${expr} < ${bound(e.to, 'upper')}`);
  return parts.length > 0 ? parts.join(' AND ') : 'true';
}

export async function verifyTail(db: Db, release: string, since: string, o: { limit?: number } = {}): Promise<TailCheck> {
  const started = performance.now();
  const limit = o.limit ?? 100;
  return withTransaction(
    db,
    async (conn: Conn) => {
      const { rows: rel } = await conn.query<{ dataset: string; generation: string; source: string; key: string[]; time: string; log: string; mode: string; map: MapJson[]; cf: string | null }>(
        `SELECT r.dataset, r.generation, d.source_table AS source, d.key_columns AS key, d.time_column AS time, c.source_table AS log, c.mode,
                g.transform_map AS map, cf.snapshot::text AS cf
           FROM genfill.releases r
           JOIN genfill.datasets d ON d.name = r.dataset
           JOIN genfill.generations g ON g.dataset = r.dataset AND g.generation = r.generation
           LEFT JOIN genfill.captures c ON c.relid = to_regclass(d.source_table)
           LEFT JOIN genfill.catchup_frontiers cf ON cf.release = r.id
          WHERE r.id = $1`,
        [release],
      );
      const r = rel[0];
      if (!r) throw new Error(`release ${release} does not exist`);
      const { rows: snap } = await conn.query<{ s: string }>('SELECT pg_current_snapshot()::text AS s');
      if (!r.log) throw new Error(`the source ${r.source} of ${r.dataset} is not captured: there is no log to check the tail against`);
      if (!r.cf) throw new Error(`release ${release} has no catch-up frontier: no round has run`);
      const to = r.cf;
      const src = quoteQualified(r.source);
      const srcCols = await relationColumns(conn, r.source);
      const timeType = srcCols.find((c) => c.name === r.time)!.type;
      const columns = (await dataColumns(conn, r.dataset)).map((c) => c.name);
      // Each entry's transform, admitted again before this use (issue 28).
      const { rows: zones } = await conn.query<{ release: string; timezone: string }>(
        `SELECT rr.id AS release, rr.timezone FROM genfill.releases rr WHERE rr.id = ANY($1::text[])`,
        [r.map.map((e) => e.release).filter((x): x is string => x !== null)],
      );
      const sqls: { sql: string; timezone: string | null }[] = [];
      for (const e of r.map) {
        const { sql } = await loadAdmittedTransform(conn, { digest: e.transform, release: e.release, dataset: r.dataset });
        sqls.push({ sql, timezone: zones.find((z) => z.release === e.release)?.timezone ?? null });
      }
      // For each key with an event visible in CF and not in `since`, its latest event visible in
      // CF over the whole log (issue 29, finding 1): `since` may be a capped (prefix) frontier that
      // counts a key's later delete as seen and its earlier insert not. A superseding event has a
      // larger event id (0009, 0033): it is among the events at or above the window's smallest.
      const latestOrder = r.mode === 'ingress' ? 'l.revision DESC, l.event_id DESC' : 'l.event_id DESC';
      await conn.query('DROP TABLE IF EXISTS pg_temp.gf_tail_latest');
      await conn.query(
        `CREATE TEMPORARY TABLE gf_tail_latest ON COMMIT DROP AS
         WITH w AS MATERIALIZED (
           SELECT l.event_id, l.key FROM genfill.change_log l
            WHERE l.source_table = $1
              AND l.txid >= pg_snapshot_xmin($2::pg_snapshot) AND NOT pg_visible_in_snapshot(l.txid, $2::pg_snapshot)
              AND pg_visible_in_snapshot(l.txid, $3::pg_snapshot))
         SELECT DISTINCT ON (l.key) l.key, l.op, l.row, l.revision
           FROM genfill.change_log l
          WHERE l.source_table = $1 AND l.event_id >= (SELECT min(w.event_id) FROM w)
            AND l.txid < pg_snapshot_xmax($3::pg_snapshot) AND pg_visible_in_snapshot(l.txid, $3::pg_snapshot)
            AND l.key IN (SELECT w.key FROM w)
          ORDER BY l.key, ${latestOrder}`,
        [r.log, since, to],
      );
      const { rows: q } = await conn.query<{ n: number }>(
        `DELETE FROM pg_temp.gf_tail_latest e USING genfill.quarantined_keys q
          WHERE q.dataset = $1 AND q.key = e.key AND q.up_to_revision >= e.revision RETURNING 1 AS n`,
        [r.dataset],
      );
      await conn.query('ANALYZE pg_temp.gf_tail_latest');
      const { rows: cnt } = await conn.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_temp.gf_tail_latest');
      const keyCols = r.key.map(quoteIdent);
      const keyOf = (alias: string) => `jsonb_build_object(${r.key.map((k) => `${literal(k)}, ${alias}.${quoteIdent(k)}`).join(', ')})`;
      const expected = r.map
        .map((e, i) => {
          const s = sqls[i]!;
          const range = entryRange(`s.${quoteIdent(r.time)}`, timeType, e, s.timezone ?? 'UTC');
          return `SELECT ${columns.map((c) => `x.${quoteIdent(c)}`).join(', ')} FROM (WITH source AS (
              SELECT s.* FROM pg_temp.gf_tail_latest e, jsonb_populate_record(NULL::${src}, e.row) AS s WHERE e.op = 'upsert' AND ${range})
            SELECT * FROM (
${s.sql}
) AS y) AS x`;
        })
        .join('\nUNION ALL\n');
      const cand = qualifiedGenerationTable(r.dataset, r.generation);
      const { rows } = await queryUserSql<{ key: Record<string, unknown>; kind: TailMismatch['kind']; total: number }>(
        conn,
        `WITH k AS MATERIALIZED (SELECT DISTINCT ${keyCols.map((c) => `kk.${c}`).join(', ')} FROM pg_temp.gf_tail_latest e, jsonb_populate_record(NULL::${src}, e.key) AS kk),
              exp AS (SELECT ${keyCols.join(', ')}, ${rowHashExpr(columns, 'x')} AS h FROM (${expected}) AS x),
              cand AS (SELECT ${keyCols.map((c) => `c.${c}`).join(', ')}, ${rowHashExpr(columns, 'c')} AS h
                         FROM ${cand} AS c JOIN k ON ${r.key.map((c) => `c.${quoteIdent(c)} = k.${quoteIdent(c)}`).join(' AND ')}
                        WHERE c.generation = ${literal(r.generation)} AND NOT c._gf_deleted),
              d AS (SELECT ${keyOf('z')} AS key,
                           CASE WHEN z.eh IS NULL THEN 'extra' WHEN z.ch IS NULL THEN 'missing' ELSE 'value' END AS kind
                      FROM (SELECT ${keyCols.join(', ')}, exp.h AS eh, cand.h AS ch FROM exp FULL JOIN cand USING (${keyCols.join(', ')})) AS z
                     WHERE z.eh IS DISTINCT FROM z.ch)
         SELECT key, kind, count(*) OVER ()::int AS total FROM d ORDER BY key::text LIMIT ${Number(limit)}`,
      );
      return {
        release,
        since,
        to,
        snapshot: snap[0]!.s,
        keys: cnt[0]!.n,
        quarantined: q.length,
        mismatches: rows.map(({ key, kind }) => ({ key, kind })),
        mismatchCount: rows[0]?.total ?? 0,
        ms: Math.round((performance.now() - started) * 10) / 10,
      };
    },
    'REPEATABLE READ',
  );
}
