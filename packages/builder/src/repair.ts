// `genfill repair`: rebuild exactly the named partitions of a release that reconciliation
// refused. Each is one fenced transaction — delete the candidate's rows of the partition,
// rebuild them, write a receipt superseding the previous one (history stays) — and the last
// one moves the release back to BUILT, ready to be reconciled again.
import { InvalidInputError, RefusedError } from '@genfill/contracts';
import { casTransition, getRelease, RELEASE_ACTIONS, withTransaction, type Db, type RequestOutcome, type RequestRow } from '@genfill/registry';
import { buildPartition, type BuildResult } from './build.ts';

/** Long enough that a worker's duplicate delivery waits instead of taking the partition. */
const REPAIR_LEASE = '10 minutes';

export interface RepairResult {
  release: string;
  repaired: { partition: string; attempt: number; receipt: string; rows: number; deleted: number }[];
  state: string;
}

export async function repairRelease(db: Db, q: { release: string; partitions: string[]; reason?: string }): Promise<RepairResult> {
  const wanted = [...new Set(q.partitions)].sort();
  if (wanted.length === 0) throw new InvalidInputError([{ path: '--partition', message: 'name at least one partition (or --findings <file>)' }]);

  const claimed = await withTransaction(db, async (conn) => {
    const release = await getRelease(conn, q.release, { lock: 'FOR UPDATE' });
    const { rows } = await conn.query<{ id: string; kind: string; status: string }>(
      'SELECT id, kind, status FROM genfill.partitions WHERE release = $1 AND id = ANY($2::text[]) ORDER BY id',
      [q.release, wanted],
    );
    const unknown = wanted.filter((w) => !rows.some((r) => r.id === w));
    if (unknown.length > 0) throw new InvalidInputError([{ path: '--partition', message: `release ${q.release} has no partition ${unknown.join(', ')}` }]);
    if (release.state !== 'RECONCILIATION_REQUIRED') {
      throw new RefusedError(`release ${q.release} is ${release.state}: repair rebuilds partitions of a release in RECONCILIATION_REQUIRED (reconcile it first)`);
    }
    await casTransition(conn, { release: q.release, from: 'RECONCILIATION_REQUIRED', to: 'BUILDING', action: RELEASE_ACTIONS.repair, reason: q.reason, detail: { partitions: wanted } });
    const out: { partition: string; attempt: number }[] = [];
    for (const r of rows) {
      const res = await conn.query<{ attempt: number }>(
        `UPDATE genfill.partitions
            SET status = 'RUNNING', attempt = attempt + 1, leased_by = 'repair:' || session_user,
                lease_expires_at = clock_timestamp() + interval '${REPAIR_LEASE}', updated_at = now()
          WHERE release = $1 AND id = $2 AND status = $3
         RETURNING attempt`,
        [q.release, r.id, r.status],
      );
      if (res.rowCount !== 1) throw new RefusedError(`partition ${r.id} changed while the repair claimed it; nothing was repaired`);
      out.push({ partition: r.id, attempt: res.rows[0]!.attempt });
    }
    return out;
  });

  const repaired: RepairResult['repaired'] = [];
  for (const c of claimed) {
    const res: BuildResult = await buildPartition(db, { release: q.release, partition: c.partition, attempt: c.attempt, repair: true });
    repaired.push({ partition: c.partition, attempt: c.attempt, receipt: res.receiptId, rows: res.rowsOut, deleted: res.timings.deleted ?? 0 });
  }
  const conn = await db.connect();
  try {
    return { release: q.release, repaired, state: (await getRelease(conn, q.release)).state };
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

/** `genfill repair` as a request a service executes (the planner's entry points wire it). */
export async function repairRequest(db: Db, req: RequestRow): Promise<RequestOutcome> {
  const args = req.args as { partitions?: string[]; reason?: string };
  return { result: await repairRelease(db, { release: req.release, partitions: args.partitions ?? [], reason: args.reason }) };
}
