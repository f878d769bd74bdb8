// `genfill repair`: rebuild exactly the named partitions of a release that reconciliation
// refused. The repair is recorded on each partition first (repair_pending, migration 0008);
// each rebuild is then an ordinary fenced claim and build in repair mode — delete the
// candidate's rows of the partition, rebuild them, write a receipt superseding the previous
// one (history stays) — and the last one moves the release back to BUILT.
import { InvalidInputError, RefusedError } from '@genfill/contracts';
import { casTransition, getRelease, RELEASE_ACTIONS, withTransaction, type Db, type RequestHandler } from '@genfill/registry';
import { buildPartition, type BuildResult } from './build.ts';
import { claimPartition, whileLeased } from './claim.ts';

/** The repair's own lease on a partition it rebuilds, renewed while the build runs. */
const REPAIR_LEASE_MS = 60_000;

export interface RepairResult {
  release: string;
  /** Rebuilt here; a partition a worker took first is rebuilt by it, in repair mode, and listed in `byWorker`. */
  repaired: { partition: string; attempt: number; receipt: string; rows: number; deleted: number }[];
  byWorker: string[];
  state: string;
}

export async function repairRelease(db: Db, q: { release: string; partitions: string[]; reason?: string }): Promise<RepairResult> {
  const wanted = [...new Set(q.partitions)].sort();
  if (wanted.length === 0) throw new InvalidInputError([{ path: '--partition', message: 'name at least one partition (or --findings <file>)' }]);

  // One transaction records the repair on every named partition: from here on, whoever
  // claims one of them — this call below, or a worker once the planner re-enqueues it —
  // rebuilds it in repair mode. A repair that dies half-way strands nothing.
  await withTransaction(db, async (conn) => {
    const release = await getRelease(conn, q.release, { lock: 'FOR UPDATE' });
    const { rows } = await conn.query<{ id: string }>('SELECT id FROM genfill.partitions WHERE release = $1 AND id = ANY($2::text[]) ORDER BY id', [
      q.release,
      wanted,
    ]);
    const unknown = wanted.filter((w) => !rows.some((r) => r.id === w));
    if (unknown.length > 0) throw new InvalidInputError([{ path: '--partition', message: `release ${q.release} has no partition ${unknown.join(', ')}` }]);
    if (release.state !== 'RECONCILIATION_REQUIRED') {
      throw new RefusedError(`release ${q.release} is ${release.state}: repair rebuilds partitions of a release in RECONCILIATION_REQUIRED (reconcile it first)`);
    }
    await casTransition(conn, { release: q.release, from: 'RECONCILIATION_REQUIRED', to: 'BUILDING', action: RELEASE_ACTIONS.repair, reason: q.reason, detail: { partitions: wanted } });
    // A partition with a receipt is rebuilt in repair mode (its rows deleted, the receipt
    // superseded); one without (it had failed) is simply built.
    await conn.query(
      `UPDATE genfill.partitions p
          SET status = 'PENDING', leased_by = NULL, lease_expires_at = NULL, reason = NULL, evidence = NULL, updated_at = now(),
              repair_pending = EXISTS (SELECT 1 FROM genfill.receipts r WHERE r.release = p.release AND r.partition = p.id)
        WHERE p.release = $1 AND p.id = ANY($2::text[])`,
      [q.release, wanted],
    );
  });

  const repaired: RepairResult['repaired'] = [];
  const byWorker: string[] = [];
  const worker = `repair:${process.pid}`;
  for (const partition of wanted) {
    const claim = await claimPartition(db, { release: q.release, partition, worker, leaseMs: REPAIR_LEASE_MS });
    if (claim.kind !== 'claimed') {
      // Built or leased by a worker already (it repairs), or the release was paused or cancelled.
      if (claim.kind === 'built' || (claim.kind === 'refused' && claim.reason === 'leased')) byWorker.push(partition);
      else throw new RefusedError(`partition ${partition} could not be claimed for repair (${claim.reason}); it stays marked and a worker repairs it once it can`);
      continue;
    }
    const lease = { release: q.release, partition, attempt: claim.attempt, leaseMs: REPAIR_LEASE_MS };
    const res: BuildResult = await whileLeased(db, lease, () => buildPartition(db, { release: q.release, partition, attempt: claim.attempt, claimed: claim.partition }));
    repaired.push({ partition, attempt: claim.attempt, receipt: res.receiptId, rows: res.rowsOut, deleted: res.timings.deleted ?? 0 });
  }
  const conn = await db.connect();
  try {
    return { release: q.release, repaired, byWorker, state: (await getRelease(conn, q.release)).state };
  } finally {
    conn.release();
  }
}

/** The partitions named in a reconciliation's findings file (NDJSON, one finding a line). */
export function partitionsFromFindings(text: string, file: string): string[] {
  const out = new Set<string>();
  const problems: { path: string; message: string }[] = [];
  text.split('\n').forEach((line, i) => {
    if (line.trim() === '') return;
    try {
      const f = JSON.parse(line) as { partition?: unknown };
      // Release-wide findings (coverage, a changed dependency) name no partition: a rebuild
      // of one cannot fix them, so they are not repair's to act on.
      if (typeof f.partition === 'string') out.add(f.partition);
      else if (f.partition !== null) problems.push({ path: `${file}:${i + 1}`, message: 'a finding whose partition is neither a string nor null' });
    } catch {
      problems.push({ path: `${file}:${i + 1}`, message: 'not a JSON line' });
    }
  });
  if (problems.length > 0) throw new InvalidInputError(problems);
  return [...out];
}

/** `genfill repair` as a request the planner service executes. */
export const repairRequest: RequestHandler<'repair'> = async (db, req) => ({
  result: await repairRelease(db, { release: req.release, partitions: req.args.partitions, reason: req.args.reason }),
});
