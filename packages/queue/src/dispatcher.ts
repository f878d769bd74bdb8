// What dispatches a release's work in Redis and what removes it: the Dispatcher every front end
// holds (the planner, the API, the reconciler's cleanup), the queue-pause mirror of the operator
// flag, and the removal of a release's queue and keys. Redis only: the registry decides, these
// follow it (a failure here is re-applied by the next planner or reconciler round).
import { queueName } from './names.ts';
import { qualifiedQueueName, releaseQueue, syncQueuePause } from './queue.ts';
import type { Redis } from './redis.ts';

export interface Dispatcher {
  redis: Redis;
  /** GENFILL_QUEUE_PREFIX */
  prefix: string;
  /** GENFILL_DISPATCH_WINDOW: jobs a release keeps in Redis at most (default 10,000). */
  window?: number;
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

/** A Redis glob matching `literal` exactly (*, ?, [, ] and \ escaped). */
function globLiteral(literal: string): string {
  return literal.replace(/[*?[\]\\]/g, (c) => `\\${c}`);
}

/** Delete every key matching `pattern` on every node that can hold it; returns how many went. */
async function deleteMatching(redis: Redis, pattern: string): Promise<number> {
  // A Redis Cluster scans per master node (a queue's keys share one slot, but which node holds it is the cluster's business).
  const nodes: Redis[] = (redis as { nodes?: (role: 'master') => Redis[] }).nodes?.('master') ?? [redis];
  let n = 0;
  for (const node of nodes) {
    let cursor = '0';
    do {
      const [next, keys] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', 500);
      cursor = next;
      for (const k of keys) n += await node.del(k);
    } while (cursor !== '0');
  }
  return n;
}

/** Remove one release's queue and Redis keys (idempotent). */
export async function removeReleaseDispatch(dispatcher: Dispatcher, release: string): Promise<{ queue: string; jobs: number; keys: number }> {
  const removal = await removeReleaseQueue(dispatcher, release);
  const p = globLiteral(dispatcher.prefix);
  const keys =
    (await deleteMatching(dispatcher.redis, `${p}:${globLiteral(queueName(release))}:*`)) +
    (await deleteMatching(dispatcher.redis, `${p}:throttle:${globLiteral(release)}:*`));
  return { queue: removal.queue, jobs: removal.dropped, keys };
}
