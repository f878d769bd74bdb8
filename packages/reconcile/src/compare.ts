// Per build partition: the receipt against what the reconciler recomputed, the stored rows
// against the dual compute, the conserved sums of the source against the candidate.
// Partition-level findings are written here; the partitions whose rows differ go on to
// bisection and the key listings, which name every key.
import type { FindingsWriter } from './findings.ts';
import type { CandidateBucket, DualBucket, SourceBucket } from './passes.ts';
import { EMPTY_DIGEST, rootJson, sameDigest, type Digest } from './roots.ts';
import type { PartitionRef, ReceiptRef, Subject } from './subject.ts';

export interface PartitionCheck {
  partition: PartitionRef;
  /** 1-based bucket of the passes. */
  bucket: number;
  receipt: ReceiptRef | null;
  sourceRows: bigint;
  sourceSums: Record<string, string>;
  stored: { digest: Digest; sums: Record<string, string>; tombstones: bigint };
  dual: { digest: Digest; sums: Record<string, string> };
  /** Partition-level findings written for it. */
  findings: number;
  /** One current receipt, with the release's digests and the recomputed counts, roots and sums. */
  receiptOk: boolean;
  /** The stored rows differ from the dual compute: bisect. */
  bisect: boolean;
  /** Conserved columns whose source and candidate sums differ: list the keys. */
  conservedOff: string[];
}

/** Decimal text as PostgreSQL prints sums, normalised so 10.50 and 10.5 compare equal. */
export function sameDecimal(a: unknown, b: unknown): boolean {
  const norm = (x: unknown): string | null => {
    if (x === null || x === undefined) return null;
    let s = String(x).trim().replace(/^\+/, '');
    if (s.includes('.')) s = s.replace(/0+$/, '').replace(/\.$/, '');
    if (/^-0*$/.test(s)) s = '0';
    return s.replace(/^(-?)0+(?=\d)/, '$1');
  };
  return norm(a) === norm(b);
}

/** Exact sum of decimal texts (integer or fixed-point). */
export function addDecimals(values: readonly string[]): string {
  let scale = 0;
  for (const v of values) scale = Math.max(scale, v.split('.')[1]?.length ?? 0);
  let total = 0n;
  for (const v of values) {
    const [int, frac = ''] = v.split('.');
    const neg = int!.startsWith('-');
    const digits = BigInt((int!.replace('-', '') || '0') + frac.padEnd(scale, '0'));
    total += neg ? -digits : digits;
  }
  if (scale === 0) return total.toString();
  const neg = total < 0n;
  const s = (neg ? -total : total).toString().padStart(scale + 1, '0');
  return `${neg ? '-' : ''}${s.slice(0, -scale)}.${s.slice(-scale)}`;
}

function pickReceipt(s: Subject, p: PartitionRef, w: FindingsWriter): ReceiptRef | null {
  const list = s.receipts.get(p.id) ?? [];
  if (list.length === 0) {
    w.add({ partition: p.id, keyJson: null, kind: 'receipt_missing', check: 'receipt' });
    return null;
  }
  if (list.length > 1) {
    w.add({ partition: p.id, keyJson: null, kind: 'receipt_ambiguous', check: 'receipt', detail: { current: list.map((r) => r.id) } });
  }
  const r = list[list.length - 1]!;
  if (r.releaseDigest !== s.digest || r.transformDigest !== s.transformDigest) {
    w.add({
      partition: p.id,
      keyJson: null,
      kind: 'receipt_digest',
      check: 'receipt',
      detail: {
        receipt: r.id,
        release: { receipt: r.releaseDigest, expected: s.digest },
        transform: { receipt: r.transformDigest, expected: s.transformDigest },
      },
    });
  }
  return r;
}

function receiptDiffs(s: Subject, r: ReceiptRef, c: Omit<PartitionCheck, 'findings' | 'bisect' | 'conservedOff' | 'receipt' | 'receiptOk'>): Record<string, unknown> {
  const diffs: Record<string, unknown> = {};
  const cmp = (name: string, receipt: unknown, recomputed: unknown) => {
    if (!sameDecimal(receipt, recomputed)) diffs[name] = { receipt, recomputed };
  };
  cmp('rows_in', r.rowsIn, c.sourceRows.toString());
  cmp('rows_out', r.rowsOut, c.stored.digest.rows.count.toString());
  cmp('key_root', r.keyRoot, c.stored.digest.keys.sum.toString());
  cmp('row_root', r.rowRoot, c.stored.digest.rows.sum.toString());
  for (const col of s.conserved) {
    const sums = r.conservedSums[col];
    cmp(`conserved.${col}.source`, sums?.source ?? null, c.sourceSums[col]);
    cmp(`conserved.${col}.candidate`, sums?.candidate ?? null, c.stored.sums[col]);
  }
  for (const pin of s.pins) {
    const h = r.dependencyHashes[pin.relation];
    if (!h || String(h.rows) !== pin.rowCount || String(h.hash) !== pin.contentHash) {
      diffs[`dependency.${pin.relation}`] = { receipt: h ?? null, pinned: { rows: pin.rowCount, hash: pin.contentHash } };
    }
  }
  return diffs;
}

function byBucket<T extends { bucket: number | null }>(list: readonly T[]): Map<number | null, T> {
  return new Map(list.map((x) => [x.bucket, x]));
}

export function comparePartitions(
  s: Subject,
  build: readonly PartitionRef[],
  passes: { candidate: CandidateBucket[]; source: SourceBucket[]; dual: DualBucket[] },
  w: FindingsWriter,
): PartitionCheck[] {
  const cand = byBucket(passes.candidate);
  const src = byBucket(passes.source);
  const dual = byBucket(passes.dual);
  const zeroSums = Object.fromEntries(s.conserved.map((c) => [c, '0']));
  return build.map((p, i) => {
    const before = w.count;
    const bucket = i + 1;
    const receipt = pickReceipt(s, p, w);
    const cb = cand.get(bucket);
    const sb = src.get(bucket);
    const db = dual.get(bucket);
    const check = {
      partition: p,
      bucket,
      sourceRows: sb?.rows ?? 0n,
      sourceSums: sb?.sums ?? zeroSums,
      stored: { digest: cb?.digest ?? EMPTY_DIGEST, sums: cb?.sums ?? zeroSums, tombstones: cb?.tombstones ?? 0n },
      dual: { digest: db?.digest ?? EMPTY_DIGEST, sums: db?.sums ?? zeroSums },
    };
    // On the live path a partition catch-up touched, one a pending key lives in, or one whose
    // build found keys already held elsewhere, is no longer what its receipt describes: its
    // rows are verified by the dual compute alone.
    const superseded = s.live !== null && (s.live.touched.has(p.id) || s.live.pendingPartitions.has(p.id) || s.live.collided.has(p.id));
    if (receipt && !superseded) {
      const diffs = receiptDiffs(s, receipt, check);
      if (Object.keys(diffs).length > 0) {
        w.add({ partition: p.id, keyJson: null, kind: 'receipt_mismatch', check: 'receipt', detail: { receipt: receipt.id, ...diffs } });
      }
    }
    const receiptOk = w.count === before;
    const bisect = !sameDigest(check.stored.digest, check.dual.digest);
    if (bisect) {
      w.add({
        partition: p.id,
        keyJson: null,
        kind: 'dual_mismatch',
        check: 'dual_compute',
        detail: {
          stored: { keys: rootJson(check.stored.digest.keys), rows: rootJson(check.stored.digest.rows) },
          dual: { keys: rootJson(check.dual.digest.keys), rows: rootJson(check.dual.digest.rows) },
        },
      });
    }
    const conservedOff = s.conserved.filter((c) => !sameDecimal(check.sourceSums[c], check.stored.sums[c]));
    for (const c of conservedOff) {
      w.add({
        partition: p.id,
        keyJson: null,
        kind: 'conserved_sum',
        check: 'conserved',
        column: c,
        detail: { source: check.sourceSums[c], candidate: check.stored.sums[c] },
      });
    }
    return { ...check, receipt, findings: w.count - before, receiptOk, bisect, conservedOff };
  });
}

/** Rows that fell in no build partition although inside [from, to): only a broken manifest has them. */
export function checkOutside(passes: { candidate: CandidateBucket[]; dual: DualBucket[] }, w: FindingsWriter): void {
  const strayStored = passes.candidate.find((b) => b.bucket === null);
  const strayDual = passes.dual.find((b) => b.bucket === null);
  const stored = (strayStored?.rows ?? 0n) - (strayStored?.nullTime ?? 0n);
  if (stored > 0n || (strayDual?.rows ?? 0n) > 0n) {
    w.add({
      partition: null,
      keyJson: null,
      kind: 'outside_partitions',
      check: 'manifest',
      detail: { storedRows: stored.toString(), dualRows: (strayDual?.rows ?? 0n).toString() },
    });
  }
}
