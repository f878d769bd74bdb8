// `genfill reconcile --dataset <ds>`: the drift check of an adopted dataset (issue 15). Adopt
// takes the rows as the old pipeline last wrote them, not necessarily as its transform would
// write them today; until this check compares them, `status --dataset` says they are
// unverified. With the reconciler's own query, in one snapshot: the active generation's live
// rows against its transform map applied to the source, leaving out keys with events the
// projector has not applied yet (not visible in its frontier) — those are pending, not drift.
// Each entry's transform is admitted again before use and the comparison goes over the
// extended protocol (issue 28: transform text is untrusted wherever a service uses it).
// Every verdict is also recorded in genfill.drift_checks (migration 0032), in the check's own
// transaction: the reconciler service runs this check on a schedule (drift-schedule.ts) and
// `status --dataset`, the status page and genfill_dataset_drift_rows show the latest verdict.
import { quoteIdent, quoteQualified, RefusedError, wallClockBounds } from '@genfill/contracts';
import { dataColumns, isServiceLogin, qualifiedGenerationTable, relationColumns, withTransaction, type Db } from '@genfill/registry';
import { loadAdmittedTransform, queryUserSql } from '@genfill/transform';

export interface DriftResult {
  dataset: string;
  generation: string;
  frontier: string;
  /** Rows the transform map gives that the generation lacks or holds otherwise. */
  missing: number;
  /** Rows the generation holds that the transform map does not give. */
  extra: number;
  /** Keys with events the projector has not applied: left out. */
  pending: number;
  /** Up to DRIFT_KEY_SAMPLE keys that differ. */
  sample: Record<string, unknown>[];
  verified: boolean;
  /** Live rows of the generation compared (pending keys left out). */
  rowsChecked: number;
  /** Distinct keys among the rows that differ (the sample holds up to DRIFT_KEY_SAMPLE of them). */
  driftedKeys: number;
  /** The genfill.drift_checks row this verdict was recorded as. */
  check: string;
}

/** Drifted keys a verdict names at most (the count of all of them is kept beside). */
export const DRIFT_KEY_SAMPLE = 20;

/** Why a check ran, as genfill.drift_checks records it. */
export type DriftReason = 'schedule' | 'generation_changed' | 'manual';

export interface DriftCheckOptions {
  /** Default 'manual' (`genfill reconcile --dataset`). */
  reason?: DriftReason;
  /** statement_timeout of the check's transaction (the scheduled check bounds itself; unset: the connection's). */
  statementTimeoutMs?: number;
}

const lit = (s: string) => `'${s.replace(/'/g, "''")}'`;

export async function driftCheck(db: Db, dataset: string, opts: DriftCheckOptions = {}): Promise<DriftResult> {
  if (!(await isServiceLogin(db))) {
    throw new RefusedError('the drift check records its verdict on the dataset: run it as the reconciler\'s login (a member of genfill_service)');
  }
  return withTransaction(
    db,
    async (conn) => {
      if (opts.statementTimeoutMs !== undefined) await conn.query(`SELECT set_config('statement_timeout', $1, true)`, [`${Math.max(1, Math.round(opts.statementTimeoutMs))}ms`]);
      const { rows: began } = await conn.query<{ at: string; snapshot: string }>(`SELECT clock_timestamp()::text AS at, pg_current_snapshot()::text AS snapshot`);
      const { rows } = await conn.query<{ source: string; key: string[]; time: string; generation: string | null; map: { from: string | null; to: string | null; transform: string; release: string | null }[]; frontier: string | null; log: string | null }>(
        `SELECT d.source_table AS source, d.key_columns AS key, d.time_column AS time, d.active_generation AS generation, g.transform_map AS map,
                f.snapshot::text AS frontier, c.source_table AS log
           FROM genfill.datasets d
           LEFT JOIN genfill.generations g ON g.dataset = d.name AND g.generation = d.active_generation
           LEFT JOIN genfill.frontiers f ON f.dataset = d.name AND f.generation = d.active_generation
           LEFT JOIN genfill.captures c ON c.relid = to_regclass(d.source_table)
          WHERE d.name = $1`,
        [dataset],
      );
      const d = rows[0];
      if (!d) throw new RefusedError(`dataset ${dataset} does not exist`);
      if (!d.generation || !d.frontier || !d.log) throw new RefusedError(`dataset ${dataset} has no active generation with a projector frontier: adopt it first`);
      const cols = (await dataColumns(conn, dataset)).map((c) => quoteIdent(c.name));
      const timeType = (await relationColumns(conn, d.source)).find((c) => c.name === d.time)?.type ?? 'timestamp with time zone';
      const keys = d.key.map(quoteIdent);
      const parts: string[] = [];
      for (const e of d.map) {
        const { sql } = await loadAdmittedTransform(conn, { digest: e.transform, release: e.release, dataset });
        const { rows: t } = await conn.query<{ tz: string | null }>(`SELECT r.timezone AS tz FROM genfill.releases r WHERE r.id = $1`, [e.release]);
        const bound = (v: string, side: 'lower' | 'upper') =>
          timeType === 'timestamp with time zone' ? `${lit(v)}::timestamptz` : `${lit(wallClockBounds(v, v, t[0]?.tz ?? 'UTC')[side])}::timestamp`;
        const conds = [e.from && `s.${quoteIdent(d.time)} >= ${bound(e.from, 'lower')}`, e.to && `s.${quoteIdent(d.time)} < ${bound(e.to, 'upper')}`].filter(Boolean);
        parts.push(`SELECT ${cols.map((c) => `x.${c}`).join(', ')} FROM (WITH source AS (SELECT s.* FROM ${quoteQualified(d.source)} AS s${conds.length ? ` WHERE ${conds.join(' AND ')}` : ''})
          SELECT * FROM (
${sql}
) AS y) AS x`);
      }
      const f = `${lit(d.frontier)}::pg_snapshot`;
      const pendingKeys = `SELECT DISTINCT ${keys.map((k) => `k.${k}`).join(', ')} FROM genfill.change_log AS l, jsonb_populate_record(NULL::${quoteQualified(d.source)}, l.key) AS k
         WHERE l.source_table = ${lit(d.log)} AND (l.txid >= pg_snapshot_xmax(${f}) OR l.txid = ANY (ARRAY(SELECT pg_snapshot_xip(${f})))) AND NOT pg_visible_in_snapshot(l.txid, ${f})`;
      const notPending = (a: string) => `NOT EXISTS (SELECT 1 FROM pending p WHERE ${keys.map((k) => `p.${k} = ${a}.${k}`).join(' AND ')})`;
      const keyObject = (a: string) => `jsonb_build_object(${d.key.map((k) => `${lit(k)}, ${a}.${quoteIdent(k)}`).join(', ')})`;
      const { rows: r } = await queryUserSql<{ missing: number; extra: number; pending: number; checked: number; keys: number; sample: Record<string, unknown>[] | null }>(
        conn,
        `WITH pending AS MATERIALIZED (${pendingKeys}),
         expected AS MATERIALIZED (SELECT e.* FROM (${parts.join(' UNION ALL ')}) AS e WHERE ${notPending('e')}),
         actual AS MATERIALIZED (SELECT ${cols.map((c) => `a.${c}`).join(', ')} FROM ${qualifiedGenerationTable(dataset, d.generation)} AS a WHERE NOT a._gf_deleted AND ${notPending('a')}),
         missing AS (SELECT * FROM expected EXCEPT ALL SELECT * FROM actual),
         extra AS (SELECT * FROM actual EXCEPT ALL SELECT * FROM expected),
         drifted AS MATERIALIZED (SELECT DISTINCT ${keyObject('z')} AS k FROM (SELECT * FROM missing UNION ALL SELECT * FROM extra) AS z)
         SELECT (SELECT count(*) FROM missing)::int AS missing, (SELECT count(*) FROM extra)::int AS extra, (SELECT count(*) FROM pending)::int AS pending,
                (SELECT count(*) FROM actual)::int AS checked, (SELECT count(*) FROM drifted)::int AS keys,
                (SELECT jsonb_agg(k) FROM (SELECT k FROM drifted ORDER BY k LIMIT ${DRIFT_KEY_SAMPLE}) AS s) AS sample`,
      );
      const x = r[0]!;
      const { rows: rec } = await conn.query<{ id: string }>(
        `INSERT INTO genfill.drift_checks (dataset, generation, frontier, snapshot, reason, started_at, rows_checked, missing_rows, extra_rows, pending_keys, drifted_keys, key_sample)
         VALUES ($1, $2, $3::pg_snapshot, $4::pg_snapshot, $5, $6::timestamptz, $7, $8, $9, $10, $11, $12::jsonb) RETURNING id::text`,
        [dataset, d.generation, d.frontier, began[0]!.snapshot, opts.reason ?? 'manual', began[0]!.at, x.checked, x.missing, x.extra, x.pending, x.keys, JSON.stringify(x.sample ?? [])],
      );
      const result: DriftResult = {
        dataset,
        generation: d.generation,
        frontier: d.frontier,
        missing: x.missing,
        extra: x.extra,
        pending: x.pending,
        sample: x.sample ?? [],
        verified: x.missing + x.extra === 0,
        rowsChecked: x.checked,
        driftedKeys: x.keys,
        check: rec[0]!.id,
      };
      await conn.query(
        `INSERT INTO genfill.dataset_flags AS fl (dataset, adopt_unverified, drift_checked_at, drift_result) VALUES ($1, $2, clock_timestamp(), $3)
         ON CONFLICT (dataset) DO UPDATE SET adopt_unverified = EXCLUDED.adopt_unverified, drift_checked_at = EXCLUDED.drift_checked_at, drift_result = EXCLUDED.drift_result`,
        [dataset, !result.verified, JSON.stringify(result)],
      );
      return result;
    },
    'REPEATABLE READ',
  );
}
