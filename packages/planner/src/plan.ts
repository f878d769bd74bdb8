// `genfill plan`: release → deterministic manifest. DRAFT → SNAPSHOT_PINNED pins dependency
// hashes, stores every partition and a coverage proof re-derived from the stored rows, and
// records the candidate generation with its transform map. Safe to run again at any time and
// twice at once: the second run waits on the release's lock and finds the manifest there.
//
// The grid is computed by the database in one INSERT … SELECT (registry insertGrid): a
// ten-year hourly release is 87,672 rows that need not cross the wire twice. The reference
// stays Temporal's (contracts plannedGrid: the count and the boundaries' hash, without the
// partition list); the proof re-derived in SQL from the stored rows must hash the same, so a
// difference between the server's tzdata and Temporal's refuses the plan instead of storing a
// grid `release validate` did not show.
//
// The release's transform is untrusted input here as everywhere (issue 28): before anything is
// planned the database re-checks that its submitter may still read what it reads
// (genfill.transform_admissible) and the text is admitted again (loadAdmittedTransform); the
// template view is created over the extended protocol, which refuses a second statement.
import { errorFromPg, plannedGrid, quoteQualified, RefusedError, SQLSTATE, type CoverageProof } from '@genfill/contracts';
import { loadAdmittedTransform, queryUserSql, wrapTransform } from '@genfill/transform';
import { uncapturedDependencies } from './admission.ts';
import { carryPartitions } from './carry.ts';
import {
  addGeneration,
  casTransition,
  createParent,
  createTargetView,
  parentExists,
  contentHash,
  dependencyPins,
  findDataset,
  findGeneration,
  findManifest,
  getRelease,
  insertDependencyPin,
  insertManifest,
  insertGrid,
  insertPartitions,
  manifestEnds,
  overlayTransformMap,
  RELEASE_ACTIONS,
  rangeUnion,
  storedCoverage,
  upsertCandidateGeneration,
  withTransaction,
  type Conn,
  type Db,
  type ReleaseRow,
  type TransformRange,
} from '@genfill/registry';
import { takeLock } from '@genfill/registry';

export interface PlanResult {
  release: string;
  status: 'planned' | 'already-planned';
  state: string;
  /** Build and carry partitions. */
  partitions: number;
  /** Of which carry chunks (outside [from, to), copied from the active generation). */
  carry: number;
  /** The release floor: part of the log's pruning horizon until the release ends; every watermark contains it. */
  floor: string | null;
  first: { id: string; lower: string; upper: string } | null;
  last: { id: string; lower: string; upper: string } | null;
  coverage: CoverageProof & { rangeUnion?: string[] };
  dependencies: { relation: string; row_count: string; content_hash: string }[];
}

async function baseTransformMap(conn: Conn, release: ReleaseRow): Promise<TransformRange[]> {
  const dataset = await findDataset(conn, release.dataset);
  if (!dataset) throw new RefusedError(`dataset ${release.dataset} is not registered`);
  if (release.expected_active === null) {
    if (dataset.active_generation !== null) {
      throw new RefusedError(
        `dataset ${release.dataset} already has active generation ${dataset.active_generation}, but release ${release.id} declares expectedActive: null; submit a release that names it`,
      );
    }
    return [];
  }
  const base = await findGeneration(conn, release.dataset, release.expected_active);
  if (!base) {
    throw new RefusedError(
      `dataset ${release.dataset} has no generation ${release.expected_active} (the release's expectedActive): adopt the existing table first with \`genfill dataset adopt\``,
    );
  }
  if (dataset.active_generation !== release.expected_active) {
    throw new RefusedError(
      `dataset ${release.dataset}'s active generation is ${dataset.active_generation ?? 'none'}, not ${release.expected_active} as release ${release.id} expects`,
    );
  }
  return base.transform_map;
}

/**
 * A release is planned only while its submitter may read what its transform reads (checked by
 * the database, as the owner) and its stored text passes admission: both refuse before anything
 * is written, with a TransformRefusedError.
 */
async function admissible(conn: Conn, release: ReleaseRow): Promise<void> {
  try {
    await conn.query('SELECT genfill.transform_admissible($1)', [release.id]);
  } catch (err) {
    throw errorFromPg(err, { release: release.id });
  }
  await loadAdmittedTransform(conn, { digest: release.transform_digest, release: release.id });
}

/**
 * Every declared dependency is captured, or the plan is refused before anything is written: a
 * change to an uncaptured one would reach no writer of a generation (issue 29). Capture needs
 * the table's owner, which the planner is not: the refusal prints the command for the owner.
 */
async function dependenciesCaptured(conn: Conn, release: ReleaseRow): Promise<void> {
  const missing = await uncapturedDependencies(conn, release.spec.dependencies);
  if (missing.length === 0) return;
  throw new RefusedError(
    `release ${release.id} declares ${missing.length === 1 ? 'a dependency' : 'dependencies'} that ${missing.length === 1 ? 'is' : 'are'} not captured ` +
      `(${missing.join(', ')}): a change to ${missing.length === 1 ? 'it' : 'them'} would go unseen. As the table's owner run ` +
      `${missing.map((t) => `\`genfill capture install ${t}\``).join(' and ')}, then plan again`,
  );
}

async function summary(conn: Conn, release: ReleaseRow, status: PlanResult['status']): Promise<PlanResult> {
  const manifest = await findManifest(conn, release.id);
  if (!manifest) throw new Error(`release ${release.id} is ${release.state} but has no manifest`);
  const ends = await manifestEnds(conn, release.id);
  const { rows: floor } = await conn.query<{ floor: string | null }>('SELECT floor::text FROM genfill.release_floors WHERE release = $1', [release.id]);
  return {
    release: release.id,
    status,
    state: release.state,
    partitions: manifest.partition_count,
    carry: ends.carry,
    floor: floor[0]?.floor ?? null,
    first: ends.first,
    last: ends.last,
    coverage: manifest.coverage_proof,
    dependencies: await dependencyPins(conn, release.id),
  };
}

/**
 * The candidate's table: for a first generation the parent is shaped from the transform's
 * output (a temporary view of it) and the user's name becomes the view of the pointer row.
 */
async function createLayout(conn: Conn, release: ReleaseRow): Promise<void> {
  const spec = release.spec;
  if (!(await parentExists(conn, release.dataset))) {
    const { sql } = await loadAdmittedTransform(conn, { digest: release.transform_digest, release: release.id });
    await queryUserSql(conn, `CREATE TEMP VIEW genfill_plan_template AS ${wrapTransform(sql, `SELECT * FROM ${quoteQualified(spec.source.table)}`)}`);
    await createParent(conn, release.dataset, 'pg_temp.genfill_plan_template', spec.source.key);
    await conn.query('DROP VIEW pg_temp.genfill_plan_template');
  }
  await addGeneration(conn, release.dataset, release.generation);
  if (release.expected_active === null) {
    try {
      await createTargetView(conn, release.dataset);
    } catch (err) {
      throw errorFromPg(err, {
        release: release.id,
        messages: {
          [SQLSTATE.duplicateTable]: (e) => `${e.message} (target.table of ${release.id})`,
          [SQLSTATE.insufficientPrivilege]: () =>
            `genfill_owner may not create the view ${spec.target.table}: GRANT CREATE ON SCHEMA ${spec.target.table.split('.')[0]} TO genfill_owner, then plan again`,
        },
      });
    }
  }
}

export async function planRelease(db: Db, id: string, opts: { carryRows?: number } = {}): Promise<PlanResult> {
  return withTransaction(db, async (conn) => {
    await takeLock(conn, 'plan', id, 'exclusive');
    const release = await getRelease(conn, id, { lock: 'FOR UPDATE' });
    if (release.state === 'CANCELLED') throw new RefusedError(`release ${id} is CANCELLED: submit a new release`);
    if (release.state !== 'DRAFT') return summary(conn, release, 'already-planned');
    await admissible(conn, release);
    await dependenciesCaptured(conn, release);

    const base = await baseTransformMap(conn, release);
    const spec = release.spec;
    // One open release per candidate generation: its catch-up frontier, floor and cutover are
    // the release's; several ranges are several releases, one after another.
    const { rows: other } = await conn.query<{ id: string; state: string }>(
      `SELECT id, state FROM genfill.releases
        WHERE dataset = $1 AND generation = $2 AND id <> $3 AND state NOT IN ('DRAFT', 'CANCELLED', 'ACTIVE', 'SUPERSEDED', 'RETIRED', 'ROLLED_BACK')
        ORDER BY id LIMIT 1`,
      [release.dataset, release.generation, id],
    );
    if (other[0]) {
      throw new RefusedError(
        `release ${other[0].id} (${other[0].state}) is open on candidate generation ${release.generation}: one open release per candidate; ` +
          'finish or cancel it, or submit this range into another generation',
      );
    }
    // Several releases may fill one candidate generation with disjoint ranges: each overlays
    // its range onto the map the candidate already has. First, so that a generation which may
    // not take this release (not a candidate, abandoned, holding a cancelled release's rows)
    // refuses it before anything else is attempted.
    const candidate = await findGeneration(conn, release.dataset, release.generation);
    await upsertCandidateGeneration(conn, {
      dataset: release.dataset,
      generation: release.generation,
      release: id,
      transformMap: overlayTransformMap(candidate?.transform_map ?? base, { from: spec.range.from, to: spec.range.to, transform: release.transform_digest, release: id }),
    });
    const gridSpec = { from: spec.range.from, to: spec.range.to, timezone: spec.timezone, every: spec.partition.every };
    // The reference grid's count and proof (Temporal), not its partitions: the database computes those.
    const { proof: planned, steps } = plannedGrid(gridSpec);

    // The pin's snapshot, taken before the hashes: a change the hash does not hold lies after
    // it, where the cutover looks for one inside its freeze (migration 0031).
    const { rows: pin } = await conn.query<{ s: string }>('SELECT pg_current_snapshot()::text AS s');
    for (const relation of spec.dependencies) {
      const h = await contentHash(conn, relation);
      await insertDependencyPin(conn, { release: id, relation, rowCount: h.rowCount, contentHash: h.contentHash });
      await conn.query('UPDATE genfill.dependency_pins SET pinned_snapshot = $3::pg_snapshot WHERE release = $1 AND relation = $2', [id, relation, pin[0]!.s]);
    }
    const carry = await carryPartitions(conn, release, planned.count, opts.carryRows);
    if (carry.proof && !(carry.proof.contiguous && carry.proof.unboundedEnds && carry.proof.touchesRange)) {
      throw new Error(`carry coverage failed for ${id}: ${JSON.stringify(carry.proof)}`);
    }
    await insertManifest(conn, { release: id, count: planned.count + carry.partitions.length, boundariesSha256: planned.boundariesSha256, proof: planned });
    await insertGrid(conn, { release: id, from: planned.from, to: planned.to, timezone: planned.timezone, steps, count: planned.count });
    if (carry.partitions.length > 0) await insertPartitions(conn, id, carry.partitions);
    // The floor: the containment-minimum of this snapshot and the projector's frontier — the
    // frontier itself, which committed before this statement's snapshot was taken (so the
    // snapshot contains it); the snapshot when there is no live writer yet.
    await conn.query(
      `INSERT INTO genfill.release_floors (release, floor)
       SELECT $1, coalesce(f.snapshot, pg_current_snapshot())
         FROM (SELECT 1) AS one LEFT JOIN genfill.frontiers f ON f.dataset = $2 AND f.generation = $3`,
      [id, release.dataset, release.expected_active],
    );

    // Re-derive the proof from what was stored (in the database), and have it union the ranges.
    const stored: CoverageProof = { ...planned, ...(await storedCoverage(conn, id, planned)) };
    const union = await rangeUnion(conn, id);
    const proof = { ...stored, rangeUnion: union, ...(carry.proof ? { carry: carry.proof } : {}) };
    if (
      !stored.contiguous ||
      !stored.exactEnds ||
      stored.gaps + stored.overlaps > 0 ||
      stored.count !== planned.count ||
      stored.boundariesSha256 !== planned.boundariesSha256 ||
      union.length !== 1
    ) {
      throw new Error(
        `coverage proof failed for ${id}: the stored grid differs from the reference (Temporal, ${planned.count} partitions, boundaries ${planned.boundariesSha256}); ` +
          `is the server's tzdata for ${planned.timezone} other than Node's? ${JSON.stringify(proof)}`,
      );
    }
    await conn.query('UPDATE genfill.manifests SET coverage_proof = $2 WHERE release = $1', [id, JSON.stringify(proof)]);

    await createLayout(conn, release);
    await casTransition(conn, {
      release: id,
      from: 'DRAFT',
      to: 'SNAPSHOT_PINNED',
      action: RELEASE_ACTIONS.plan,
      detail: { partitions: planned.count, boundariesSha256: planned.boundariesSha256 },
    });
    return summary(conn, { ...release, state: 'SNAPSHOT_PINNED' }, 'planned');
  });
}
