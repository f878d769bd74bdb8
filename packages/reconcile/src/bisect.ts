// Hash bisection of a partition whose stored rows differ from the dual compute. The
// partition's rows, ordered by key, are split in half at a key; each half's (count, key
// root, row root) is computed on both sides for the left half only — the right half is the
// parent minus the left, since roots are sums. Halves that agree are dropped; a half small
// enough (or empty on one side) is compared row by row. A few bad keys in a large partition
// therefore cost about one read of the partition per side instead of a join of everything,
// and every bad key is still found: a half with a bad key cannot agree on both roots.
//
// Access paths: the candidate is read by its primary key (generation, key…) in key ranges;
// the source by its own indexes (time, key). "Rows read" counts the rows each query
// aggregates or returns: what a join would have to compare.
import type { Conn } from '@genfill/registry';
import type { FindingInput } from './findings.ts';
import { queryUserSql } from '@genfill/transform';
import { col, inRange, keyCompare, keyJson, keyText, literal, orderByKey, Params, timeBounds, transformBody, type KeyColumn } from './fragments.ts';
import { hashOf, root, rootOf, sameDigest, subtractDigest, type Digest } from './roots.ts';
import { columnType, sourceType, type PartitionRef, type Subject } from './subject.ts';

/** Key values as text; null = unbounded. A range is (lo, hi]. */
interface KeyRange {
  lo: string[] | null;
  hi: string[] | null;
}

/**
 * The smallest and largest first key column of the partition on either side, from the
 * aggregate passes: every bisection query gets it as an extra range, so the candidate's
 * primary key (generation, key…) range-scans the partition's keys instead of walking the
 * whole generation in key order. Null when the key type has no min/max.
 */
export interface Envelope {
  /** Each side's minimum (text of the key type; null for a side without rows). */
  mins: (string | null)[];
  maxes: (string | null)[];
}

interface Node extends KeyRange {
  stored: Digest;
  dual: Digest;
  depth: number;
  /** Both halves of its parent differed: the damage here is dense. */
  dense: boolean;
}

export interface BisectResult {
  findings: FindingInput[];
  rowsRead: bigint;
  queries: number;
  leaves: number;
}

const MAX_DEPTH = 64;
/**
 * Once both halves of a range differ, halving again reads about as much per level as
 * comparing the range row by row, and there are more levels to go: a dense range up to this
 * many rows (both sides) is joined directly. Bounds the size of one join.
 */
const DENSE_ROWS = 100_000;

export class Bisector {
  readonly #storedKeys: KeyColumn[];
  readonly #sourceKeys: KeyColumn[];
  readonly #names: string[];
  readonly #timeType: string;
  readonly #sourceTimeType: string;

  constructor(
    private readonly s: Subject,
    private readonly leafRows: number,
  ) {
    this.#storedKeys = s.key.map((k) => ({ name: k, type: columnType(s, k) }));
    this.#sourceKeys = s.key.map((k) => ({ name: k, type: sourceType(s, k) }));
    this.#names = s.columns.map((c) => c.name);
    this.#timeType = columnType(s, s.time);
    this.#sourceTimeType = sourceType(s, s.time);
  }

  /** `(alias.generation, keys…) > / <= (…)` for the range bounds. */
  #range(alias: string, keys: KeyColumn[], r: KeyRange, p: Params, generation: string | null): string {
    const parts: string[] = [];
    for (const [bound, op] of [[r.lo, '>'], [r.hi, '<=']] as const) {
      if (!bound) continue;
      const prefix = generation === null ? null : { expr: col(alias, 'generation'), param: p.add(generation) };
      const first = p.values.length + 1;
      for (const v of bound) p.add(v);
      parts.push(keyCompare(alias, keys, op, first, prefix));
    }
    return parts.length ? parts.join(' AND ') : 'true';
  }

  /** `alias.k0 BETWEEN least(mins) AND greatest(maxes)` of the envelope. */
  #envelope(alias: string, key: KeyColumn, e: Envelope | null, p: Params): string {
    if (!e || e.mins.every((m) => m === null) || e.maxes.every((m) => m === null)) return 'true';
    // least/greatest skip NULLs: a side without rows does not narrow the other.
    const refs = (list: (string | null)[]) => list.map((v) => `${p.add(v)}::${key.type}`).join(', ');
    return `${col(alias, key.name)} BETWEEN least(${refs(e.mins)}) AND greatest(${refs(e.maxes)})`;
  }

  /** The candidate's live rows of the partition in the key range. */
  #storedWhere(part: PartitionRef, e: Envelope | null, r: KeyRange, p: Params): string {
    const g = p.add(this.s.generation);
    const { lo, hi } = timeBounds(p, part.lower, part.upper, this.s.timezone);
    const time = inRange(col('n', this.s.time), this.#timeType, lo, hi);
    return `${col('n', 'generation')} = ${g} AND ${time} AND NOT n."_gf_deleted"
       AND ${this.#envelope('n', this.#storedKeys[0]!, e, p)} AND ${this.#range('n', this.#storedKeys, r, p, this.s.generation)}`;
  }

  /** `WITH source AS (…)` restricted to the partition and key range, and the filter on the output. */
  #dual(part: PartitionRef, e: Envelope | null, r: KeyRange, p: Params): { withSource: string; outWhere: string } {
    const { lo, hi } = timeBounds(p, part.lower, part.upper, this.s.timezone);
    const srcTime = inRange(col('s', this.s.time), this.#sourceTimeType, lo, hi);
    const srcEnv = this.#envelope('s', this.#sourceKeys[0]!, e, p);
    const srcKeys = this.#range('s', this.#sourceKeys, r, p, null);
    const outTime = inRange(col('t', this.s.time), this.#timeType, lo, hi);
    const outKeys = this.#range('t', this.#storedKeys, r, p, null);
    return {
      withSource: `WITH source AS (SELECT * FROM ${this.s.sourceRel} AS s WHERE ${srcTime} AND ${srcEnv} AND ${srcKeys})`,
      outWhere: `${outTime} AND ${outKeys}`,
    };
  }

  /** The first `limit` stored rows of the range in key order: their digest and last key. */
  async storedHalf(conn: Conn, p: PartitionRef, e: Envelope | null, r: KeyRange, limit: number): Promise<{ digest: Digest; split: string[] | null }> {
    const q = new Params();
    const where = this.#storedWhere(p, e, r, q);
    const lim = q.add(limit);
    const { rows } = await conn.query<{ n: string; kr: string; rr: string; last: string[] | null }>(
      `WITH h AS MATERIALIZED (
  SELECT ${keyText('n', this.#storedKeys)} AS k, ${hashOf(this.s.key, 'n')} AS kh, ${hashOf(this.#names, 'n')} AS rh,
         row_number() OVER (ORDER BY ${col('n', 'generation')}, ${orderByKey('n', this.#storedKeys)}) AS i
    FROM ${this.s.candidateTable} AS n
   WHERE ${where}
   ORDER BY ${col('n', 'generation')}, ${orderByKey('n', this.#storedKeys)}
   LIMIT ${lim})
SELECT count(*)::text AS n, ${rootOf('h.kh')} AS kr, ${rootOf('h.rh')} AS rr, (SELECT k FROM h ORDER BY i DESC LIMIT 1) AS last FROM h`,
      q.values,
    );
    const x = rows[0]!;
    return { digest: { keys: root(x.n, x.kr), rows: root(x.n, x.rr) }, split: x.last };
  }

  async storedDigest(conn: Conn, p: PartitionRef, e: Envelope | null, r: KeyRange): Promise<Digest> {
    const q = new Params();
    const where = this.#storedWhere(p, e, r, q);
    const { rows } = await conn.query<{ n: string; kr: string; rr: string }>(
      `SELECT count(*)::text AS n, ${rootOf(hashOf(this.s.key, 'n'))} AS kr, ${rootOf(hashOf(this.#names, 'n'))} AS rr
         FROM ${this.s.candidateTable} AS n WHERE ${where}`,
      q.values,
    );
    const x = rows[0]!;
    return { keys: root(x.n, x.kr), rows: root(x.n, x.rr) };
  }

  async dualDigest(conn: Conn, p: PartitionRef, e: Envelope | null, r: KeyRange): Promise<Digest> {
    const q = new Params();
    const d = this.#dual(p, e, r, q);
    const { rows } = await queryUserSql<{ n: string; kr: string; rr: string }>(
      conn,
      `${d.withSource}
SELECT count(*)::text AS n, ${rootOf(hashOf(this.s.key, 't'))} AS kr, ${rootOf(hashOf(this.#names, 't'))} AS rr
  FROM (
${transformBody(this.s.transformSql)}
) AS t
 WHERE ${d.outWhere}`,
      q.values,
    );
    const x = rows[0]!;
    return { keys: root(x.n, x.kr), rows: root(x.n, x.rr) };
  }

  /** The key at `offset` in the source rows of the range: a split point when the candidate has too few rows. */
  async sourceKeyAt(conn: Conn, p: PartitionRef, e: Envelope | null, r: KeyRange, offset: number): Promise<string[] | null> {
    const q = new Params();
    const { lo, hi } = timeBounds(q, p.lower, p.upper, this.s.timezone);
    const time = inRange(col('s', this.s.time), this.#sourceTimeType, lo, hi);
    const env = this.#envelope('s', this.#sourceKeys[0]!, e, q);
    const keys = this.#range('s', this.#sourceKeys, r, q, null);
    const off = q.add(offset);
    const { rows } = await conn.query<{ k: string[] }>(
      `SELECT ${keyText('s', this.#sourceKeys)} AS k FROM ${this.s.sourceRel} AS s
        WHERE ${time} AND ${env} AND ${keys} ORDER BY ${orderByKey('s', this.#sourceKeys)} OFFSET ${off} LIMIT 1`,
      q.values,
    );
    return rows[0]?.k ?? null;
  }

  /**
   * Row by row, in SQL: the stored rows of the range against the dual compute's, joined by
   * key, returning only what differs — keys on one side only, keys the transform produced
   * more than once, and for the rest every column whose canonical value differs.
   */
  async diffRows(conn: Conn, p: PartitionRef, e: Envelope | null, r: KeyRange): Promise<DiffRow[]> {
    const q = new Params();
    const d = this.#dual(p, e, r, q);
    const where = this.#storedWhere(p, e, r, q);
    const keys = this.#storedKeys;
    const k0 = keys[0]!.name;
    const canon = (alias: string) => `ARRAY[${this.#names.map((c) => `genfill.canon(${col(alias, c)})`).join(', ')}]::text[]`;
    const differs = this.#names.map((c, i) => `CASE WHEN n.v[${i + 1}] IS DISTINCT FROM d.v[${i + 1}] THEN ${literal(c)} END`);
    const { rows } = await queryUserSql<DiffRow>(
      conn,
      `${d.withSource},
d AS (
  SELECT ${keys.map((k) => col('t', k.name)).join(', ')}, min(${canon('t')}) AS v, count(*) AS copies
    FROM (
${transformBody(this.s.transformSql)}
) AS t
   WHERE ${d.outWhere}
   GROUP BY ${keys.map((k) => col('t', k.name)).join(', ')}
),
n AS (SELECT ${keys.map((k) => col('n', k.name)).join(', ')}, ${canon('n')} AS v FROM ${this.s.candidateTable} AS n WHERE ${where})
SELECT CASE WHEN ${col('n', k0)} IS NULL THEN 'missing' WHEN ${col('d', k0)} IS NULL THEN 'extra'
            WHEN d.copies > 1 THEN 'duplicate' ELSE 'value' END AS kind,
       CASE WHEN ${col('n', k0)} IS NULL THEN ${keyJson('d', keys)} ELSE ${keyJson('n', keys)} END AS kj,
       CASE WHEN ${col('n', k0)} IS NOT NULL AND ${col('d', k0)} IS NOT NULL AND d.copies = 1
            THEN array_remove(ARRAY[${differs.join(', ')}]::text[], NULL) END AS columns
  FROM n FULL JOIN d ON ${keys.map((k) => `${col('n', k.name)} = ${col('d', k.name)}`).join(' AND ')}
 WHERE ${col('n', k0)} IS NULL OR ${col('d', k0)} IS NULL OR d.copies > 1 OR n.v IS DISTINCT FROM d.v
 ORDER BY ${keys.map((k) => `coalesce(${col('n', k.name)}, ${col('d', k.name)})`).join(', ')}`,
      q.values,
    );
    return rows;
  }

  /** Narrow one partition down to its mismatched keys. */
  async partition(conn: Conn, p: PartitionRef, e: Envelope | null, stored: Digest, dual: Digest): Promise<BisectResult> {
    const out: BisectResult = { findings: [], rowsRead: 0n, queries: 0, leaves: 0 };
    const stack: Node[] = [{ lo: null, hi: null, stored, dual, depth: 0, dense: false }];
    while (stack.length > 0) {
      const node = stack.pop()!;
      if (sameDigest(node.stored, node.dual)) continue;
      const sc = Number(node.stored.rows.count);
      const dc = Number(node.dual.rows.count);
      const small = sc + dc <= this.leafRows || (node.dense && sc + dc <= DENSE_ROWS);
      if (small || sc === 0 || dc === 0 || node.depth >= MAX_DEPTH) {
        await this.#leaf(conn, p, e, node, out);
        continue;
      }
      let split: string[] | null;
      let leftStored: Digest;
      let leftDual: Digest;
      if (sc >= dc) {
        const half = await this.storedHalf(conn, p, e, node, Math.ceil(sc / 2));
        split = half.split;
        leftStored = half.digest;
        out.queries++;
        out.rowsRead += half.digest.rows.count;
        if (!split) {
          await this.#leaf(conn, p, e, node, out);
          continue;
        }
        leftDual = await this.dualDigest(conn, p, e, { lo: node.lo, hi: split });
        out.queries++;
        out.rowsRead += leftDual.rows.count;
      } else {
        const offset = Math.floor(dc / 2) - 1;
        split = await this.sourceKeyAt(conn, p, e, node, offset);
        out.queries++;
        out.rowsRead += BigInt(offset + 1);
        if (!split) {
          await this.#leaf(conn, p, e, node, out);
          continue;
        }
        leftDual = await this.dualDigest(conn, p, e, { lo: node.lo, hi: split });
        leftStored = await this.storedDigest(conn, p, e, { lo: node.lo, hi: split });
        out.queries += 2;
        out.rowsRead += leftDual.rows.count + leftStored.rows.count;
      }
      const right = { stored: subtractDigest(node.stored, leftStored), dual: subtractDigest(node.dual, leftDual) };
      // A split that leaves everything on one side makes no progress: compare rows instead.
      const stuck = (leftStored.rows.count === 0n && leftDual.rows.count === 0n) || (right.stored.rows.count === 0n && right.dual.rows.count === 0n);
      if (stuck) {
        await this.#leaf(conn, p, e, node, out);
        continue;
      }
      const dense = !sameDigest(leftStored, leftDual) && !sameDigest(right.stored, right.dual);
      if (dense && sc + dc <= DENSE_ROWS) {
        await this.#leaf(conn, p, e, node, out);
        continue;
      }
      stack.push({ lo: split, hi: node.hi, ...right, depth: node.depth + 1, dense });
      stack.push({ lo: node.lo, hi: split, stored: leftStored, dual: leftDual, depth: node.depth + 1, dense });
    }
    return out;
  }

  async #leaf(conn: Conn, p: PartitionRef, e: Envelope | null, node: Node, out: BisectResult): Promise<void> {
    const rows = await this.diffRows(conn, p, e, node);
    out.queries++;
    out.leaves++;
    // The join compares every row of the range on both sides.
    out.rowsRead += node.stored.rows.count + node.dual.rows.count;
    for (const r of rows) {
      const columns = r.kind === 'value' ? (r.columns ?? []) : [undefined];
      for (const column of columns) out.findings.push({ partition: p.id, keyJson: r.kj, kind: r.kind, check: 'dual_compute', ...(column ? { column } : {}) });
    }
  }
}

export interface DiffRow {
  kind: 'missing' | 'extra' | 'duplicate' | 'value';
  kj: string;
  columns: string[] | null;
}
