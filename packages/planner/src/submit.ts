// `release validate` and `release submit`. Bad input writes nothing: every check runs before
// the one transaction that records the release.
import {
  InvalidInputError,
  loadRelease,
  RangeOverlapError,
  RefusedError,
  ReleaseConflictError,
  type LoadedRelease,
  type Problem,
} from '@genfill/contracts';
import {
  findDataset,
  findOverlapping,
  findRelease,
  insertDataset,
  insertRelease,
  insertTransform,
  withTransaction,
  type Db,
} from '@genfill/registry';
import { checkTransformStatic } from '@genfill/transform';
import { checkAgainstDatabase } from './admission.ts';

export interface ValidateResult {
  loaded: LoadedRelease;
  /** False when the database checks were skipped (--offline). */
  checkedDatabase: boolean;
}

/** Throws InvalidInputError with every problem found; reads the database but never writes. */
export async function validateRelease(file: string, db: Db | null): Promise<ValidateResult> {
  const loaded = loadRelease(file);
  const problems: Problem[] = [...(await checkTransformStatic(loaded.transformSql)).problems];
  if (db) {
    const conn = await db.connect();
    try {
      problems.push(...(await checkAgainstDatabase(conn, loaded)));
    } finally {
      conn.release();
    }
  }
  if (problems.length > 0) throw new InvalidInputError(problems);
  return { loaded, checkedDatabase: db !== null };
}

export interface SubmitResult {
  release: string;
  digest: string;
  status: 'submitted' | 'unchanged';
  partitions: number;
}

function refuseOtherContent(existing: { digest: string } | null, loaded: LoadedRelease): boolean {
  if (!existing) return false;
  if (existing.digest !== loaded.digest) throw new ReleaseConflictError(loaded.spec.release, existing.digest, loaded.digest);
  return true;
}

export async function submitRelease(file: string, db: Db): Promise<SubmitResult> {
  const loaded = loadRelease(file);
  const { spec } = loaded;
  const unchanged: SubmitResult = { release: spec.release, digest: loaded.digest, status: 'unchanged', partitions: loaded.grid.length };
  // Identical content is a no-op even if the database has moved on since.
  const before = await db.query<{ digest: string }>('SELECT digest FROM genfill.releases WHERE id = $1', [spec.release]);
  if (refuseOtherContent(before.rows[0] ?? null, loaded)) return unchanged;

  await validateRelease(file, db);

  try {
    return await withTransaction(db, async (conn) => {
      // Serialise submissions per dataset so the overlap check and the dataset row agree.
      await conn.query(`SELECT pg_advisory_xact_lock(hashtextextended('genfill:dataset:' || $1, 0))`, [spec.dataset]);
      if (refuseOtherContent(await findRelease(conn, spec.release), loaded)) return unchanged;

      const dataset = await findDataset(conn, spec.dataset);
      if (dataset) {
        const mismatches: string[] = [];
        if (dataset.source_table !== spec.source.table) mismatches.push(`source.table is ${dataset.source_table}`);
        if (dataset.target_table !== spec.target.table) mismatches.push(`target.table is ${dataset.target_table}`);
        if (dataset.time_column !== spec.source.time) mismatches.push(`source.time is ${dataset.time_column}`);
        if (dataset.key_columns.join(',') !== spec.source.key.join(',')) mismatches.push(`source.key is [${dataset.key_columns.join(', ')}]`);
        if (mismatches.length > 0) {
          throw new RefusedError(`dataset ${spec.dataset} is registered with other settings: ${mismatches.join('; ')}`);
        }
      } else {
        const owner = await conn.query<{ name: string }>('SELECT name FROM genfill.datasets WHERE target_table = $1', [spec.target.table]);
        if (owner.rows[0]) {
          throw new RefusedError(`${spec.target.table} is already the target of dataset ${owner.rows[0].name}; a release of it must name dataset ${owner.rows[0].name}`);
        }
        await insertDataset(conn, {
          name: spec.dataset,
          targetTable: spec.target.table,
          sourceTable: spec.source.table,
          key: spec.source.key,
          time: spec.source.time,
        });
      }
      const overlapping = await findOverlapping(conn, {
        dataset: spec.dataset,
        generation: spec.target.generation,
        from: spec.range.from,
        to: spec.range.to,
        exceptId: spec.release,
      });
      if (overlapping[0]) throw new RangeOverlapError(spec.release, overlapping[0].id, overlapping[0].range);

      await insertTransform(conn, loaded.transformDigest, loaded.transformSql);
      await insertRelease(conn, { spec, digest: loaded.digest, transformDigest: loaded.transformDigest });
      return { ...unchanged, status: 'submitted' as const };
    });
  } catch (err) {
    // The exclusion constraint is the backstop for a race the advisory lock cannot see.
    if ((err as { code?: string }).code === '23P01') throw new RangeOverlapError(spec.release, '(a concurrent submission)', '');
    if ((err as { code?: string }).code === '23505' && (err as { constraint?: string }).constraint === 'releases_pkey') {
      const again = await db.query<{ digest: string }>('SELECT digest FROM genfill.releases WHERE id = $1', [spec.release]);
      if (refuseOtherContent(again.rows[0] ?? null, loaded)) return unchanged;
    }
    throw err;
  }
}
