// Enqueue exactly the partitions the registry says are unfinished: the planner's half of
// dispatch (the registry bookkeeping), over @genfill/queue's BullMQ half.
//
// Job ids are `<partition>.e<enqueue_epoch>` and BullMQ ignores an add for an id it holds,
// so running this twice, twice at once, or after Redis lost every key converges on one live
// job per unfinished partition. Registry first, Redis second: epochs are bumped and committed
// before any job carrying them is added, so a crash between the two leaves nothing the next
// run cannot re-derive.
import type { ReleaseState } from '@genfill/contracts';
import { buildJob, isRedisClient, MAX_UNIT_PARTITIONS, unitJobId, type BuildQueue, type Redis } from '@genfill/queue';
import { holdLock, logAction, RELEASE_ACTIONS, withTransaction, type Conn, type Db } from '@genfill/registry';

type PartitionStatus = 'PENDING' | 'RUNNING' | 'BUILT' | 'FAILED';

interface Unfinished {
  id: string;
  status: PartitionStatus;
  epoch: number;
  kind: 'build' | 'carry';
  /** The partition's estimated source rows (null before the estimate). */
  est: number | null;
}

/**
 * A unit: consecutive partitions (in seq order, one kind) dispatched as one job. The grouping
 * runs over EVERY partition of the release, built or not, and est_rows does not change once
 * the release is BUILDING, so a unit always has the same members and each dispatcher (plan,
 * the planner service, every worker's top-up) derives the same job ids. Members are built one
 * by one, each with its own claim and receipt.
 */
export interface Unit {
  jobId: string;
  members: Unfinished[];
}

export function groupUnits(parts: Unfinished[], batchRows: number): Unit[] {
  const units: Unit[] = [];
  let cur: Unfinished[] = [];
  let rows = 0;
  const close = () => {
    if (cur.length > 0) units.push({ jobId: unitJobId(cur), members: cur });
    cur = [];
    rows = 0;
  };
  for (const p of parts) {
    // Unknown size: alone. Batching off (0): alone.
    const est = p.est ?? Number.POSITIVE_INFINITY;
    const fits = batchRows > 0 && cur.length > 0 && cur.length < MAX_UNIT_PARTITIONS && cur[0]!.kind === p.kind && rows + est <= batchRows;
    if (!fits) close();
    cur.push(p);
    rows += est;
  }
  close();
  return units;
}

/** The members a unit's job still has to build: not built, and not failed for good. */
const open = (u: Unit) => u.members.filter((m) => m.status !== 'BUILT' && m.status !== 'FAILED');

export interface EnqueueOptions {
  /**
   * Reset FAILED partitions to PENDING under a new epoch (what `genfill plan` does after the
   * operator fixed the cause). The planner service passes false: re-running a partition that
   * failed for a final reason every round would only hide the failure.
   */
  requeueFailed?: boolean;
  /**
   * Jobs the release keeps in Redis at most (1–10,000, default 10,000): only the deficit
   * between the live jobs and the window is added, the next unfinished partitions in seq order.
   */
  window?: number;
}

export const DISPATCH_WINDOW = { default: 10_000, max: 10_000 } as const;

export interface EnqueueResult {
  release: string;
  /** The release's state as this call found it; nothing is enqueued unless BUILDING. */
  state: ReleaseState | null;
  /** Partitions not BUILT after the requeue. */
  unfinished: number;
  /** Jobs this call submitted because Redis did not hold their id (BullMQ drops duplicates). */
  added: number;
  /** Partitions those jobs carry (more than `added` when the release batches: partition.batchRows). */
  addedPartitions: number;
  /** Partitions moved to a new enqueue epoch by this call. */
  requeued: number;
  requeuedPartitions: string[];
  /** Partitions whose requeue found another epoch or status: someone else moved first. */
  lost: number;
  /** The window, and the jobs Redis held before this call added any. */
  window: number;
  live: number;
}

const CHUNK = 1000;

/** Every partition of the release in seq order (units are grouped over all of them). */
async function listPartitions(conn: Conn | Db, release: string): Promise<Unfinished[]> {
  const { rows } = await conn.query<Omit<Unfinished, 'est'> & { est: string | null }>(
    `SELECT id, status, enqueue_epoch AS epoch, kind, est_rows::text AS est FROM genfill.partitions
      WHERE release = $1 ORDER BY seq`,
    [release],
  );
  return rows.map((r) => ({ ...r, est: r.est === null ? null : Number(r.est) }));
}

async function releaseState(conn: Conn | Db, release: string): Promise<ReleaseState | null> {
  const { rows } = await conn.query<{ state: ReleaseState }>('SELECT state FROM genfill.releases WHERE id = $1', [release]);
  return rows[0]?.state ?? null;
}

/** The release's partition.batchRows (0: one job per partition). */
async function batchRowsOf(conn: Conn | Db, release: string): Promise<number> {
  const { rows } = await conn.query<{ n: string | null }>(`SELECT spec->'partition'->>'batchRows' AS n FROM genfill.releases WHERE id = $1`, [release]);
  return Number(rows[0]?.n ?? 0);
}

/** The connection releaseQueue was given: the pipeline below needs the raw client. */
function redisOf(queue: BuildQueue): Redis {
  const c = queue.opts.connection;
  if (!isRedisClient(c)) throw new Error('enqueueUnfinished needs a queue made by releaseQueue (an ioredis connection)');
  return c;
}

type Presence = 'absent' | 'present' | 'failed';

/** For each job id: is it in Redis, and did it exhaust its retries (BullMQ's failed set)? */
async function jobPresence(queue: BuildQueue, ids: string[]): Promise<Map<string, Presence>> {
  const redis = redisOf(queue);
  const out = new Map<string, Presence>();
  for (let i = 0; i < ids.length; i += CHUNK) {
    const chunk = ids.slice(i, i + CHUNK);
    const pipe = redis.pipeline();
    for (const id of chunk) pipe.exists(queue.toKey(id)).zscore(queue.keys.failed!, id);
    const replies = (await pipe.exec()) ?? [];
    chunk.forEach((id, k) => {
      const [existsErr, exists] = replies[2 * k] ?? [new Error('no reply'), null];
      const [scoreErr, score] = replies[2 * k + 1] ?? [new Error('no reply'), null];
      if (existsErr) throw existsErr;
      if (scoreErr) throw scoreErr;
      out.set(id, score !== null ? 'failed' : exists === 1 ? 'present' : 'absent');
    });
  }
  return out;
}

/**
 * One fenced statement per kind: a FAILED partition, and a PENDING/RUNNING one whose job
 * BullMQ gave up on (a worker killed more often than the stall limit allows) — the registry
 * never heard of that failure, and the job id stays taken, so without a new epoch the
 * partition would wait forever. Both go back to PENDING under epoch + 1; the attempt (the
 * lease token) is untouched, so the next claim still fences any old worker.
 */
async function bumpEpochs(
  conn: Conn,
  release: string,
  targets: Unfinished[],
  statuses: PartitionStatus[],
): Promise<{ id: string; from: PartitionStatus; reason: string | null }[]> {
  if (targets.length === 0) return [];
  const { rows } = await conn.query<{ id: string; from: PartitionStatus; reason: string | null }>(
    `WITH old AS (
       SELECT p.id, p.status, p.reason FROM genfill.partitions p
         JOIN unnest($2::text[], $3::int[]) AS s(id, epoch) ON p.id = s.id
        WHERE p.release = $1 AND p.enqueue_epoch = s.epoch AND p.status = ANY($4::text[])
          FOR UPDATE OF p
     )
     UPDATE genfill.partitions p
        SET status = 'PENDING', enqueue_epoch = p.enqueue_epoch + 1, reason = NULL, evidence = NULL, updated_at = now()
       FROM old
      WHERE p.release = $1 AND p.id = old.id
        AND EXISTS (SELECT 1 FROM genfill.releases r WHERE r.id = $1 AND r.state = 'BUILDING')
     RETURNING p.id, old.status AS "from", old.reason`,
    [release, targets.map((t) => t.id), targets.map((t) => t.epoch), statuses],
  );
  return rows;
}

/**
 * Dispatch of one release runs one at a time (the release's dispatch lock, held across the
 * Redis calls): the live count is read and the deficit added under it, so the planner,
 * `genfill plan` and every worker topping up never add more than the window together.
 * `wait: false` gives up at once (a worker's top-up: someone else is dispatching). The lock is
 * a LOCK TABLE on a genfill-only relation, which no login outside genfill can hold (it was a
 * session advisory lock, which any login could); LOCK TABLE has no session scope, so a
 * transaction of its own holds it while the dispatch runs on other connections (holdLock).
 */
async function withDispatchLock<T>(db: Db, release: string, wait: boolean, fn: () => Promise<T>): Promise<T | null> {
  const held = await holdLock(db, 'dispatch', release, wait ? 'exclusive' : 'try-exclusive');
  if (!held) return null;
  try {
    return await fn();
  } finally {
    await held.release();
  }
}

/**
 * A worker's top-up: when the release's live jobs have fallen to half the window or below,
 * enqueue the deficit (no requeue of FAILED partitions: that is the operator's `genfill plan`).
 * Returns the jobs added, or null when nothing was needed or another dispatch was running.
 */
export async function topUpWindow(db: Db, queue: BuildQueue, release: string, window: number = DISPATCH_WINDOW.default): Promise<number | null> {
  const counts = await queue.getJobCounts('waiting', 'active', 'delayed', 'prioritized', 'waiting-children');
  const live = Object.values(counts).reduce((a, b) => a + b, 0);
  if (live > Math.floor(window / 2)) return null;
  const r = await withDispatchLock(db, release, false, () => enqueueUnfinished(db, queue, release, { requeueFailed: false, window, locked: true }));
  return r ? r.added : null;
}

export async function enqueueUnfinished(
  db: Db,
  queue: BuildQueue,
  release: string,
  opts: EnqueueOptions & { locked?: boolean } = {},
): Promise<EnqueueResult> {
  if (!opts.locked) return (await withDispatchLock(db, release, true, () => enqueueUnfinished(db, queue, release, { ...opts, locked: true })))!;
  const requeueFailed = opts.requeueFailed ?? true;
  const window = Math.min(DISPATCH_WINDOW.max, Math.max(1, Math.floor(opts.window ?? DISPATCH_WINDOW.default)));
  const result: EnqueueResult = { release, state: null, unfinished: 0, added: 0, addedPartitions: 0, requeued: 0, requeuedPartitions: [], lost: 0, window, live: 0 };
  result.state = await releaseState(db, release);
  if (result.state !== 'BUILDING') return result;

  const batchRows = await batchRowsOf(db, release);
  const before = await listPartitions(db, release);
  // Jobs BullMQ gave up on, from its failed set (bounded), rather than a lookup per partition.
  const failedIds = new Set(await redisOf(queue).zrange(queue.keys.failed!, '0', '-1'));
  const failed = requeueFailed ? before.filter((p) => p.status === 'FAILED') : [];
  const stuck = groupUnits(before, batchRows).flatMap((u) => (failedIds.has(u.jobId) ? open(u) : []));

  const { after, state } = await withTransaction(db, async (conn) => {
    const bumped = [
      ...(await bumpEpochs(conn, release, failed, ['FAILED'])),
      ...(await bumpEpochs(conn, release, stuck, ['PENDING', 'RUNNING'])),
    ];
    result.requeued = bumped.length;
    result.requeuedPartitions = bumped.map((b) => b.id);
    result.lost = failed.length + stuck.length - bumped.length;
    if (bumped.length > 0) {
      await logAction(conn, {
        release,
        action: RELEASE_ACTIONS.requeue,
        detail: {
          partitions: bumped.map((b) => b.id),
          previous: Object.fromEntries(bumped.map((b) => [b.id, b.reason ? `${b.from}: ${b.reason}` : b.from])),
        },
      });
    }
    // A fresh statement sees every commit so far, including a concurrent planner's bumps.
    return { after: await listPartitions(conn, release), state: await releaseState(conn, release) };
  });
  result.state = state;
  result.unfinished = after.filter((p) => p.status !== 'BUILT').length;
  if (state !== 'BUILDING') return result;

  // A window of jobs, not one per partition: the deficit between the jobs Redis holds and the
  // window goes in, the next units in seq order with something to build whose job Redis does
  // not hold (an id it holds would be ignored anyway). A FAILED partition gets a job only
  // through a requeue (a claim would refuse it). Workers and the planner call this again as
  // partitions finish; a Redis that lost every key gets the first window back on the next call.
  const counts = await queue.getJobCounts('waiting', 'active', 'delayed', 'prioritized', 'waiting-children');
  result.live = Object.values(counts).reduce((a, b) => a + b, 0);
  const deficit = result.window - result.live;
  const missing: Unit[] = [];
  const candidates = groupUnits(after, batchRows).filter((u) => open(u).length > 0);
  for (let i = 0; i < candidates.length && missing.length < deficit; i += CHUNK) {
    const chunk = candidates.slice(i, i + CHUNK);
    const presence = await jobPresence(queue, chunk.map((u) => u.jobId));
    for (const u of chunk) {
      if (missing.length >= deficit) break;
      if ((presence.get(u.jobId) ?? 'absent') === 'absent') missing.push(u);
    }
  }
  for (let i = 0; i < missing.length; i += CHUNK) {
    await queue.addBulk(
      missing.slice(i, i + CHUNK).map((u) => {
        const todo = open(u).map((m) => m.id);
        // The job's epoch: the unit's (the sum of its members'), the partition's own for a unit of one.
        return buildJob(release, todo[0]!, u.members.reduce((a, m) => a + m.epoch, 0), { id: u.jobId, partitions: todo });
      }),
    );
  }
  result.added = missing.length;
  result.addedPartitions = missing.reduce((a, u) => a + open(u).length, 0);

  // A cancel that committed after our check obliterated the queue before these adds landed:
  // take them out again (a claim would refuse them anyway, but none should be delivered).
  if (missing.length > 0 && (await releaseState(db, release)) === 'CANCELLED') {
    await queue.obliterate({ force: true });
    result.state = 'CANCELLED';
  }
  return result;
}
