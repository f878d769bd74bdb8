// A reconciler that sees live changes (SPEC invariant 10, its live half), with its own queries:
// the candidate of a release whose source is captured is verified at its catch-up frontier CF
// — the stored one, lowered by any receipt written after it, or, before any round, the
// containment-minimum of every receipt's watermark (as the SPEC defines CF, computed here
// again rather than trusted). In the reconciliation's snapshot R:
//   - keys with events visible in R and not in CF are *pending*: the candidate has not seen
//     them yet, so they are left out of every pass on every side (source, dual compute,
//     candidate, old generation) and reported as a count, not as findings;
//   - every other key's latest image is visible in CF, so the source row in R is that image and
//     the dual compute checks the candidate row against the transform of it, key by key;
//   - receipt roots are checked only for partitions no catch-up round touched and no pending
//     key lives in (a touched partition's rows are no longer what its receipt describes);
//   - tombstones written by catch-up (a revision above 0) are expected, not strays.
import { containmentMinimum, formatSnapshot, parseSnapshot } from '@genfill/capture';
import { quoteIdent, quoteQualified } from '@genfill/contracts';
import type { Conn } from '@genfill/registry';

export interface LiveView {
  /** The catch-up frontier the candidate is verified at. */
  cf: string;
  /** Distinct keys with events after CF (visible in the reconciliation's snapshot). */
  pendingKeys: number;
  /** Partitions a catch-up round changed rows in. */
  touched: Set<string>;
  /** Partitions holding a pending key (in the source or the candidate). */
  pendingPartitions: Set<string>;
  /**
   * Partitions whose current receipt counts keys the candidate already held elsewhere when it
   * was built (a row that moved between partitions during the build, written by the first of
   * the two builds): the receipt does not describe what the partition stores.
   */
  collided: Set<string>;
  /** Catch-up rounds recorded for the release. */
  rounds: number;
  /** genfill.change_log.source_table of the source. */
  logName: string;
}

function literal(s: string): string {
  return `'${s.replace(/'/g, "''")}'`;
}

/** `NOT EXISTS` an event of the row's key after CF (the row's alias must have the key columns). */
export function notPending(live: LiveView, sourceTable: string, key: readonly string[], alias: string): string {
  const cf = `${literal(live.cf)}::pg_snapshot`;
  return `NOT EXISTS (SELECT 1 FROM genfill.change_log AS gf_l, jsonb_populate_record(NULL::${quoteQualified(sourceTable)}, gf_l.key) AS gf_k
   WHERE gf_l.source_table = ${literal(live.logName)}
     AND (gf_l.txid >= pg_snapshot_xmax(${cf}) OR gf_l.txid = ANY (ARRAY(SELECT pg_snapshot_xip(${cf}))))
     AND NOT pg_visible_in_snapshot(gf_l.txid, ${cf})
     AND ${key.map((k) => `gf_k.${quoteIdent(k)} = ${alias}.${quoteIdent(k)}`).join(' AND ')})`;
}

function instantOf(expr: string, timeType: string, timezone: string): string {
  if (timeType === 'timestamp with time zone') return expr;
  return timeType === 'date' ? `(${expr}::timestamp AT TIME ZONE ${literal(timezone)})` : `(${expr} AT TIME ZONE ${literal(timezone)})`;
}

/**
 * The live view of a release, or null when it has none: a first generation, a source that is
 * not captured, or no receipt yet.
 */
export async function loadLive(
  conn: Conn,
  r: { id: string; expectedActive: string | null; sourceTable: string; key: string[]; time: string; timezone: string; candidateTable: string; timeType: string },
): Promise<LiveView | null> {
  if (!r.expectedActive) return null;
  const { rows: cap } = await conn.query<{ name: string }>('SELECT source_table AS name FROM genfill.captures WHERE relid = to_regclass($1)', [r.sourceTable]);
  if (!cap[0]) return null;
  const { rows: stored } = await conn.query<{ snapshot: string; receipts_seen: string }>(
    'SELECT snapshot::text, receipts_seen::text FROM genfill.catchup_frontiers WHERE release = $1',
    [r.id],
  );
  const { rows: receipts } = await conn.query<{ w: string }>(
    'SELECT watermark::text AS w FROM genfill.receipts WHERE release = $1 AND id > $2',
    [r.id, stored[0]?.receipts_seen ?? '0'],
  );
  const snaps = [...(stored[0] ? [stored[0].snapshot] : []), ...receipts.map((x) => x.w)];
  if (snaps.length === 0) return null;
  const live: LiveView = {
    cf: formatSnapshot(containmentMinimum(snaps.map(parseSnapshot))),
    pendingKeys: 0,
    touched: new Set(),
    pendingPartitions: new Set(),
    collided: new Set(),
    rounds: 0,
    logName: cap[0].name,
  };
  const cf = `${literal(live.cf)}::pg_snapshot`;
  const { rows: pending } = await conn.query<{ n: number }>(
    `SELECT count(DISTINCT key)::int AS n FROM genfill.change_log
      WHERE source_table = $1 AND (txid >= pg_snapshot_xmax(${cf}) OR txid = ANY (ARRAY(SELECT pg_snapshot_xip(${cf})))) AND NOT pg_visible_in_snapshot(txid, ${cf})`,
    [live.logName],
  );
  live.pendingKeys = pending[0]!.n;
  const { rows: touched } = await conn.query<{ partition: string }>('SELECT partition FROM genfill.catchup_touched WHERE release = $1', [r.id]);
  live.touched = new Set(touched.map((t) => t.partition));
  const { rows: collided } = await conn.query<{ partition: string }>(
    `SELECT rc.partition FROM genfill.current_receipts rc
      WHERE rc.release = $1 AND coalesce((rc.timings->>'keptElsewhere')::bigint, 0) > 0`,
    [r.id],
  );
  live.collided = new Set(collided.map((c) => c.partition));
  const { rows: rounds } = await conn.query<{ n: number }>('SELECT count(*)::int AS n FROM genfill.catchup_rounds WHERE release = $1', [r.id]);
  live.rounds = rounds[0]!.n;
  if (live.pendingKeys > 0) {
    const key = r.key.map(quoteIdent);
    const t = quoteIdent(r.time);
    const { rows: parts } = await conn.query<{ p: string }>(
      `WITH pk AS MATERIALIZED (
         SELECT DISTINCT ${key.map((k) => `gf_k.${k}`).join(', ')}
           FROM genfill.change_log AS gf_l, jsonb_populate_record(NULL::${quoteQualified(r.sourceTable)}, gf_l.key) AS gf_k
          WHERE gf_l.source_table = $2 AND (gf_l.txid >= pg_snapshot_xmax(${cf}) OR gf_l.txid = ANY (ARRAY(SELECT pg_snapshot_xip(${cf}))))
            AND NOT pg_visible_in_snapshot(gf_l.txid, ${cf}))
       SELECT genfill.partitions_at($1, ARRAY(
         SELECT ${instantOf(`c.${t}`, r.timeType, r.timezone)} FROM ${r.candidateTable} AS c JOIN pk USING (${key.join(', ')})
         UNION ALL
         SELECT ${instantOf(`s.${t}`, r.timeType, r.timezone)} FROM ${quoteQualified(r.sourceTable)} AS s JOIN pk USING (${key.join(', ')}))) AS p`,
      [r.id, live.logName],
    );
    live.pendingPartitions = new Set(parts.map((x) => x.p));
  }
  return live;
}
