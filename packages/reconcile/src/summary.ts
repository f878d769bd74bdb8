// The stored and printed summary of a reconciliation: totals over the partitions, the old
// generation's changes per column, null counts, what the checks read and how long each took.
import type { CarrySummary } from './carry.ts';
import type { ClosureSummary, DependencySummary } from './manifest.ts';
import { addDecimals, sameDecimal, type PartitionCheck } from './compare.ts';
import type { CandidateBucket, DualBucket, OldBucket, SourceBucket } from './passes.ts';
import { addDigests, EMPTY_DIGEST, rootJson, type Digest } from './roots.ts';
import type { Subject } from './subject.ts';

export interface RowsRead {
  /** Rows the aggregate passes scanned: candidate, old generation, source, dual compute. */
  aggregate: string;
  /** Rows the bisection and its row-by-row leaves aggregated or compared. */
  bisection: string;
  /** What a full join of the dual compute with the stored candidate would compare. */
  fullJoin: string;
  /** bisection / fullJoin. */
  bisectionRatio: number;
  bisectedPartitions: number;
  queries: number;
  leaves: number;
}

export interface ReconcileSummary {
  dataset: string;
  generation: string;
  expectedActive: string | null;
  range: { from: string; to: string };
  closure: Omit<ClosureSummary, 'proof'> & { contiguous: boolean | null; exactEnds: boolean | null; gaps: number | null; overlaps: number | null };
  dependencies: DependencySummary[];
  partitions: { build: number; receiptMismatch: number; dualMismatch: number; conservedMismatch: number };
  rows: { source: string; stored: string; dual: string; tombstones: string; nullTime: string; old: string | null };
  roots: { stored: { keys: ReturnType<typeof rootJson>; rows: ReturnType<typeof rootJson> }; dual: { keys: ReturnType<typeof rootJson>; rows: ReturnType<typeof rootJson> } };
  conserved: Record<string, { source: string; candidate: string; ok: boolean }>;
  nulls: Record<string, string>;
  oldGeneration: null | {
    rows: string;
    missing: string;
    extra: string;
    /** Rows whose column differs from the old generation; `expected` when in expectedDiff. */
    changed: Record<string, { rows: string; expected: boolean }>;
    unknownExpectedDiff: string[];
  };
  rowsRead: RowsRead;
  timings: Record<string, number>;
  /**
   * The live path (live.ts): the catch-up frontier verified at, the keys pending after it
   * (left out of every pass, not findings), catch-up rounds, and the partitions whose
   * receipts were not compared because catch-up touched them or a pending key lives in them.
   */
  /** Old vs new outside the range (carry.ts): null without carry partitions or an old generation. */
  carry?: CarrySummary | null;
  live?: { catchupFrontier: string; pendingKeys: number; rounds: number; receiptsSuperseded: string[] } | null;
}

const sum = (xs: bigint[]) => xs.reduce((a, b) => a + b, 0n);

export function summarize(
  s: Subject,
  x: {
    closure: ClosureSummary;
    dependencies: DependencySummary[];
    checks: PartitionCheck[];
    passes: { candidate: CandidateBucket[]; source: SourceBucket[]; dual: DualBucket[]; old: OldBucket[] };
    rowsRead: RowsRead;
    timings: Record<string, number>;
  },
): ReconcileSummary {
  const inParts = <T extends { bucket: number | null }>(l: T[]) => l.filter((b) => b.bucket !== null);
  const cand = x.passes.candidate;
  const digestOf = (l: { digest: Digest }[]) => l.reduce((a, b) => addDigests(a, b.digest), EMPTY_DIGEST);
  const stored = digestOf(inParts(cand));
  const dual = digestOf(inParts(x.passes.dual));
  const conserved = Object.fromEntries(
    s.conserved.map((c) => {
      const source = addDecimals(x.passes.source.map((b) => b.sums[c] ?? '0'));
      const candidate = addDecimals(inParts(cand).map((b) => b.sums[c] ?? '0'));
      return [c, { source, candidate, ok: sameDecimal(source, candidate) }];
    }),
  );
  const names = new Set(s.columns.map((c) => c.name));
  const old = x.passes.old;
  const changedCols = s.columns.map((c) => c.name).filter((c) => !s.key.includes(c));
  const p = x.closure.proof;
  return {
    dataset: s.dataset,
    generation: s.generation,
    expectedActive: s.expectedActive,
    range: { from: s.from, to: s.to },
    closure: {
      ok: x.closure.ok,
      partitions: x.closure.partitions,
      build: x.closure.build,
      manifestCount: x.closure.manifestCount,
      boundariesSha256: x.closure.boundariesSha256,
      contiguous: p?.contiguous ?? null,
      exactEnds: p?.exactEnds ?? null,
      gaps: p?.gaps ?? null,
      overlaps: p?.overlaps ?? null,
    },
    dependencies: x.dependencies,
    partitions: {
      build: x.checks.length,
      receiptMismatch: x.checks.filter((c) => !c.receiptOk).length,
      dualMismatch: x.checks.filter((c) => c.bisect).length,
      conservedMismatch: x.checks.filter((c) => c.conservedOff.length > 0).length,
    },
    rows: {
      source: sum(x.passes.source.map((b) => b.rows)).toString(),
      stored: stored.rows.count.toString(),
      dual: dual.rows.count.toString(),
      tombstones: sum(cand.map((b) => b.tombstones)).toString(),
      nullTime: sum(cand.map((b) => b.nullTime)).toString(),
      old: s.oldTable ? sum(old.map((b) => b.rows)).toString() : null,
    },
    roots: {
      stored: { keys: rootJson(stored.keys), rows: rootJson(stored.rows) },
      dual: { keys: rootJson(dual.keys), rows: rootJson(dual.rows) },
    },
    conserved,
    nulls: Object.fromEntries(s.columns.map((c) => [c.name, sum(inParts(cand).map((b) => b.nulls[c.name] ?? 0n)).toString()])),
    oldGeneration: s.oldTable
      ? {
          rows: sum(old.map((b) => b.rows)).toString(),
          missing: sum(old.map((b) => b.missing)).toString(),
          extra: sum(old.map((b) => b.extra)).toString(),
          changed: Object.fromEntries(
            changedCols.map((c) => [c, { rows: sum(old.map((b) => b.changed[c] ?? 0n)).toString(), expected: s.expectedDiff.includes(c) }]),
          ),
          unknownExpectedDiff: s.expectedDiff.filter((c) => !names.has(c)),
        }
      : null,
    rowsRead: x.rowsRead,
    timings: x.timings,
    live: s.live
      ? {
          catchupFrontier: s.live.cf,
          pendingKeys: s.live.pendingKeys,
          rounds: s.live.rounds,
          receiptsSuperseded: x.checks.map((c) => c.partition.id).filter((id) => s.live!.touched.has(id) || s.live!.pendingPartitions.has(id) || s.live!.collided.has(id)),
        }
      : null,
  };
}
