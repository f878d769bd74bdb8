import { RefusedError } from '@genfill/contracts';
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
  state: 'CANDIDATE' | 'ACTIVE' | 'RETAINED' | 'RETIRED' | 'ABANDONED';
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

/** A cancelled release of a generation, with the partitions it committed there before the cancel. */
interface CancelledWriter {
  release: string;
  partitions: number;
  /** Its cancel moved the generation to ABANDONED (the cancel's log detail says so). */
  abandoned: boolean;
}

async function cancelledWriters(conn: Conn, dataset: string, generation: string): Promise<CancelledWriter[]> {
  const { rows } = await conn.query<CancelledWriter>(
    `SELECT r.id AS release,
            (SELECT count(DISTINCT c.partition)::int FROM genfill.receipts c WHERE c.release = r.id) AS partitions,
            EXISTS (SELECT 1 FROM genfill.release_log l
                     WHERE l.release = r.id AND l.action = 'cancel' AND l.detail->>'abandonedGeneration' = r.generation) AS abandoned
       FROM genfill.releases r
      WHERE r.dataset = $1 AND r.generation = $2 AND r.state = 'CANCELLED'
      ORDER BY r.state_changed_at DESC, r.id`,
    [dataset, generation],
  );
  return rows;
}

/**
 * Why a generation cannot take another release, or null. A cancelled release's rows stay in
 * its generation (nothing deletes them), and a later release would inherit them: outside its
 * range they are findings no repair clears. Its receipts are the evidence; a generation
 * ABANDONED by a cancel is refused even when nothing was built yet.
 */
function inheritedRefusal(g: { dataset: string; generation: string; release: string }, state: string | undefined, cancelled: CancelledWriter[]): string | null {
  const writers = cancelled.filter((w) => w.partitions > 0);
  if (state !== 'ABANDONED' && writers.length === 0) return null;
  const fix = `submit a new release naming a fresh generation (target.generation) and plan that one`;
  const where = `generation ${g.generation} of dataset ${g.dataset}`;
  if (writers.length > 0) {
    const named = writers.map((w) => `${w.release} (${w.partitions} partition${w.partitions === 1 ? '' : 's'} built before the cancel)`).join(', ');
    const abandoned = state === 'ABANDONED' ? ' and is ABANDONED' : '';
    return `${where} holds rows of cancelled release ${named}${abandoned}; release ${g.release} would inherit them: ${fix}`;
  }
  const by = cancelled.find((w) => w.abandoned) ?? cancelled[0];
  return `${where} is ABANDONED${by ? ` (release ${by.release} was cancelled)` : ''}; release ${g.release} cannot build into it: ${fix}`;
}

/**
 * Record a release's range in its candidate generation, creating it on first use. Refused
 * (nothing written) for a generation that is ACTIVE or RETIRED, ABANDONED, or holding rows of
 * a cancelled release. The generation's row lock orders this against genfill.cancel_release,
 * which abandons a candidate no other open release fills.
 */
export async function upsertCandidateGeneration(
  conn: Conn,
  g: { dataset: string; generation: string; release: string; transformMap: TransformRange[] },
): Promise<void> {
  const { rows } = await conn.query<{ state: GenerationRow['state'] }>(
    'SELECT state FROM genfill.generations WHERE dataset = $1 AND generation = $2 FOR UPDATE',
    [g.dataset, g.generation],
  );
  const state = rows[0]?.state;
  const inherited = inheritedRefusal(g, state, await cancelledWriters(conn, g.dataset, g.generation));
  if (inherited) throw new RefusedError(inherited);
  if (state !== undefined && state !== 'CANDIDATE') {
    throw new RefusedError(`generation ${g.generation} of ${g.dataset} is ${state}; a release builds a new candidate generation`);
  }
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

// Stored transform text is read only through @genfill/transform's loadAdmittedTransform, which
// checks it again before every use (issue 28); the registry has no reader of its own for it.

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
