// Old vs new over the carry ranges (issue 16, invariant 2: "after cutover nothing outside the
// range is missing or changed"). Outside the release's range the candidate's transform map is the
// old generation's, and its rows are copies of the old generation's kept current by catch-up: so
// there every live row of the candidate must equal the old generation's row of the same key —
// every column, `expectedDiff` included (a difference there would be the new transform leaking
// out of its range) — and no key may be in one and not the other. Keys pending on the live path
// are left out on both sides (the filtered relations of subject.ts), as in every other pass.
// One full join on the key, in the reconciliation's snapshot; the differing keys are findings.
import type { Conn } from '@genfill/registry';
import type { FindingsWriter } from './findings.ts';
import { col, inRange, Params, timeBounds } from './fragments.ts';
import { columnType, type Subject } from './subject.ts';

export interface CarrySummary {
  /** Live rows outside the range in the old generation, and in the candidate. */
  oldRows: string;
  newRows: string;
  missing: string;
  extra: string;
  /** Rows equal in key but not in every column, by column. */
  changed: Record<string, string>;
}

/** How many differing keys are listed as findings (the counts are exact). */
const LIST = 10_000;

export async function checkCarry(conn: Conn, s: Subject, w: Pick<FindingsWriter, 'add'>): Promise<CarrySummary | null> {
  if (!s.oldTable || !s.expectedActive || !s.partitions.some((p) => p.kind === 'carry')) return null;
  const p = new Params();
  const timeType = columnType(s, s.time);
  const { lo, hi } = timeBounds(p, s.from, s.to, s.timezone);
  const names = s.columns.map((c) => c.name);
  const nonKey = names.filter((c) => !s.key.includes(c));
  const side = (alias: string, table: string, generation: string) =>
    `${alias} AS (SELECT ${names.map((c) => col(alias, c)).join(', ')} FROM ${table} AS ${alias}
        WHERE ${alias}."generation" = ${p.add(generation)} AND NOT ${alias}."_gf_deleted" AND NOT (${inRange(col(alias, s.time), timeType, lo, hi)}))`;
  const k0 = s.key[0]!;
  const keyJson = (alias: string) => `jsonb_build_object(${s.key.map((k) => `'${k.replace(/'/g, "''")}', ${col(alias, k)}`).join(', ')})::text`;
  const diffCols = nonKey.map((c) => `CASE WHEN ${col('n', c)} IS DISTINCT FROM ${col('o', c)} THEN ${p.add(c)}::text END`);
  const text = `WITH ${side('n', s.candidateTable, s.generation)},
${side('o', s.oldTable, s.expectedActive)},
d AS MATERIALIZED (
  SELECT CASE WHEN ${col('n', k0)} IS NULL THEN ${keyJson('o')} ELSE ${keyJson('n')} END AS k, ${col('n', k0)} IS NULL AS missing, ${col('o', k0)} IS NULL AS extra,
         ${diffCols.length > 0 ? `array_remove(ARRAY[${diffCols.join(', ')}], NULL)` : `'{}'::text[]`} AS cols,
         ${col('n', k0)} IS NOT NULL AS in_new, ${col('o', k0)} IS NOT NULL AS in_old
    FROM n FULL JOIN o ON ${s.key.map((k) => `${col('n', k)} = ${col('o', k)}`).join(' AND ')}
)
SELECT (SELECT count(*) FILTER (WHERE in_old) FROM d)::text AS old_rows, (SELECT count(*) FILTER (WHERE in_new) FROM d)::text AS new_rows,
       (SELECT count(*) FILTER (WHERE missing) FROM d)::text AS missing, (SELECT count(*) FILTER (WHERE extra) FROM d)::text AS extra,
       (SELECT coalesce(jsonb_object_agg(c, n), '{}') FROM (SELECT c, count(*)::text AS n FROM d, unnest(cols) AS c WHERE NOT missing AND NOT extra GROUP BY c) x) AS changed,
       (SELECT coalesce(jsonb_agg(jsonb_build_object('k', k, 'missing', missing, 'extra', extra, 'cols', cols)), '[]')
          FROM (SELECT * FROM d WHERE missing OR extra OR cardinality(cols) > 0 ORDER BY k LIMIT ${LIST}) y) AS listed`;
  const { rows } = await conn.query<{ old_rows: string; new_rows: string; missing: string; extra: string; changed: Record<string, string>; listed: { k: string; missing: boolean; extra: boolean; cols: string[] }[] }>(text, p.values);
  const r = rows[0]!;
  for (const x of r.listed) {
    const detail = { carry: true };
    if (x.missing) w.add({ partition: null, keyJson: x.k, kind: 'missing', check: 'old_generation', detail });
    else if (x.extra) w.add({ partition: null, keyJson: x.k, kind: 'extra', check: 'old_generation', detail });
    else for (const c of x.cols) w.add({ partition: null, keyJson: x.k, kind: 'unexpected_diff', check: 'old_generation', column: c, detail });
  }
  return { oldRows: r.old_rows, newRows: r.new_rows, missing: r.missing, extra: r.extra, changed: r.changed };
}
