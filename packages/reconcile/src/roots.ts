// Roots, computed by the reconciler itself. The definition is shared (SPEC "Row hash": the
// SQL function genfill.row_hash over genfill.canon of each column), the code is not: these
// builders are written apart from the ones the workers use, so a slip in either shows up as
// a mismatch instead of agreeing with itself.
//
// A root is (count, sum of 64-bit hashes mod 2^64). A sum is order-independent and, unlike
// XOR, does not cancel pairs: {a, b, b} and {a, c, c} have the same XOR (a) but different sums.
// Sums also subtract, which is what lets bisection read one half and derive the other.
import { quoteIdent } from '@genfill/contracts';

export const MOD_64 = 1n << 64n;
const MOD_64_SQL = '18446744073709551616';

/** `genfill.row_hash(ARRAY[genfill.canon(<alias>."c1"), …]::text[])`, columns in the given order. */
export function hashOf(columns: readonly string[], alias: string): string {
  if (columns.length === 0) throw new Error('a row hash needs at least one column');
  const cols = columns.map((c) => `genfill.canon(${quoteIdent(alias)}.${quoteIdent(c)})`);
  return `genfill.row_hash(ARRAY[${cols.join(', ')}]::text[])`;
}

/**
 * The root of a bigint hash expression over a group: unsigned sum mod 2^64, 0 when empty,
 * as text. `filter` restricts the rows summed (an aggregate FILTER clause).
 */
export function rootOf(hashExpr: string, filter?: string): string {
  const sum = `sum(${hashExpr})${filter ? ` FILTER (WHERE ${filter})` : ''}`;
  return `coalesce(mod(mod(${sum}, ${MOD_64_SQL}) + ${MOD_64_SQL}, ${MOD_64_SQL}), 0)::numeric(20, 0)::text`;
}

export interface Root {
  count: bigint;
  /** Unsigned, in [0, 2^64). */
  sum: bigint;
}

export const EMPTY_ROOT: Root = { count: 0n, sum: 0n };

function norm(x: bigint): bigint {
  return ((x % MOD_64) + MOD_64) % MOD_64;
}

/** A root from the counts and sums SQL returns as text. */
export function root(count: string | number | bigint, sum: string | number | bigint): Root {
  return { count: BigInt(count), sum: norm(BigInt(sum)) };
}

/** The root of a list of signed 64-bit hashes (what genfill.row_hash returns). */
export function rootOfHashes(hashes: readonly (bigint | string)[]): Root {
  let sum = 0n;
  for (const h of hashes) sum += BigInt(h);
  return { count: BigInt(hashes.length), sum: norm(sum) };
}

export function addRoots(a: Root, b: Root): Root {
  return { count: a.count + b.count, sum: norm(a.sum + b.sum) };
}

/** The root of the rows in `whole` that are not in `part` (part must be a subset). */
export function subtractRoot(whole: Root, part: Root): Root {
  return { count: whole.count - part.count, sum: norm(whole.sum - part.sum) };
}

export function sameRoot(a: Root, b: Root): boolean {
  return a.count === b.count && a.sum === b.sum;
}

/** What a side of a comparison holds over one key range: its key root and row root. */
export interface Digest {
  keys: Root;
  rows: Root;
}

export const EMPTY_DIGEST: Digest = { keys: EMPTY_ROOT, rows: EMPTY_ROOT };

export function sameDigest(a: Digest, b: Digest): boolean {
  return sameRoot(a.keys, b.keys) && sameRoot(a.rows, b.rows);
}

export function subtractDigest(whole: Digest, part: Digest): Digest {
  return { keys: subtractRoot(whole.keys, part.keys), rows: subtractRoot(whole.rows, part.rows) };
}

export function addDigests(a: Digest, b: Digest): Digest {
  return { keys: addRoots(a.keys, b.keys), rows: addRoots(a.rows, b.rows) };
}

export function rootJson(r: Root): { count: string; root: string } {
  return { count: r.count.toString(), root: r.sum.toString() };
}
