// The in-range passes after issue 19 (part 3), per key slice:
//
//   stored pass   candidate FULL JOIN old generation, a merge join on the key (both read in
//                 primary-key order), grouped by partition: the candidate's count, key and row
//                 roots, sums, null and tombstone counts, and old vs new — missing, extra,
//                 changed rows per column. The candidate is read once for both checks.
//   dual pass     the transform over the slice's source rows, grouped by the partition of its
//                 output: count, row root, sums. No key root: where the dual count and row root
//                 equal the stored rows', so do the keys (the row hash covers the key columns),
//                 and the stored key root is the dual one; for a partition that differs,
//                 dualKeyRoots() hashes that partition's keys before the checks compare.
//
// Slices: the key space is cut at quantiles of the candidate's first key column (its pg_stats
// histogram, fresh: reconcile() ANALYZEs a stale generation first), one slice per connection of
// the shared snapshot. Every aggregate is a count, a sum or a min/max, so the slices add up
// exactly (mergeSlices); a key lives in one slice on every side.
//
// Tried and not kept: pairing each dual row with the stored row of its key and hashing only the
// dual rows that differ (a three-way merge). Exact, but PostgreSQL's pairing of a million rows
// cost more CPU than the row hash it saved (docs/reconciliation.md, "The passes").
import { DATA_SCHEMA, generationTable, type Conn } from '@genfill/registry';
import { addDecimals } from './compare.ts';
import { queryUserSql } from '@genfill/transform';
import { col, orderByKey, transformBody } from './fragments.ts';
import { bounds, bucket, hasEnvelope, inRelease, rangeParams, sourceCte, type CandidateBucket, type DualBucket, type OldBucket, type Sql } from './passes.ts';
import { addRoots, EMPTY_ROOT, hashOf, root, rootOf, sameRoot } from './roots.ts';
import { columnType, sourceType, type PartitionRef, type Subject } from './subject.ts';

/** A slice of the first key column: (lo, hi], null = unbounded. Values as text of the key type. */
export interface KeySlice {
  lo: string | null;
  hi: string | null;
}

export const WHOLE: KeySlice = { lo: null, hi: null };

/**
 * `count` slices of about equal size, cut at the candidate's histogram of its first key column;
 * one whole slice when there is no histogram or the key type has no order we can cast back.
 */
export async function keySlices(conn: Conn, s: Subject, count: number): Promise<KeySlice[]> {
  if (count <= 1 || !hasEnvelope(s)) return [WHOLE];
  const k0 = s.key[0]!;
  const type = columnType(s, k0);
  const { rows } = await conn.query<{ h: string[] | null }>(
    `SELECT (histogram_bounds::text::${type}[])::text[] AS h FROM pg_stats WHERE schemaname = $1 AND tablename = $2 AND attname = $3`,
    [DATA_SCHEMA, generationTable(s.dataset, s.generation), k0],
  );
  const h = rows[0]?.h ?? null;
  if (!h || h.length < count * 2) return [WHOLE];
  const cuts: string[] = [];
  for (let i = 1; i < count; i++) {
    const c = h[Math.floor((h.length * i) / count)]!;
    if (cuts.at(-1) !== c) cuts.push(c);
  }
  return [null, ...cuts].map((lo, i) => ({ lo, hi: cuts[i] ?? null }));
}

/** The slice's bound on the first key column of a side (`type`: that side's column type). */
function sliceWhere(r: ReturnType<typeof rangeParams>, alias: string, k0: string, type: string, slice: KeySlice): string {
  const parts: string[] = [];
  if (slice.lo !== null) parts.push(`${col(alias, k0)} > ${r.p.add(slice.lo)}::${type}`);
  if (slice.hi !== null) parts.push(`${col(alias, k0)} <= ${r.p.add(slice.hi)}::${type}`);
  return parts.length ? parts.join(' AND ') : 'true';
}

/**
 * The stored pass over one key slice: the candidate FULL JOIN the old generation (a merge join,
 * both read in primary-key order), grouped by `(candidate partition, old partition)` encoded in
 * one bigint so the planner hashes a few hundred groups instead of sorting a million rows.
 * Without an old generation it is the candidate alone.
 */
export function storedPassSql(s: Subject, build: readonly PartitionRef[], slice: KeySlice): Sql {
  const timeType = columnType(s, s.time);
  const r = rangeParams(s, build);
  const names = s.columns.map((c) => c.name);
  const k0 = s.key[0]!;
  const old = s.oldTable !== null;
  const range = (alias: string) => inRelease(r, col(alias, s.time), timeType);
  const side = (alias: string, table: string, generation: string, where: string, extra: string) => `"gf_${alias}" AS (
  SELECT ${names.map((c) => col(alias, c)).join(', ')}${extra}
    FROM ${table} AS ${alias}
   WHERE ${alias}."generation" = ${r.p.add(generation)} AND ${where} AND ${sliceWhere(r, alias, k0, columnType(s, k0), slice)}
   ORDER BY ${col(alias, 'generation')}, ${orderByKey(alias, s.key.map((name) => ({ name })))}
)`;
  const nSide = side('n', s.candidateTable, s.generation, `((${range('n')}) OR ${col('n', s.time)} IS NULL)`, `, n."_gf_deleted" AS "gf_dead", true AS "gf_p"`);
  const oSide = old ? side('o', s.oldTable!, s.expectedActive!, `${range('o')} AND NOT o."_gf_deleted"`, `, true AS "gf_p"`) : null;
  // A live stored row; one inside the range (the old comparison's side of the candidate).
  const live = `(n."gf_p" IS NOT NULL AND NOT n."gf_dead")`;
  const inRangeLive = `(${live} AND ${col('n', s.time)} IS NOT NULL)`;
  const bn = bucket(r, col('n', s.time), timeType);
  // The old comparison puts a pair in the partition of the candidate's row when the candidate
  // has it inside the range, else in the old row's (as the old-vs-new pass always did).
  const bo = old ? `CASE WHEN ${inRangeLive} THEN ${bn} ELSE ${bucket(r, col('o', s.time), timeType)} END` : 'NULL::int';
  const M = build.length + 1;
  const nonKey = names.filter((c) => !s.key.includes(c));
  const O = (c: string) => `"gf_o${names.indexOf(c)}"`;
  // The pairs, one row each, with the group key computed in a subquery the planner keeps
  // (OFFSET 0): grouped by an expression over the rows' times, it would estimate a million
  // groups and sort a million wide rows instead of hashing a few hundred groups.
  const pairs = `SELECT coalesce(${bn}, 0)::bigint * ${M} + coalesce(${bo}, 0) AS "gf_g",
         coalesce(${live}, false) AS "gf_live", coalesce(${inRangeLive}, false) AS "gf_in", coalesce(n."gf_dead", false) AS "gf_dead",
         ${names.map((c) => col('n', c)).join(', ')}${old ? `,
         o."gf_p" IS NOT NULL AS "gf_op", ${nonKey.map((c) => `${col('o', c)} AS ${O(c)}`).join(', ')}` : ''}
    FROM "gf_n" AS n${old ? ` FULL JOIN "gf_o" AS o ON ${s.key.map((k) => `${col('n', k)} = ${col('o', k)}`).join(' AND ')}` : ''}
  OFFSET 0`;
  const liveF = `FILTER (WHERE x."gf_live")`;
  const inF = (extra: string) => `FILTER (WHERE x."gf_in" AND ${extra})`;
  const fields = [
    `count(*) ${liveF}::text AS rows`,
    `count(*) FILTER (WHERE x."gf_dead")::text AS tombstones`,
    `count(*) FILTER (WHERE x."gf_live" AND ${col('x', s.time)} IS NULL)::text AS null_time`,
    `${rootOf(hashOf(s.key, 'x'), 'x."gf_live"')} AS key_root`,
    `${rootOf(hashOf(names, 'x'), 'x."gf_live"')} AS row_root`,
    hasEnvelope(s) ? `min(${col('x', k0)}) ${liveF}::text AS key_min, max(${col('x', k0)}) ${liveF}::text AS key_max` : `NULL::text AS key_min, NULL::text AS key_max`,
    ...s.conserved.map((c, i) => `coalesce(sum(${col('x', c)}) ${liveF}, 0)::text AS "sum_${i}"`),
    ...names.map((c, i) => `count(${col('x', c)}) ${liveF}::text AS "present_${i}"`),
    ...(old
      ? [
          `count(*) FILTER (WHERE x."gf_op")::text AS old_rows`,
          `count(*) FILTER (WHERE x."gf_op" AND NOT x."gf_in")::text AS missing`,
          `count(*) ${inF('NOT x."gf_op"')}::text AS extra`,
          ...nonKey.map((c, i) => `count(*) ${inF(`x."gf_op" AND ${col('x', c)} IS DISTINCT FROM x.${O(c)}`)}::text AS "changed_${i}"`),
        ]
      : []),
  ];
  const text = `WITH ${bounds(r, timeType)},
${nSide}${oSide ? `,\n${oSide}` : ''}
SELECT x."gf_g" AS g,
       ${fields.join(',\n       ')}
  FROM (
  ${pairs}
) AS x
 GROUP BY 1`;
  return { text, values: r.p.values };
}

/**
 * The dual compute over one key slice: the transform over the source rows of the slice, grouped
 * by the partition of its output: count, row root, sums, envelope. Not the key root: a partition
 * whose count and row root equal the stored rows' has their keys too (the row hash covers the
 * key columns), and for one that differs reconcile() computes it (completeDual) before bisecting.
 */
export function dualPassSql(s: Subject, build: readonly PartitionRef[], slice: KeySlice): Sql {
  const outType = columnType(s, s.time);
  const r = rangeParams(s, build);
  const names = s.columns.map((c) => c.name);
  const k0 = s.key[0]!;
  const sums = s.conserved.map((c, i) => `coalesce(sum(${col('t', c)}), 0)::text AS "sum_${i}"`);
  const srcWhere = `${inRelease(r, col('s', s.time), sourceType(s, s.time))} AND ${sliceWhere(r, 's', k0, sourceType(s, k0), slice)}`;
  const env = hasEnvelope(s) ? `min(${col('t', k0)})::text AS key_min, max(${col('t', k0)})::text AS key_max` : 'NULL::text AS key_min, NULL::text AS key_max';
  const text = `WITH ${bounds(r, outType)},
${sourceCte(s, srcWhere)}
SELECT ${bucket(r, col('t', s.time), outType)} AS bucket, count(*)::text AS rows, ${env},
       ${rootOf(hashOf(names, 't'))} AS row_root${sums.map((x) => `, ${x}`).join('')}
  FROM (
${transformBody(s.transformSql)}
) AS t
 GROUP BY 1`;
  return { text, values: r.p.values };
}

/**
 * The dual key root of the given buckets, as the dual pass defines them (the transform over the
 * whole range, its output grouped by partition): hashed only for the rows of those buckets.
 */
export async function dualKeyRoots(conn: Conn, s: Subject, build: readonly PartitionRef[], buckets: number[]): Promise<Map<number, { count: string; root: string }>> {
  const outType = columnType(s, s.time);
  const r = rangeParams(s, build);
  const b = bucket(r, col('t', s.time), outType);
  const want = r.p.add(buckets);
  const text = `WITH ${bounds(r, outType)},
${sourceCte(s, inRelease(r, col('s', s.time), sourceType(s, s.time)))}
SELECT b, count(*)::text AS n, ${rootOf(hashOf(s.key, 't'))} AS key_root
  FROM (SELECT t.*, ${b} AS b FROM (
${transformBody(s.transformSql)}
) AS t) AS t
 WHERE b = ANY(${want}::int[])
 GROUP BY 1`;
  const { rows } = await queryUserSql<{ b: number; n: string; key_root: string }>(conn, text, r.p.values);
  return new Map(rows.map((x) => [x.b, { count: x.n, root: x.key_root }]));
}

type Row = Record<string, string | number | null>;

export async function storedPass(conn: Conn, s: Subject, build: readonly PartitionRef[], slice: KeySlice): Promise<Row[]> {
  const { text, values } = storedPassSql(s, build, slice);
  return (await conn.query<Row>(text, values)).rows;
}

export async function dualPass(conn: Conn, s: Subject, build: readonly PartitionRef[], slice: KeySlice): Promise<Row[]> {
  return (await queryUserSql<Row>(conn, dualPassSql(s, build, slice))).rows;
}

export interface MergeResult {
  candidate: CandidateBucket[];
  dual: DualBucket[];
  old: OldBucket[];
  /**
   * Dual buckets (1-based, build partitions only) whose count or row root differ from the stored
   * rows': their key root is not known yet (see dualPassSql).
   */
  dualKeysPending: number[];
}

const num = (v: string | number | null | undefined): number | null => (v === null || v === undefined ? null : Number(v));

/**
 * Add up the slices' rows into the buckets the checks read. A bucket's key envelope (the
 * smallest and largest first key column, which bisection narrows its reads with) is the
 * min/max over the slices' envelopes, taken by PostgreSQL in the key's own order.
 */
export async function mergeSlices(conn: Conn, s: Subject, build: readonly PartitionRef[], stored: Row[][], dualRows: Row[][]): Promise<MergeResult> {
  const names = s.columns.map((c) => c.name);
  const nonKey = names.filter((c) => !s.key.includes(c));
  const M = build.length + 1;
  const zeroSums = () => Object.fromEntries(s.conserved.map((c) => [c, '0']));
  const cand = new Map<number | null, CandidateBucket>();
  const dual = new Map<number | null, DualBucket>();
  const old = new Map<number | null, OldBucket>();
  const env: { side: 'a' | 'x'; bucket: number | null; min: string; max: string }[] = [];
  const str = (v: string | number | null | undefined) => String(v);
  for (const r of stored.flat()) {
    const g = BigInt(r.g!);
    const bn = Number(g / BigInt(M)) || null;
    const bo = Number(g % BigInt(M)) || null;
    let c = cand.get(bn);
    if (!c) {
      c = {
        bucket: bn,
        rows: 0n,
        tombstones: 0n,
        nullTime: 0n,
        digest: { keys: EMPTY_ROOT, rows: EMPTY_ROOT },
        sums: zeroSums(),
        nulls: Object.fromEntries(names.map((n) => [n, 0n])),
        keyMin: null,
        keyMax: null,
      };
      cand.set(bn, c);
    }
    const n = BigInt(str(r.rows));
    c.rows += n;
    c.tombstones += BigInt(str(r.tombstones));
    c.nullTime += BigInt(str(r.null_time));
    c.digest = { keys: addRoots(c.digest.keys, root(n, str(r.key_root))), rows: addRoots(c.digest.rows, root(n, str(r.row_root))) };
    for (const [i, x] of s.conserved.entries()) c.sums[x] = addDecimals([c.sums[x]!, str(r[`sum_${i}`])]);
    for (const [i, x] of names.entries()) c.nulls[x] = c.nulls[x]! + n - BigInt(str(r[`present_${i}`]));
    if (r.key_min != null && r.key_max != null) env.push({ side: 'a', bucket: bn, min: str(r.key_min), max: str(r.key_max) });
    if (s.oldTable) {
      let o = old.get(bo);
      if (!o) {
        o = { bucket: bo, rows: 0n, missing: 0n, extra: 0n, changed: Object.fromEntries(nonKey.map((x) => [x, 0n])) };
        old.set(bo, o);
      }
      o.rows += BigInt(str(r.old_rows));
      o.missing += BigInt(str(r.missing));
      o.extra += BigInt(str(r.extra));
      for (const [i, x] of nonKey.entries()) o.changed[x] = o.changed[x]! + BigInt(str(r[`changed_${i}`]));
    }
  }
  for (const r of dualRows.flat()) {
    const b = num(r.bucket);
    let d = dual.get(b);
    if (!d) {
      d = { bucket: b, rows: 0n, keyMin: null, keyMax: null, digest: { keys: EMPTY_ROOT, rows: EMPTY_ROOT }, sums: zeroSums() };
      dual.set(b, d);
    }
    const n = BigInt(str(r.rows));
    d.rows += n;
    d.digest = { keys: EMPTY_ROOT, rows: addRoots(d.digest.rows, root(n, str(r.row_root))) };
    for (const [i, x] of s.conserved.entries()) d.sums[x] = addDecimals([d.sums[x]!, str(r[`sum_${i}`])]);
    if (r.key_min != null && r.key_max != null) env.push({ side: 'x', bucket: b, min: str(r.key_min), max: str(r.key_max) });
  }
  // The dual key root where the dual rows equal the stored rows (count and row root): the
  // stored rows' key root. Elsewhere it is computed before the comparison reports it.
  const dualKeysPending: number[] = [];
  for (const d of dual.values()) {
    const c = cand.get(d.bucket);
    if (c && sameRoot(c.digest.rows, d.digest.rows)) d.digest = { keys: c.digest.keys, rows: d.digest.rows };
    else {
      d.digest = { keys: { count: d.rows, sum: 0n }, rows: d.digest.rows };
      if (d.bucket !== null) dualKeysPending.push(d.bucket);
    }
  }
  if (env.length > 0) {
    const type = columnType(s, s.key[0]!);
    const { rows } = await conn.query<{ side: 'a' | 'x'; b: number | null; lo: string; hi: string }>(
      `SELECT side, b, min(lo)::text AS lo, max(hi)::text AS hi
         FROM unnest($1::text[], $2::int[], $3::${type}[], $4::${type}[]) AS u(side, b, lo, hi)
        GROUP BY side, b`,
      [env.map((e) => e.side), env.map((e) => e.bucket), env.map((e) => e.min), env.map((e) => e.max)],
    );
    for (const e of rows) {
      const x = e.side === 'a' ? cand.get(e.b) : dual.get(e.b);
      if (x) {
        x.keyMin = e.lo;
        x.keyMax = e.hi;
      }
    }
  }
  // Groups of stored rows that took no part in the old comparison (tombstones, rows without a
  // time) make no old bucket, as in a join of the two generations' live rows in the range.
  const oldList = [...old.values()].filter((o) => o.rows + o.extra > 0n);
  return { candidate: [...cand.values()], dual: [...dual.values()], old: oldList, dualKeysPending };
}
