// `release validate` and `release submit`. Bad input writes nothing: every check runs before
// the one transaction that records the release.
import { InvalidInputError, loadRelease, ReleaseConflictError, type LoadedRelease, type Problem } from '@genfill/contracts';
import { submitReleaseVerb, type Db } from '@genfill/registry';
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

  // One verb function (genfill.submit_release) does the write under the dataset's lock: the
  // dataset row, the overlap check, the transform and the release, recorded as the caller.
  const status = await submitReleaseVerb(db, { spec, digest: loaded.digest, transformSql: loaded.transformSql });
  return { ...unchanged, status };
}
