// Operator verbs: pause, resume, cancel. The registry is what workers obey (a claim checks the
// pause flags and the state in its own transaction); the BullMQ queue only mirrors it, so the
// Redis half of each verb is best effort and re-applied by the planner.
import { canTransition, NotFoundError, OPEN_STATES, RefusedError, type ReleaseState } from '@genfill/contracts';
import { qualifiedQueueName, releaseQueue, syncQueuePause } from '@genfill/queue';
import { casTransition, getRelease, RELEASE_ACTIONS, setPauseFlag, withTransaction, type Db } from '@genfill/registry';
import type { Dispatcher } from './dispatch.ts';

/**
 * Who acts through a front end other than the CLI: the API passes its token's subject, which
 * is recorded as the principal instead of the database login the API connects as, and `via`
 * goes into the log detail. The CLI passes none: its principal is session_user.
 */
export interface Actor {
  principal: string;
  via: string;
}

export interface PauseResult {
  release: string;
  state: ReleaseState;
  paused: boolean;
  /** False when the flag already had that value: nothing was written. */
  changed: boolean;
}

/**
 * Set the operator flag. The UPDATE is fenced on the old value, so two operators racing
 * record one change, and the other learns it was a no-op.
 */
export async function setOperatorPause(db: Db, id: string, paused: boolean, reason: string | null = null, actor?: Actor): Promise<PauseResult> {
  return withTransaction(db, async (conn) => {
    const verb = paused ? RELEASE_ACTIONS.pause : RELEASE_ACTIONS.resume;
    const changedIn = await setPauseFlag(conn, {
      release: id,
      flag: 'operator_paused',
      value: paused,
      action: verb,
      reason,
      detail: { operatorPaused: paused, ...(actor && { via: actor.via }) },
      principal: actor?.principal,
    });
    if (changedIn) return { release: id, state: changedIn, paused, changed: true };
    const { rows } = await conn.query<{ state: ReleaseState; operator_paused: boolean }>(
      'SELECT state, operator_paused FROM genfill.releases WHERE id = $1',
      [id],
    );
    const now = rows[0];
    if (!now) throw new NotFoundError(`release ${id} does not exist: check the id with \`genfill status\``);
    if (!OPEN_STATES.includes(now.state)) {
      throw new RefusedError(`release ${id} is ${now.state}: ${verb} applies only to open releases, nothing was changed`);
    }
    if (now.operator_paused === paused) return { release: id, state: now.state, paused, changed: false };
    // The flag had the old value, yet the fenced UPDATE matched nothing: another writer won.
    throw new RefusedError(`release ${id}: the ${verb} lost a race with another change of the flag; check \`genfill status ${id}\``);
  });
}

export interface CancelResult {
  release: string;
  from: ReleaseState;
  state: 'CANCELLED';
}

/** Any open state → CANCELLED by compare-and-swap; CANCELLED again or a closed state is refused. */
export async function cancelRelease(db: Db, id: string, reason: string | null = null, actor?: Actor): Promise<CancelResult> {
  return withTransaction(db, async (conn) => {
    const release = await getRelease(conn, id, { lock: 'FOR UPDATE' });
    if (release.state === 'CANCELLED') throw new RefusedError(`release ${id} is already CANCELLED`);
    if (!canTransition(release.state, 'CANCELLED')) {
      throw new RefusedError(
        `release ${id} is ${release.state}: only an open release can be cancelled` +
          (release.state === 'ACTIVE' ? `; to undo a cutover use \`genfill rollback ${id}\`` : ''),
      );
    }
    const { rows } = await conn.query<{ status: string; n: number }>(
      'SELECT status, count(*)::int AS n FROM genfill.partitions WHERE release = $1 GROUP BY status ORDER BY status',
      [id],
    );
    await casTransition(conn, {
      release: id,
      from: release.state,
      to: 'CANCELLED',
      action: RELEASE_ACTIONS.cancel,
      reason: reason ?? undefined,
      detail: { partitions: Object.fromEntries(rows.map((r) => [r.status, r.n])), ...(actor && { via: actor.via }) },
      principal: actor?.principal,
    });
    return { release: id, from: release.state, state: 'CANCELLED' as const };
  });
}

export interface QueueMirror {
  queue: string;
  paused: boolean;
  changed: boolean;
}

/** Mirror the operator flag on the release's BullMQ queue. */
export async function mirrorPause(dispatcher: Dispatcher, id: string, paused: boolean): Promise<QueueMirror> {
  const queue = releaseQueue(id, { connection: dispatcher.redis, prefix: dispatcher.prefix });
  try {
    const sync = await syncQueuePause(queue, paused);
    return { queue: qualifiedQueueName(dispatcher.prefix, id), ...sync };
  } finally {
    await queue.close();
  }
}

export interface QueueRemoval {
  queue: string;
  /** Jobs the queue held (waiting, delayed, active, failed, …) before it was removed. */
  dropped: number;
}

/** Remove a cancelled release's queue with every job in it, so none is delivered again. */
export async function removeReleaseQueue(dispatcher: Dispatcher, id: string): Promise<QueueRemoval> {
  const queue = releaseQueue(id, { connection: dispatcher.redis, prefix: dispatcher.prefix });
  try {
    // A new Queue writes its meta hash asynchronously; waiting for it keeps that write from
    // landing after the obliterate and leaving a key behind.
    await queue.getVersion();
    const counts = await queue.getJobCounts();
    await queue.obliterate({ force: true });
    return { queue: qualifiedQueueName(dispatcher.prefix, id), dropped: Object.values(counts).reduce((a, b) => a + b, 0) };
  } finally {
    await queue.close();
  }
}
