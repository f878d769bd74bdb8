// A claim is a registry transaction: it checks the release state and both pause flags and
// bumps the partition's attempt, which is the fencing token every later write compares.
// The release row is read FOR SHARE, so `pause` (an UPDATE of that row) waits for claims in
// flight and every claim after it sees the flag: once pause returns, no partition starts.
import { logAction, RELEASE_ACTIONS, withTransaction, type Db } from '@genfill/registry';

export type RefusalReason = 'operator_paused' | 'throttle_paused' | 'not_building' | 'cancelled' | 'failed' | 'leased' | 'unknown';

/** What a claim tells the build about its partition, so the build need not read it again. */
export interface ClaimedPartition {
  lower: Date;
  upper: Date;
  kind: 'build' | 'carry';
  repairPending: boolean;
}

export type ClaimResult =
  | { kind: 'claimed'; attempt: number; partition: ClaimedPartition }
  /** A receipt exists: the job is done, whatever BullMQ remembers. */
  | { kind: 'built' }
  /** Not now: retry after `retryInMs` without spending an attempt, or never when null. */
  | { kind: 'refused'; reason: RefusalReason; retryInMs: number | null };

export const PAUSED_RETRY_MS = 5_000;

/**
 * The claim is ONE statement (one round trip, its own transaction): the first CTE locks the
 * release row FOR SHARE and the partitions' rows FOR UPDATE (in id order, so two claims of
 * overlapping sets cannot deadlock) and reads what decides; the UPDATE bumps the attempt of
 * each partition for which every condition holds, fenced on the attempt it read. The caller
 * gets what was read either way and derives each refusal from it, in the order below. A unit
 * (partition.batchRows) claims all its partitions with one statement: one commit, not one each.
 */
const CLAIM = `
WITH cur AS (
  SELECT p.id, r.state, r.operator_paused, r.throttle_paused, p.status, p.attempt, p.lower, p.upper, p.kind, p.repair_pending,
         (extract(epoch FROM p.lease_expires_at - clock_timestamp()) * 1000)::int AS lease_left_ms
    FROM genfill.releases r JOIN genfill.partitions p ON p.release = r.id
   WHERE r.id = $1 AND p.id = ANY($2::text[])
   ORDER BY p.id
     FOR SHARE OF r FOR UPDATE OF p
), claimed AS (
  UPDATE genfill.partitions p
     SET status = 'RUNNING', attempt = p.attempt + 1, leased_by = $3,
         lease_expires_at = clock_timestamp() + $4 * interval '1 millisecond', updated_at = now()
    FROM cur
   WHERE p.release = $1 AND p.id = cur.id AND p.attempt = cur.attempt
     AND cur.state = 'BUILDING' AND NOT cur.operator_paused AND NOT cur.throttle_paused
     AND cur.status IN ('PENDING', 'RUNNING')
     AND NOT (cur.status = 'RUNNING' AND coalesce(cur.lease_left_ms, 0) > 0)
  RETURNING p.id, p.attempt
)
SELECT cur.*, claimed.attempt AS claimed FROM cur LEFT JOIN claimed ON claimed.id = cur.id`;

interface ClaimRow {
  id: string;
  state: string;
  operator_paused: boolean;
  throttle_paused: boolean;
  status: string;
  attempt: number;
  lower: Date;
  upper: Date;
  kind: 'build' | 'carry';
  repair_pending: boolean;
  lease_left_ms: number | null;
  claimed: number | null;
}

function outcome(release: string, row: ClaimRow | undefined): ClaimResult {
  if (!row) return { kind: 'refused', reason: 'unknown', retryInMs: null };
  if (row.claimed !== null) {
    return { kind: 'claimed', attempt: row.claimed, partition: { lower: row.lower, upper: row.upper, kind: row.kind, repairPending: row.repair_pending } };
  }
  if (row.status === 'BUILT') return { kind: 'built' };
  if (row.state === 'CANCELLED') return { kind: 'refused', reason: 'cancelled', retryInMs: null };
  if (row.state !== 'BUILDING') return { kind: 'refused', reason: 'not_building', retryInMs: null };
  if (row.operator_paused) return { kind: 'refused', reason: 'operator_paused', retryInMs: PAUSED_RETRY_MS };
  if (row.throttle_paused) return { kind: 'refused', reason: 'throttle_paused', retryInMs: PAUSED_RETRY_MS };
  if (row.status === 'FAILED') return { kind: 'refused', reason: 'failed', retryInMs: null };
  // A live lease belongs to a worker still building; a duplicate delivery waits it out.
  if (row.status === 'RUNNING' && row.lease_left_ms !== null && row.lease_left_ms > 0) {
    return { kind: 'refused', reason: 'leased', retryInMs: row.lease_left_ms + 100 };
  }
  throw new Error(`claim of ${row.id} of ${release} neither claimed nor refused (status ${row.status}, attempt ${row.attempt})`);
}

/** Claim several partitions of one release in one statement: each one's outcome, by id. */
export async function claimPartitions(
  db: Db,
  q: { release: string; partitions: string[]; worker: string; leaseMs: number },
): Promise<Map<string, ClaimResult>> {
  const { rows } = await db.query<ClaimRow>(CLAIM, [q.release, q.partitions, q.worker, q.leaseMs]);
  const byId = new Map(rows.map((r) => [r.id, r]));
  return new Map(q.partitions.map((id) => [id, outcome(q.release, byId.get(id))]));
}

export async function claimPartition(
  db: Db,
  q: { release: string; partition: string; worker: string; leaseMs: number },
): Promise<ClaimResult> {
  const out = await claimPartitions(db, { release: q.release, partitions: [q.partition], worker: q.worker, leaseMs: q.leaseMs });
  return out.get(q.partition)!;
}

/** Mark a partition FAILED with its reason and evidence, fenced by the attempt. */
export async function failPartition(
  db: Db,
  q: { release: string; partition: string; attempt: number; reason: string; evidence: unknown },
): Promise<boolean> {
  return withTransaction(db, async (conn) => {
    const res = await conn.query(
      `UPDATE genfill.partitions
          SET status = 'FAILED', reason = $4, evidence = $5, lease_expires_at = NULL, updated_at = now()
        WHERE release = $1 AND id = $2 AND attempt = $3 AND status = 'RUNNING'`,
      [q.release, q.partition, q.attempt, q.reason, JSON.stringify(q.evidence)],
    );
    if (res.rowCount !== 1) return false;
    await logAction(conn, { release: q.release, action: RELEASE_ACTIONS.partitionFailed, reason: q.reason, detail: { partition: q.partition, attempt: q.attempt } });
    return true;
  });
}

/**
 * A retryable failure gives the lease back at once, so the retry's claim need not wait for
 * it to run out; the attempt stays bumped, so a late commit of the failed try is still fenced.
 */
export async function releaseLease(db: Db, q: { release: string; partition: string; attempt: number }): Promise<void> {
  await db.query(
    `UPDATE genfill.partitions SET lease_expires_at = clock_timestamp(), updated_at = now()
      WHERE release = $1 AND id = $2 AND attempt = $3 AND status = 'RUNNING'`,
    [q.release, q.partition, q.attempt],
  );
}

/** Push the lease out by `leaseMs`, fenced by the attempt; false once the partition moved on. */
export async function renewLease(db: Db, q: { release: string; partition: string; attempt: number; leaseMs: number }): Promise<boolean> {
  const res = await db.query(
    `UPDATE genfill.partitions SET lease_expires_at = clock_timestamp() + $4 * interval '1 millisecond'
      WHERE release = $1 AND id = $2 AND attempt = $3 AND status = 'RUNNING'`,
    [q.release, q.partition, q.attempt, q.leaseMs],
  );
  return res.rowCount === 1;
}

/** Push out the leases of several partitions each at its attempt (a unit's): those still held. */
export async function renewLeases(db: Db, q: { release: string; held: { partition: string; attempt: number }[]; leaseMs: number }): Promise<number> {
  const res = await db.query(
    `UPDATE genfill.partitions p SET lease_expires_at = clock_timestamp() + $4 * interval '1 millisecond'
       FROM unnest($2::text[], $3::int[]) AS h(id, attempt)
      WHERE p.release = $1 AND p.id = h.id AND p.attempt = h.attempt AND p.status = 'RUNNING'`,
    [q.release, q.held.map((h) => h.partition), q.held.map((h) => h.attempt), q.leaseMs],
  );
  return res.rowCount ?? 0;
}

/** Run `fn` while renewing several partitions' leases every third of the lease (a unit's build). */
export async function whileLeasedAll<T>(db: Db, q: { release: string; held: { partition: string; attempt: number }[]; leaseMs: number }, fn: () => Promise<T>): Promise<T> {
  const timer = setInterval(() => void renewLeases(db, q).catch(() => undefined), Math.max(250, Math.floor(q.leaseMs / 3)));
  try {
    return await fn();
  } finally {
    clearInterval(timer);
  }
}

/**
 * Run `fn` (a build) while renewing the partition's registry lease every third of it, as
 * BullMQ renews the job's lock: a long build keeps its partition, and a holder that dies
 * stops renewing, so another claimer takes the partition one lease period later.
 */
export async function whileLeased<T>(db: Db, q: { release: string; partition: string; attempt: number; leaseMs: number }, fn: () => Promise<T>): Promise<T> {
  const timer = setInterval(() => void renewLease(db, q).catch(() => undefined), Math.max(250, Math.floor(q.leaseMs / 3)));
  try {
    return await fn();
  } finally {
    clearInterval(timer);
  }
}
