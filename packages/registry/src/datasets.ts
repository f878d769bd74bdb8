import type { Conn } from './db.ts';

export interface DatasetRow {
  name: string;
  target_table: string;
  source_table: string;
  key_columns: string[];
  time_column: string;
  active_generation: string | null;
  ingress_state: 'OPEN' | 'SEALED';
  ingress_epoch: string;
}

export async function findDataset(conn: Conn, name: string): Promise<DatasetRow | null> {
  const { rows } = await conn.query<DatasetRow>(
    `SELECT name, target_table, source_table, key_columns, time_column, active_generation, ingress_state, ingress_epoch
       FROM genfill.datasets WHERE name = $1`,
    [name],
  );
  return rows[0] ?? null;
}

export async function insertDataset(
  conn: Conn,
  d: { name: string; targetTable: string; sourceTable: string; key: string[]; time: string },
): Promise<void> {
  await conn.query(
    `INSERT INTO genfill.datasets (name, target_table, source_table, key_columns, time_column)
     VALUES ($1, $2, $3, $4, $5)`,
    [d.name, d.targetTable, d.sourceTable, d.key, d.time],
  );
}

export interface TransformRange {
  /** Inclusive lower bound (UTC ISO), null for unbounded. */
  from: string | null;
  /** Exclusive upper bound (UTC ISO), null for unbounded. */
  to: string | null;
  transform: string;
  release: string | null;
}

export interface GenerationRow {
  dataset: string;
  generation: string;
  state: 'CANDIDATE' | 'ACTIVE' | 'RETIRED' | 'ABANDONED';
  created_by_release: string | null;
  transform_map: TransformRange[];
}

export async function findGeneration(conn: Conn, dataset: string, generation: string): Promise<GenerationRow | null> {
  const { rows } = await conn.query<GenerationRow>(
    `SELECT dataset, generation, state, created_by_release, transform_map
       FROM genfill.generations WHERE dataset = $1 AND generation = $2`,
    [dataset, generation],
  );
  return rows[0] ?? null;
}

export async function upsertCandidateGeneration(
  conn: Conn,
  g: { dataset: string; generation: string; release: string; transformMap: TransformRange[] },
): Promise<void> {
  await conn.query(
    `INSERT INTO genfill.generations (dataset, generation, created_by_release, transform_map)
     VALUES ($1, $2, $3, $4)
     ON CONFLICT (dataset, generation) DO UPDATE SET transform_map = EXCLUDED.transform_map
       WHERE genfill.generations.state = 'CANDIDATE'`,
    [g.dataset, g.generation, g.release, JSON.stringify(g.transformMap)],
  );
}

export async function insertTransform(conn: Conn, digest: string, sql: string): Promise<void> {
  await conn.query('INSERT INTO genfill.transforms (digest, sql) VALUES ($1, $2) ON CONFLICT (digest) DO NOTHING', [digest, sql]);
}

export async function getTransformSql(conn: Conn, digest: string): Promise<string> {
  const { rows } = await conn.query<{ sql: string }>('SELECT sql FROM genfill.transforms WHERE digest = $1', [digest]);
  if (!rows[0]) throw new Error(`transform ${digest} is not in the registry`);
  return rows[0].sql;
}

/**
 * The transform map of a new generation: the release's transform inside [from, to), the
 * base generation's map outside it (clipped). Sorted and contiguous when the base is.
 */
export function overlayTransformMap(base: TransformRange[], inside: TransformRange): TransformRange[] {
  const lo = (s: string | null): number => (s === null ? -Infinity : Date.parse(s));
  const hi = (s: string | null): number => (s === null ? Infinity : Date.parse(s));
  const before = base
    .filter((r) => lo(r.from) < lo(inside.from))
    .map((r) => ({ ...r, to: hi(r.to) <= lo(inside.from) ? r.to : inside.from }));
  const after = base
    .filter((r) => hi(r.to) > hi(inside.to))
    .map((r) => ({ ...r, from: lo(r.from) >= hi(inside.to) ? r.from : inside.to }));
  return [...before, inside, ...after];
}
