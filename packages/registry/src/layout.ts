// The generation layout (migration 0003): a genfill-owned parent per dataset, LIST-partitioned
// by generation, and the user's name as a view of the active generation via the pointer row.
import { quoteIdent } from '@genfill/contracts';
import { relationColumns } from './columns.ts';
import type { Conn } from './db.ts';

export const DATA_SCHEMA = 'genfill_data';
export const SYSTEM_COLUMNS = ['generation', '_gf_rev', '_gf_deleted'] as const;

export function generationTable(dataset: string, generation: string): string {
  return `${dataset}__${generation}`;
}

/** `"genfill_data"."<dataset>__<generation>"` */
export function qualifiedGenerationTable(dataset: string, generation: string): string {
  return `${quoteIdent(DATA_SCHEMA)}.${quoteIdent(generationTable(dataset, generation))}`;
}

export function qualifiedParent(dataset: string): string {
  return `${quoteIdent(DATA_SCHEMA)}.${quoteIdent(dataset)}`;
}

export async function parentExists(conn: Conn, dataset: string): Promise<boolean> {
  const { rows } = await conn.query<{ ok: boolean }>(`SELECT to_regclass($1) IS NOT NULL AS ok`, [qualifiedParent(dataset)]);
  return rows[0]!.ok;
}

/** Create the parent shaped like `template` (a relation name, e.g. a temp view). */
export async function createParent(conn: Conn, dataset: string, template: string, key: string[]): Promise<void> {
  await conn.query('SELECT genfill.create_parent($1, $2::regclass, $3)', [dataset, template, key]);
}

/** CREATE TABLE + ATTACH PARTITION of one generation; idempotent. */
export async function addGeneration(conn: Conn, dataset: string, generation: string): Promise<void> {
  await conn.query('SELECT genfill.add_generation($1, $2)', [dataset, generation]);
}

export async function createTargetView(conn: Conn, dataset: string): Promise<void> {
  await conn.query('SELECT genfill.create_target_view($1)', [dataset]);
}

export async function targetViewSql(conn: Conn, dataset: string): Promise<string> {
  const { rows } = await conn.query<{ sql: string }>('SELECT genfill.target_view_sql($1) AS sql', [dataset]);
  return rows[0]!.sql;
}

/** The dataset's data columns (everything but the system columns), in the parent's order. */
export async function dataColumns(conn: Conn, dataset: string): Promise<{ name: string; type: string }[]> {
  const columns = await relationColumns(conn, qualifiedParent(dataset), { except: SYSTEM_COLUMNS });
  return columns.map(({ name, type }) => ({ name, type }));
}
