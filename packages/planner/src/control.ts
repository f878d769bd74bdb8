// Operator verbs: pause, resume, cancel — each one function in the database (migration 0006),
// the only way a person changes a release. The registry is what workers obey (a claim checks the
// pause flags and the state in its own transaction); the BullMQ queue only mirrors it, so the
// Redis half of each verb is best effort and re-applied by the planner.
import type { ReleaseState } from '@genfill/contracts';
import { qualifiedQueueName, releaseQueue, syncQueuePause } from '@genfill/queue';
import { asPrincipal, cancelReleaseVerb, operatorPauseVerb, type Db } from '@genfill/registry';
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
 * Set the operator flag through genfill.set_operator_pause: of two operators racing, one
 * records the change and the other learns it was a no-op. The actor, when given, is recorded
 * as the principal (the database honours it only for the API's and the fleet's logins).
 */
export async function setOperatorPause(db: Db, id: string, paused: boolean, reason: string | null = null, actor?: Actor): Promise<PauseResult> {
  return asPrincipal(db, actor?.principal, async (conn) => {
    const r = await operatorPauseVerb(conn, { release: id, paused, reason, detail: actor ? { via: actor.via } : undefined });
    return { release: id, state: r.state, paused, changed: r.changed };
  });
}

export interface CancelResult {
  release: string;
  from: ReleaseState;
  state: 'CANCELLED';
}

/** Any open state → CANCELLED through genfill.cancel_release; CANCELLED again or a closed state is refused. */
export async function cancelRelease(db: Db, id: string, reason: string | null = null, actor?: Actor): Promise<CancelResult> {
  return asPrincipal(db, actor?.principal, async (conn) => {
    const from = await cancelReleaseVerb(conn, { release: id, reason, detail: actor ? { via: actor.via } : undefined });
    return { release: id, from, state: 'CANCELLED' as const };
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
