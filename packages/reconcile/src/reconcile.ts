// `genfill reconcile <release>`: prove or refuse a built candidate (SPEC invariant 10) with
// the reconciler's own queries, all in one snapshot, then store the verdict under an id and
// move the release. The order of work:
//   1. load the release, manifest, receipts and pins; refuse outside BUILT/RECONCILED;
//   2. closure + coverage proof re-derived; dependencies recomputed;
//   3. aggregate passes side by side on the snapshot's connections, per key slice (merge.ts):
//      the stored pass (candidate roots and old vs new in one merge join) and the dual compute;
//      then the source pass and the carry ranges;
//   4. per partition: receipt vs recomputed, stored vs dual, conserved sums;
//   5. bisection of the partitions whose rows differ, and the key listings;
//   6. verdict, stored and CASed in one fenced transaction with every finding;
//   7. on request, the stored findings exported to an NDJSON file.
import { dirname, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { errorFromPg, SQLSTATE, type ReleaseState } from '@genfill/contracts';
import type { Logger } from '@genfill/observability';
import { DATA_SCHEMA, generationTable, type Conn, type Db } from '@genfill/registry';
import { Bisector, type BisectResult } from './bisect.ts';
import { checkCarry } from './carry.ts';
import { checkOutside, comparePartitions, type PartitionCheck } from './compare.ts';
import { defaultFindingsPath, FindingsExport } from './export.ts';
import { FindingsWriter, type Finding, type FindingInput, type FindingKind } from './findings.ts';
import { listConserved, listOldDiffs, listStrays } from './listing.ts';
import { checkClosure, checkDependencies } from './manifest.ts';
import { dualKeyRoots, dualPass, keySlices, mergeSlices, storedPass, type MergeResult } from './merge.ts';
import { root } from './roots.ts';
import { hasEnvelope, sourcePass, type CandidateBucket, type DualBucket, type OldBucket, type SourceBucket } from './passes.ts';
import { onConnections, openSnapshot } from './snapshot.ts';
import { storeReconciliation, type Verdict } from './store.ts';
import { admitSubjectTransform, buildPartitions, loadSubject, type PartitionRef } from './subject.ts';
import { summarize, type ReconcileSummary, type RowsRead } from './summary.ts';

export interface ReconcileOptions {
  /**
   * Export the stored findings to this NDJSON file once the verdict is stored (an empty file
   * when there are none). The registry holds them either way.
   */
  findingsOut?: string;
  /**
   * Without findingsOut: when there are findings, export them to
   * reconcile-<release>-<id>.ndjson in this directory, made if missing (and not left behind
   * when there are none). Neither option: no file is written.
   */
  findingsDir?: string;
  /** Connections sharing the snapshot (the passes run side by side); default 2. */
  connections?: number;
  /** Bisection compares rows once a key range holds at most this many (both sides); default 256. */
  leafRows?: number;
  /** work_mem of the reconciler's transactions; default 256MB. */
  workMem?: string;
  /**
   * Parallel workers each pass may use (max_parallel_workers_per_gather); default the
   * server's. The passes already run on `connections` connections side by side: on a machine
   * with few cores, 0 avoids more processes than cores.
   */
  workersPerPass?: number;
  /** How many findings the result carries for printing; the registry has all. Default 20. */
  firstFindings?: number;
  log?: Logger;
}

export interface ReconcileResult {
  id: string;
  release: string;
  /** The state the release was in. */
  from: ReleaseState;
  state: Verdict;
  /** False when a RECONCILED release passed again: a new reconciliation, no state change. */
  transition: boolean;
  snapshot: string;
  findings: {
    count: number;
    byKind: Partial<Record<FindingKind, number>>;
    /** The NDJSON export of the stored findings, or null when none was written. */
    path: string | null;
    first: Finding[];
  };
  summary: ReconcileSummary;
}

const ms = (t: number) => Math.round((performance.now() - t) * 10) / 10;

export async function reconcile(db: Db, releaseId: string, opts: ReconcileOptions = {}): Promise<ReconcileResult> {
  const started = performance.now();
  const timings: Record<string, number> = {};
  const timed = async <T>(name: string, fn: () => Promise<T>): Promise<T> => {
    const t = performance.now();
    try {
      return await fn();
    } finally {
      timings[name] = ms(t);
    }
  };
  const log = opts.log?.child({ release: releaseId });
  await timed('analyze', () => analyzeStale(db, releaseId));
  // The transform is admitted outside the READ ONLY snapshot, where its probe cannot run.
  await timed('admit', () => admitSubjectTransform(db, releaseId));
  const session = await openSnapshot(db, {
    connections: Math.max(1, opts.connections ?? 2),
    workMem: opts.workMem ?? '256MB',
    workersPerPass: opts.workersPerPass,
  });
  let writer: FindingsWriter | undefined;
  let exported: FindingsExport | undefined;
  try {
    const s = await timed('load', () => loadSubject(session.primary, releaseId));
    // Opened before any work: a path that cannot be written is refused before a verdict exists.
    if (opts.findingsOut !== undefined) exported = await FindingsExport.open(dirname(resolve(opts.findingsOut)), '--findings-out');
    else if (opts.findingsDir !== undefined) exported = await FindingsExport.open(resolve(opts.findingsDir), 'findingsDir', { create: true });
    writer = await FindingsWriter.create(opts.firstFindings ?? 20);
    const w = writer;

    const closure = checkClosure(s, w);
    const dependencies = await timed('dependencies', () => checkDependencies(session.primary, s, w));
    const build = buildPartitions(s);
    // Per key slice (one per connection): the stored pass (candidate and old generation fused
    // in one merge join) and the dual compute; then the source pass and the carry ranges, on
    // whichever connection frees up first. Carry findings are held back and written after the
    // in-range ones, in the order they always came.
    const slices = await timed('plan', () => keySlices(session.primary, s, session.all.length));
    const carryFindings: FindingInput[] = [];
    type C = (typeof session.all)[number];
    const t0 = performance.now();
    const results = await onConnections<unknown[]>(session, [
      ...slices.map((slice, i) => (c: C) => timed(`stored.${i + 1}`, () => storedPass(c, s, build, slice))),
      ...slices.map((slice, i) => (c: C) => timed(`dual.${i + 1}`, () => dualPass(c, s, build, slice))),
      (c: C) => timed('source', () => sourcePass(c, s, build)),
      (c: C) => timed('carry', () => checkCarry(c, s, { add: (f) => void carryFindings.push(f) })),
    ]);
    timings.passes = ms(t0);
    type Rows = Awaited<ReturnType<typeof storedPass>>;
    const merged = await mergeSlices(session.primary, s, build, results.slice(0, slices.length) as Rows[], results.slice(slices.length, 2 * slices.length) as Rows[]);
    const source = results[2 * slices.length] as SourceBucket[];
    const carry = results[2 * slices.length + 1] as Awaited<ReturnType<typeof checkCarry>>;
    await timed('dualKeys', () => completeDualKeys(session.primary, s, build, merged));
    const { candidate, dual, old } = merged;
    const passes = { candidate, source, dual, old };
    log?.debug({ timings }, 'aggregate passes done');

    const t = performance.now();
    const checks = comparePartitions(s, build, passes, w);
    checkOutside(passes, w);
    timings.compare = ms(t);

    const bisected = await timed('bisection', () => bisectAll(session, s, checks, passes, opts.leafRows ?? 256));
    for (const r of bisected) for (const f of r.findings) w.add(f);
    await w.drain();

    await timed('listings', async () => {
      const oldDiffs = passes.old.reduce((a, b) => a + b.missing + b.extra + unexpectedChanges(s.expectedDiff, b.changed), 0n);
      const strays = passes.candidate.reduce((a, b) => a + b.tombstones + b.nullTime, 0n);
      if (oldDiffs > 0n) await listOldDiffs(session.primary, s, build, w);
      if (strays > 0n) await listStrays(session.primary, s, build, w);
      const conservedOff = checks.filter((c) => c.conservedOff.length > 0).map((c) => c.bucket);
      if (conservedOff.length > 0) await listConserved(session.primary, s, conservedOff, build, w);
    });
    // Outside the range: the candidate's carried rows against the old generation, every column
    // (checked above, side by side with the passes).
    for (const f of carryFindings) w.add(f);
    await w.drain();
    await session.close();

    const rowsRead = countRowsRead(passes, bisected, checks.filter((c) => c.bisect).length);
    const verdict: Verdict = w.count === 0 ? 'RECONCILED' : 'RECONCILIATION_REQUIRED';
    timings.checks = ms(started);
    const summary: ReconcileSummary = { ...summarize(s, { closure, dependencies, checks, passes, rowsRead, timings }), carry };
    const stored = await timed('store', () => storeReconciliation(db, { subject: s, snapshot: session.snapshot, verdict, summary, checks, writer: w }));
    let path: string | null = null;
    if (exported && (opts.findingsOut !== undefined || w.count > 0)) {
      const x = exported;
      path = opts.findingsOut !== undefined ? resolve(opts.findingsOut) : defaultFindingsPath(x.dir, s.release, stored.id);
      await timed('export', () => x.write(db, stored.id, path!));
    }
    timings.total = ms(started);
    log?.info({ reconciliation: stored.id, state: verdict, findings: w.count, timings }, 'reconciled');
    return {
      id: stored.id,
      release: s.release,
      from: s.state,
      state: verdict,
      transition: stored.transition,
      snapshot: session.snapshot,
      findings: { count: w.count, byKind: { ...w.byKind }, path, first: [...w.first] },
      summary,
    };
  } catch (err) {
    throw errorFromPg(err, {
      release: releaseId,
      messages: {
        [SQLSTATE.insufficientPrivilege]: (e) => `your login may not read everything a reconciliation reads (${e.message}): run genfill reconcile as a member of genfill_owner`,
      },
    });
  } finally {
    await writer?.close();
    await exported?.discard();
    await session.close();
  }
}

/**
 * The dual key root of the partitions whose dual rows differ from the stored rows (the pass
 * skips it: see dualPassSql): one more run of the transform, hashing only their rows.
 */
async function completeDualKeys(conn: Conn, s: Awaited<ReturnType<typeof loadSubject>>, build: PartitionRef[], m: MergeResult): Promise<void> {
  if (m.dualKeysPending.length === 0) return;
  const roots = await dualKeyRoots(conn, s, build, m.dualKeysPending);
  const pending = new Set(m.dualKeysPending);
  for (const d of m.dual) {
    if (d.bucket === null || !pending.has(d.bucket)) continue;
    const x = roots.get(d.bucket);
    d.digest = { keys: x ? root(x.count, x.root) : root(0, 0), rows: d.digest.rows };
  }
}

/**
 * Fresh statistics for the generations the passes join. A candidate just built has none (the
 * reconciler usually runs before autovacuum gets to it), and the planner then expects a few
 * rows where there are millions: sorts spilled to disk, a group aggregate instead of a hash
 * (measured on the 2M-row demo: the old-vs-new pass 4.4 s without statistics, 2.8 s with).
 * ANALYZE samples (~0.2 s here) and cannot run inside the read-only snapshot, so it runs
 * first, only for a table never analyzed or changed by more than a tenth since.
 */
async function analyzeStale(db: Db, releaseId: string): Promise<void> {
  const rel = await db.query<{ dataset: string; generation: string; expected_active: string | null }>(
    `SELECT dataset, generation, expected_active FROM genfill.releases WHERE id = $1`,
    [releaseId],
  );
  const r = rel.rows[0];
  if (!r) return; // loadSubject says so, in the snapshot
  const generations = [r.generation, r.expected_active].filter((g): g is string => g !== null);
  const { rows } = await db.query<{ relname: string }>(
    `SELECT relname FROM pg_stat_user_tables
      WHERE schemaname = $1 AND relname = ANY($2::text[])
        AND (coalesce(last_analyze, last_autoanalyze) IS NULL OR n_mod_since_analyze > 0.1 * greatest(n_live_tup, 1))`,
    [DATA_SCHEMA, generations.map((g) => generationTable(r.dataset, g))],
  );
  // Through the owner's function: the reconciler's service login does not own the table.
  for (const g of generations) {
    if (rows.some((x) => x.relname === generationTable(r.dataset, g))) await db.query('SELECT genfill.analyze_generation($1, $2)', [r.dataset, g]);
  }
}

function unexpectedChanges(expectedDiff: string[], changed: Record<string, bigint>): bigint {
  let n = 0n;
  for (const [c, rows] of Object.entries(changed)) if (!expectedDiff.includes(c)) n += rows;
  return n;
}

async function bisectAll(
  session: Awaited<ReturnType<typeof openSnapshot>>,
  s: Awaited<ReturnType<typeof loadSubject>>,
  checks: PartitionCheck[],
  passes: { candidate: { bucket: number | null; keyMin: string | null; keyMax: string | null }[]; dual: { bucket: number | null; keyMin: string | null; keyMax: string | null }[] },
  leafRows: number,
): Promise<BisectResult[]> {
  const bisector = new Bisector(s, leafRows);
  const envelope = hasEnvelope(s);
  const cand = new Map(passes.candidate.map((b) => [b.bucket, b]));
  const dual = new Map(passes.dual.map((b) => [b.bucket, b]));
  const tasks = checks
    .filter((c) => c.bisect)
    .map((c) => async (conn: (typeof session.all)[number]) => {
      const a = cand.get(c.bucket);
      const b = dual.get(c.bucket);
      const e = envelope ? { mins: [a?.keyMin ?? null, b?.keyMin ?? null], maxes: [a?.keyMax ?? null, b?.keyMax ?? null] } : null;
      return bisector.partition(conn, c.partition, e, c.stored.digest, c.dual.digest);
    });
  return onConnections(session, tasks);
}

function countRowsRead(
  passes: { candidate: CandidateBucket[]; source: SourceBucket[]; dual: DualBucket[]; old: OldBucket[] },
  bisected: BisectResult[],
  bisectedPartitions: number,
): RowsRead {
  const stored = passes.candidate.reduce((a, b) => a + b.rows + b.tombstones, 0n);
  // The join reads the candidate again beside the old generation.
  const old = passes.old.reduce((a, b) => a + b.rows, 0n) + (passes.old.length ? stored : 0n);
  const source = passes.source.reduce((a, b) => a + b.rows, 0n);
  const dual = passes.dual.reduce((a, b) => a + b.rows, 0n);
  const bisection = bisected.reduce((a, b) => a + b.rowsRead, 0n);
  const fullJoin = stored + dual;
  return {
    aggregate: (stored + old + source + dual).toString(),
    bisection: bisection.toString(),
    fullJoin: fullJoin.toString(),
    bisectionRatio: fullJoin === 0n ? 0 : Number((bisection * 1_000_000n) / fullJoin) / 1_000_000,
    bisectedPartitions,
    queries: bisected.reduce((a, b) => a + b.queries, 0),
    leaves: bisected.reduce((a, b) => a + b.leaves, 0),
  };
}
