// SQL builders over the one row-hash definition (migration 0002): genfill.canon per column,
// genfill.row_hash over the canonical texts, and a root = (count, sum of hashes mod 2^64).
// A sum is order-independent and, unlike XOR, does not cancel duplicate pairs.
import { quoteIdent, quoteQualified } from '@genfill/contracts';
import { relationColumns } from './columns.ts';
import type { Conn } from './db.ts';

export const TWO_TO_64 = '18446744073709551616';

/** `genfill.row_hash(ARRAY[genfill.canon(a."x"), …])` over columns in the given order. */
export function rowHashExpr(columns: readonly string[], alias?: string): string {
  const ref = (c: string) => (alias ? `${quoteIdent(alias)}.${quoteIdent(c)}` : quoteIdent(c));
  return `genfill.row_hash(ARRAY[${columns.map((c) => `genfill.canon(${ref(c)})`).join(', ')}]::text[])`;
}

/** Aggregate expression: the unsigned sum of 64-bit hashes modulo 2^64, 0 for no rows. */
export function rootAgg(hashExpr: string): string {
  return `coalesce(mod(mod(sum(${hashExpr}), ${TWO_TO_64}) + ${TWO_TO_64}, ${TWO_TO_64}), 0)`;
}

export interface ContentHash {
  relation: string;
  rowCount: string;
  contentHash: string;
}

/** A dependency table's content: row count and root over every column, in attnum order. */
export async function contentHash(conn: Conn, relation: string): Promise<ContentHash> {
  const cols = await relationColumns(conn, relation);
  const { rows } = await conn.query<{ n: string; root: string }>(
    `SELECT count(*)::text AS n, ${rootAgg(rowHashExpr(cols.map((c) => c.name), 't'))}::text AS root
       FROM ${quoteQualified(relation)} AS t`,
  );
  return { relation, rowCount: rows[0]!.n, contentHash: rows[0]!.root };
}
