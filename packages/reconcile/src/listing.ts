// Key listings for what the aggregate passes counted but cannot name: keys of the old
// generation missing from the candidate, candidate keys the old generation lacks, columns
// outside `expectedDiff` that changed, tombstones and rows without a time in a fresh build,
// and the rows whose conserved column differs from the source. They run only when a count
// is non-zero, and stream through a cursor: the list is complete, whatever its length.
import type { Conn } from '@genfill/registry';
import type { FindingInput, FindingKind, FindingsWriter } from './findings.ts';
import { col, keyJson, literal, orderByKey } from './fragments.ts';
import { bounds, bucket, inRelease, rangeParams, type Sql } from './passes.ts';
import { columnType, sourceType, type PartitionRef, type Subject } from './subject.ts';

const BATCH = 5_000;

/** Run a query through a cursor of the (open) transaction, handing over rows in batches. */
async function stream<T>(conn: Conn, name: string, text: string, values: unknown[], onRows: (rows: T[]) => Promise<void>): Promise<number> {
  await conn.query(`DECLARE ${name} NO SCROLL CURSOR FOR ${text}`, values);
  let total = 0;
  try {
    for (;;) {
      const { rows } = await conn.query<T & object>(`FETCH FORWARD ${BATCH} FROM ${name}`);
      if (rows.length === 0) break;
      total += rows.length;
      await onRows(rows);
    }
  } finally {
    await conn.query(`CLOSE ${name}`);
  }
  return total;
}

interface ListedRow {
  bucket: number | null;
  kind: FindingKind;
  kj: string;
  columns: string[] | null;
}

async function emit(conn: Conn, name: string, q: Sql, build: readonly PartitionRef[], check: FindingInput['check'], w: FindingsWriter): Promise<number> {
  return stream<ListedRow>(conn, name, q.text, q.values, async (rows) => {
    for (const r of rows) {
      const partition = r.bucket === null ? null : (build[r.bucket - 1]?.id ?? null);
      const columns = r.columns && r.columns.length > 0 ? r.columns : [undefined];
      for (const column of columns) w.add({ partition, keyJson: r.kj, kind: r.kind, check, ...(column ? { column } : {}) });
    }
    await w.drain();
  });
}

/**
 * Old vs new, key by key: missing (old has it, the candidate not), extra (the reverse), and
 * one unexpected_diff per key and column outside expectedDiff. Same join as the pass.
 */
export function oldDiffSql(s: Subject, build: readonly PartitionRef[]): Sql {
  const timeType = columnType(s, s.time);
  const r = rangeParams(s, build);
  const names = s.columns.map((c) => c.name);
  const keys = s.key.map((k) => ({ name: k }));
  const expected = new Set(s.expectedDiff);
  const unexpected = names.filter((c) => !s.key.includes(c) && !expected.has(c));
  const k0 = s.key[0]!;
  const both = `${col('n', k0)} IS NOT NULL AND ${col('o', k0)} IS NOT NULL`;
  const differs = unexpected.map((c) => `${col('n', c)} IS DISTINCT FROM ${col('o', c)}`);
  const cols = unexpected.map((c) => `CASE WHEN ${col('n', c)} IS DISTINCT FROM ${col('o', c)} THEN ${literal(c)} END`);
  const scan = (alias: string, table: string, extra: string) => `${alias} AS (
  SELECT ${bucket(r, col(alias, s.time), timeType)} AS "__gf_b", ${names.map((c) => col(alias, c)).join(', ')}
    FROM ${table} AS ${alias}
   WHERE ${inRelease(r, col(alias, s.time), timeType)} AND NOT ${alias}."_gf_deleted"${extra}
)`;
  const text = `WITH ${bounds(r, timeType)},
${scan('n', s.candidateTable, '')},
${scan('o', s.oldTable!, '')}
SELECT coalesce(n."__gf_b", o."__gf_b") AS bucket,
       CASE WHEN ${col('n', k0)} IS NULL THEN 'missing' WHEN ${col('o', k0)} IS NULL THEN 'extra' ELSE 'unexpected_diff' END AS kind,
       CASE WHEN ${col('n', k0)} IS NULL THEN ${keyJson('o', keys)} ELSE ${keyJson('n', keys)} END AS kj,
       ${cols.length ? `CASE WHEN ${both} THEN array_remove(ARRAY[${cols.join(', ')}]::text[], NULL) END` : 'NULL::text[]'} AS columns
  FROM n FULL JOIN o ON ${s.key.map((k) => `${col('n', k)} = ${col('o', k)}`).join(' AND ')}
 WHERE ${col('n', k0)} IS NULL OR ${col('o', k0)} IS NULL${differs.length ? ` OR (${both} AND (${differs.join(' OR ')}))` : ''}
 ORDER BY 1, ${s.key.map((k) => `coalesce(${col('n', k)}, ${col('o', k)})`).join(', ')}`;
  return { text, values: r.p.values };
}

export async function listOldDiffs(conn: Conn, s: Subject, build: readonly PartitionRef[], w: FindingsWriter): Promise<number> {
  return emit(conn, 'genfill_old_diffs', oldDiffSql(s, build), build, 'old_generation', w);
}

/** Tombstones inside the range and rows without a time: neither belongs in a fresh build. */
export function straySql(s: Subject, build: readonly PartitionRef[]): Sql {
  const timeType = columnType(s, s.time);
  const r = rangeParams(s, build);
  const t = col('n', s.time);
  const text = `WITH ${bounds(r, timeType)}
SELECT ${bucket(r, t, timeType)} AS bucket,
       CASE WHEN n."_gf_deleted" THEN 'tombstone' ELSE 'null_time' END AS kind,
       ${keyJson('n', s.key.map((k) => ({ name: k })))} AS kj, NULL::text[] AS columns
  FROM ${s.candidateTable} AS n
 WHERE (${inRelease(r, t, timeType)} AND n."_gf_deleted") OR (${t} IS NULL AND NOT n."_gf_deleted")
 ORDER BY 1, ${orderByKey('n', s.key.map((k) => ({ name: k })))}`;
  return { text, values: r.p.values };
}

export async function listStrays(conn: Conn, s: Subject, build: readonly PartitionRef[], w: FindingsWriter): Promise<number> {
  return emit(conn, 'genfill_strays', straySql(s, build), build, 'candidate', w);
}

/**
 * Keys of the given partitions whose conserved columns differ between the source row and
 * the candidate row (`buckets`: their 1-based buckets). Keys on one side only are listed by
 * the dual compute already.
 */
export function conservedSql(s: Subject, build: readonly PartitionRef[], buckets: number[]): Sql {
  const timeType = columnType(s, s.time);
  const r = rangeParams(s, build);
  const srcTimeType = sourceType(s, s.time);
  const keys = s.key.map((k) => ({ name: k }));
  const cols = s.conserved.map((c) => `CASE WHEN ${col('src', c)} IS DISTINCT FROM ${col('n', c)} THEN ${literal(c)} END`);
  const text = `WITH ${bounds(r, timeType)},
n AS (
  SELECT ${bucket(r, col('n', s.time), timeType)} AS "__gf_b", ${[...s.key, ...s.conserved].map((c) => col('n', c)).join(', ')}
    FROM ${s.candidateTable} AS n
   WHERE ${inRelease(r, col('n', s.time), timeType)} AND NOT n."_gf_deleted"
)
SELECT n."__gf_b" AS bucket, 'conserved' AS kind, ${keyJson('n', keys)} AS kj,
       array_remove(ARRAY[${cols.join(', ')}]::text[], NULL) AS columns
  FROM n JOIN ${s.sourceRel} AS src ON ${s.key.map((k) => `${col('src', k)} = ${col('n', k)}`).join(' AND ')}
 WHERE n."__gf_b" = ANY(${r.p.add(buckets)}::int[])
   AND ${inRelease(r, col('src', s.time), srcTimeType)}
   AND (${s.conserved.map((c) => `${col('src', c)} IS DISTINCT FROM ${col('n', c)}`).join(' OR ')})
 ORDER BY 1, ${orderByKey('n', keys)}`;
  return { text, values: r.p.values };
}

export async function listConserved(conn: Conn, s: Subject, buckets: number[], build: readonly PartitionRef[], w: FindingsWriter): Promise<number> {
  return emit(conn, 'genfill_conserved', conservedSql(s, build, buckets), build, 'conserved', w);
}
