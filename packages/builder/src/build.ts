// One partition into the candidate generation, in one transaction with its receipt and its
// status, committed only while the worker's attempt is still the partition's token. The
// receipt that completes the manifest moves the release to BUILDING → BUILT in the same
// transaction. A fenced or failed build writes nothing.
//
// The transform is untrusted input (issue 28): each partition's build admits the stored text
// again (loadAdmittedTransform — a cached positive verdict at most 60 s old, else the probe,
// in a savepoint of this transaction) and sends the statement over the extended protocol
// (queryUserSql). The release plan cached per process holds no transform text for that reason.
import { isCarryMax, isCarryMin, PartitionFailedError, pgErrorCode, SQLSTATE, StaleLeaseError, TransformRefusedError } from '@genfill/contracts';
import { commitPartition, dataColumns, dependencyPins, getRelease, relationColumns, withTransaction, type Conn, type Db, type PartitionCommit, type ReleaseRow } from '@genfill/registry';
import { loadAdmittedTransform, queryUserSql } from '@genfill/transform';
import { takeLock } from '@genfill/registry';
import { carryDeleteStatement, carryStatement } from './carry.ts';
import type { ClaimedPartition } from './claim.ts';
import { boundValues, buildStatement, deleteRangeStatement, type BuildStatementInput, type DependencyColumns } from './statement.ts';

/** A carry chunk's bounds as its time column compares them; an unbounded end is not compared. */
function carryBounds(timeType: string, timezone: string, lower: Date, upper: Date): [Date | string, Date | string] {
  if (isCarryMin(lower) || isCarryMax(upper)) {
    const [l] = isCarryMin(lower) ? [lower] : boundValues({ timeType, timezone, lower, upper: lower });
    const [, u] = isCarryMax(upper) ? [upper, upper] : boundValues({ timeType, timezone, lower: upper, upper });
    return [l, u];
  }
  return boundValues({ timeType, timezone, lower, upper });
}

export interface BuildResult {
  receiptId: string;
  rowsIn: number;
  rowsOut: number;
  inserted: number;
  watermark: string;
  releaseBuilt: boolean;
  timings: Record<string, number>;
}

/** SQLSTATE classes a retry cannot fix: the transform itself is wrong for this data. */
function isTransformError(code: string | undefined): boolean {
  if (!code) return false;
  // 22 data exception, 42 syntax or undefined object, 21 cardinality (a scalar subquery
  // returned more than one row), 23 integrity (a NOT NULL of the target), XX000 internal.
  return ['22', '42', '21', '23'].includes(code.slice(0, 2));
}

async function dependencyColumns(conn: Conn, relations: string[]): Promise<DependencyColumns[]> {
  const out: DependencyColumns[] = [];
  for (const relation of relations) {
    const columns = await relationColumns(conn, relation);
    out.push({ relation, columns: columns.map((c) => c.name) });
  }
  return out;
}

async function timeType(conn: Conn, table: string, column: string): Promise<string> {
  const found = (await relationColumns(conn, table)).find((c) => c.name === column);
  if (!found) throw new Error(`${table} has no column ${column}`);
  return found.type;
}

interface ReleasePlan {
  release: ReleaseRow;
  pins: { relation: string; row_count: string; content_hash: string }[];
  deps: DependencyColumns[];
  base: Omit<BuildStatementInput, 'lower' | 'upper' | 'transformSql'>;
}

// What a build needs of its release is immutable once planned (the release, its transform,
// the pins, the target's columns), so a worker reads it once per release, not per partition.
const plans = new WeakMap<Db, Map<string, Promise<ReleasePlan>>>();

function releasePlan(db: Db, conn: Conn, id: string): Promise<ReleasePlan> {
  let byRelease = plans.get(db);
  if (!byRelease) plans.set(db, (byRelease = new Map()));
  let p = byRelease.get(id);
  if (!p) {
    p = loadReleasePlan(conn, id);
    byRelease.set(id, p);
    p.catch(() => byRelease!.delete(id));
  }
  return p;
}

async function loadReleasePlan(conn: Conn, id: string): Promise<ReleasePlan> {
  const release = await getRelease(conn, id);
  const spec = release.spec;
  const pins = await dependencyPins(conn, id);
  const deps = await dependencyColumns(conn, pins.map((p) => p.relation));
  return {
    release,
    pins,
    deps,
    base: {
      dataset: release.dataset,
      generation: release.generation,
      sourceTable: spec.source.table,
      key: spec.source.key,
      time: spec.source.time,
      timeType: await timeType(conn, spec.source.table, spec.source.time),
      timezone: release.timezone,
      columns: (await dataColumns(conn, release.dataset)).map((c) => c.name),
      conserved: spec.reconcile.conserved,
      dependencies: pins.map((p) => p.relation),
    },
  };
}

/**
 * The release's transform, admitted for this use. A refusal fails the partition for good
 * (TRANSFORM_ERROR with the problems as evidence): the same text is refused on every retry.
 */
async function admittedTransform(conn: Conn, release: ReleaseRow, partition: string): Promise<string> {
  try {
    return (await loadAdmittedTransform(conn, { digest: release.transform_digest, release: release.id })).sql;
  } catch (err) {
    if (!(err instanceof TransformRefusedError)) throw err;
    throw new PartitionFailedError(release.id, partition, 'TRANSFORM_ERROR', { refused: true, digest: release.transform_digest, problems: err.problems }, err.message);
  }
}

/** The partition's current receipt: the one no other receipt supersedes. */
export async function currentReceipt(conn: Conn, release: string, partition: string): Promise<string | null> {
  const { rows } = await conn.query<{ id: string }>(
    `SELECT r.id FROM genfill.current_receipts r
      WHERE r.release = $1 AND r.partition = $2`,
    [release, partition],
  );
  if (rows.length > 1) throw new Error(`partition ${partition} of ${release} has ${rows.length} current receipts`);
  return rows[0]?.id ?? null;
}

/**
 * Build one claimed partition. `claimed` is what the claim read of it (bounds, kind, a pending
 * repair): with it the build skips reading the partition again (the receipt's commit fences the
 * attempt in any case); without it (repair tools, tests) the partition is read and a stale
 * attempt refused before any work.
 *
 * Round trips: BEGIN, the statement (which also tests the release floor against its own
 * snapshot), the fenced receipt, COMMIT. A key written twice fails the fast shape's statement;
 * its transaction is rolled back whole and the partition is built again in a new one with the
 * safe shape (rare: a neighbour's build or a catch-up wrote the key first) — cheaper on the
 * common path than a savepoint around every statement.
 */
export async function buildPartition(
  db: Db,
  q: { release: string; partition: string; attempt: number; claimMs?: number; claimed?: ClaimedPartition },
): Promise<BuildResult> {
  let r: BuildResult;
  try {
    r = await buildOnce(db, q, 'fast');
  } catch (err) {
    if (!(err instanceof KeyWrittenTwice)) throw err;
    r = await buildOnce(db, q, 'safe', err.prepareMs);
  }
  if (r.releaseBuilt) await analyzeCandidate(db, q.release);
  return r;
}

/**
 * The release just became BUILT: analyse its candidate, before any catch-up round plans a
 * statement over it (issue 29, finding 8: a candidate without statistics was taken for one row).
 * genfill.analyze_generation runs it as the table's owner; after the commit, so the release
 * row lock is not held through it.
 */
async function analyzeCandidate(db: Db, release: string): Promise<void> {
  await db.query(`SELECT genfill.analyze_generation(r.dataset, r.generation) FROM genfill.releases r WHERE r.id = $1`, [release]);
}

/** The fast shape met a key already in the candidate (23505): build again in the safe shape. */
class KeyWrittenTwice extends Error {
  constructor(readonly prepareMs: number) {
    super('a key of the partition is already in the candidate');
  }
}

type BuildRequest = { release: string; partition: string; attempt: number; claimMs?: number; claimed?: ClaimedPartition };

function buildOnce(db: Db, q: BuildRequest, mode: 'fast' | 'safe', firstTryMs = 0): Promise<BuildResult> {
  return withTransaction(db, async (conn) => commitStep(conn, await buildStep(db, conn, q, mode, firstTryMs)));
}

/** A partition whose statement ran and whose checks passed, waiting for its fenced receipt. */
interface Built {
  commit: PartitionCommit;
  inserted: number;
  timings: Record<string, number>;
}

/** The receipt (fence and completion check) of a built partition: what ends its build. */
async function commitStep(conn: Conn, b: Built): Promise<BuildResult> {
  // Fence, receipt and completion in one statement, as late as possible: the release row
  // lock is held for one round trip (a stalled worker cannot hold it across several).
  const t = performance.now();
  const committed = await commitPartition(conn, b.commit);
  b.timings.fence = Math.round((performance.now() - t) * 10) / 10;
  return {
    receiptId: committed.receiptId,
    rowsIn: Number(b.commit.rowsIn),
    rowsOut: Number(b.commit.rowsOut),
    inserted: b.inserted,
    watermark: b.commit.watermark,
    releaseBuilt: committed.releaseBuilt,
    timings: b.timings,
  };
}

/**
 * The partitions of a unit (partition.batchRows), each claimed at its attempt, built in ONE
 * transaction: each partition's own statement, checks and receipt, the receipts last (so the
 * release row lock is taken only at the end, for one short call per partition) and one commit
 * for the unit — one WAL flush where each partition paid its own. A crash anywhere leaves none
 * of them built. Anything that fails the transaction (a key written twice, a failed partition, a
 * fenced one) rolls the whole unit back and throws UnitFallbackError: the caller then builds the
 * unit's partitions one transaction each, where each outcome is handled alone.
 */
export async function buildUnit(db: Db, members: BuildRequest[]): Promise<BuildResult[]> {
  let out: BuildResult[];
  try {
    out = await withTransaction(db, async (conn) => {
      const built: Built[] = [];
      for (const m of members) built.push(await buildStep(db, conn, m, 'fast'));
      const done: BuildResult[] = [];
      for (const b of built) done.push(await commitStep(conn, b));
      return done;
    });
  } catch (err) {
    throw new UnitFallbackError(err);
  }
  if (out.some((r) => r.releaseBuilt)) await analyzeCandidate(db, members[0]!.release);
  return out;
}

/** A unit's transaction failed; nothing of it was written: build its partitions one by one. */
export class UnitFallbackError extends Error {
  constructor(cause: unknown) {
    super(`the unit's transaction failed (${(cause as Error).message}); nothing of it was written`, { cause });
  }
}

async function buildStep(db: Db, conn: Conn, q: BuildRequest, mode: 'fast' | 'safe', firstTryMs = 0): Promise<Built> {
  const started = performance.now();
  const timings: Record<string, number> = { claim: q.claimMs ?? 0 };
  const lap = (name: string, since: number) => (timings[name] = Math.round((performance.now() - since) * 10) / 10);
  {
    let t = performance.now();
    const plan = await releasePlan(db, conn, q.release);
    let part: ClaimedPartition;
    if (q.claimed) part = q.claimed;
    else {
      const { rows: parts } = await conn.query<{ lower: Date; upper: Date; attempt: number; status: string; repair_pending: boolean; kind: 'build' | 'carry' }>(
        'SELECT lower, upper, attempt, status, repair_pending, kind FROM genfill.partitions WHERE release = $1 AND id = $2',
        [q.release, q.partition],
      );
      const found = parts[0];
      if (!found || found.attempt !== q.attempt || found.status !== 'RUNNING') throw new StaleLeaseError(q.release, q.partition, q.attempt);
      part = { lower: found.lower, upper: found.upper, kind: found.kind, repairPending: found.repair_pending };
    }
    // A repair is recorded on the partition, so whoever claims it rebuilds it in repair mode.
    const repair = part.repairPending;
    const { release, pins, deps, base } = plan;
    const spec = release.spec;
    const carry = part.kind === 'carry';
    // A carry copies the active generation's rows and runs no transform.
    const transformSql = carry ? '' : await admittedTransform(conn, release, q.partition);
    const input = { ...base, transformSql, lower: part.lower, upper: part.upper, release: q.release };
    if (carry && !release.expected_active) throw new Error(`carry partition ${q.partition} of ${q.release}, which has no expected active generation`);
    const carryInput = carry
      ? {
          dataset: base.dataset,
          generation: base.generation,
          from: release.expected_active!,
          key: base.key,
          time: base.time,
          timeType: base.timeType,
          columns: base.columns,
          conserved: base.conserved,
          lower: part.lower,
          upper: part.upper,
          bounds: carryBounds(base.timeType, base.timezone, part.lower, part.upper),
        }
      : null;
    const statement = carryInput ? carryStatement(carryInput) : buildStatement(input, deps, mode);
    // A repair replaces exactly this partition's rows; the superseded receipt stays.
    // Repairs and catch-up rounds of a release serialize (SPEC invariant 8): a round that read
    // CF must not miss a receipt committed under it (the switch's lockCatchup: the same lock).
    if (repair) await takeLock(conn, 'catchup', q.release, 'exclusive');
    const superseded = repair ? await currentReceipt(conn, q.release, q.partition) : null;
    if (repair) timings.deleted = (await conn.query(carryInput ? carryDeleteStatement(carryInput) : deleteRangeStatement(input))).rowCount ?? 0;
    lap('prepare', t);

    t = performance.now();
    let r: Record<string, string | string[] | boolean | null>;
    try {
      r = (await queryUserSql<Record<string, string | string[] | boolean | null>>(conn, statement)).rows[0]!;
    } catch (err) {
      const code = pgErrorCode(err) ?? undefined;
      // A key written twice: either the transform fans out (the safe shape names the keys
      // and refuses) or the candidate already holds a newer row for a key (it keeps it).
      if (code === SQLSTATE.uniqueViolation && mode === 'fast' && !carry) throw new KeyWrittenTwice(Math.round((performance.now() - started) * 10) / 10);
      throw isTransformError(code)
        ? new PartitionFailedError(q.release, q.partition, 'TRANSFORM_ERROR', { sqlstate: code, message: (err as Error).message }, (err as Error).message)
        : err;
    }
    lap('statement', t);
    if (mode === 'safe') {
      timings.safePath = 1;
      timings.firstTry = firstTryMs;
    }
    // Keys of this partition the candidate already held (written by a neighbouring partition's
    // build after the row moved, or by catch-up): the receipt counts them, the partition does
    // not store them. The reconciler verifies such a partition by dual compute, not by receipt.
    if (timings.safePath && Number(r.rows_out) > Number(r.inserted)) timings.keptElsewhere = Number(r.rows_out) - Number(r.inserted);

    if (Number(r.fanout_keys) > 0) {
      throw new PartitionFailedError(
        q.release,
        q.partition,
        'JOIN_FANOUT',
        { keys: Number(r.fanout_keys), sample: r.fanout_sample },
        `the transform produced ${r.fanout_keys} key(s) more than once (e.g. ${(r.fanout_sample as string[]).slice(0, 5).join(', ')}); nothing was written`,
      );
    }
    const changed = (carry ? [] : pins)
      .map((p, i) => ({ relation: p.relation, pinned: { rows: p.row_count, hash: p.content_hash }, now: { rows: r[`dep_n_${i}`], hash: r[`dep_h_${i}`] } }))
      .filter((d) => d.pinned.rows !== d.now.rows || d.pinned.hash !== d.now.hash);
    if (changed.length > 0) {
      throw new PartitionFailedError(
        q.release,
        q.partition,
        'DEPENDENCY_CHANGED',
        { changed },
        `${changed.map((d) => d.relation).join(', ')} changed since plan pinned it; nothing was written`,
      );
    }

    // Every watermark contains the release floor (invariant 8): a copy or build that read an
    // older frontier than the plan's would leave events below it to nobody. A build statement
    // tested it against its own snapshot; a carry's watermark is the frontier it read.
    let floor: { ok: boolean; floor: string } | undefined;
    if (r.floor_ok !== undefined) floor = r.floor === null ? undefined : { ok: r.floor_ok === true, floor: String(r.floor) };
    else {
      const { rows } = await conn.query<{ ok: boolean; floor: string }>(
        'SELECT genfill.snapshot_contains($2::pg_snapshot, floor) AS ok, floor::text FROM genfill.release_floors WHERE release = $1',
        [q.release, String(r.watermark)],
      );
      floor = rows[0];
    }
    if (floor && !floor.ok) {
      throw new PartitionFailedError(
        q.release,
        q.partition,
        'WATERMARK_BELOW_FLOOR',
        { watermark: r.watermark, floor: floor.floor },
        `the watermark ${String(r.watermark)} does not contain the release floor ${floor.floor}; nothing was written`,
      );
    }
    const conserved = Object.fromEntries(spec.reconcile.conserved.map((c) => [c, { source: r[`src_${c}`], candidate: r[`out_${c}`] }]));
    const dependencyHashes = carry ? {} : Object.fromEntries(pins.map((p) => [p.relation, { rows: p.row_count, hash: p.content_hash }]));
    timings.total = Math.round((performance.now() - started + firstTryMs + (q.claimMs ?? 0)) * 10) / 10;
    return {
      commit: {
        release: q.release,
        partition: q.partition,
        attempt: q.attempt,
        kind: repair ? 'repair' : 'build',
        releaseDigest: release.digest,
        transformDigest: release.transform_digest,
        watermark: String(r.watermark),
        dependencyHashes,
        rowsIn: String(r.rows_in),
        rowsOut: String(r.rows_out),
        conserved,
        keyRoot: String(r.key_root),
        rowRoot: String(r.row_root),
        timings,
        supersedes: superseded,
      },
      inserted: Number(r.inserted),
      timings,
    };
  }
}
