// One BullMQ queue per release under the hash-tagged prefix. The queue is dispatch only: its
// pause mirrors the registry's operator flag, and its completed jobs prove nothing.
import { Queue, type JobsOptions } from 'bullmq';
import { BUILD_JOB, jobId, queueName, type BuildJob } from './names.ts';
import type { Redis } from './redis.ts';

export type BuildQueue = Queue<BuildJob, unknown, typeof BUILD_JOB>;

export interface ReleaseQueueOptions {
  connection: Redis;
  /** GENFILL_QUEUE_PREFIX, e.g. `{genfill}`: the braces keep a queue's keys in one cluster slot. */
  prefix: string;
}

export function releaseQueue(release: string, opts: ReleaseQueueOptions): BuildQueue {
  const queue: BuildQueue = new Queue<BuildJob, unknown, typeof BUILD_JOB>(queueName(release), {
    connection: opts.connection,
    prefix: opts.prefix,
  });
  // Connection errors surface on the command that fails; an unhandled 'error' would crash.
  queue.on('error', () => undefined);
  return queue;
}

/** `{genfill}:release.<id>`: how Bull Board and redis-cli name the queue. */
export function qualifiedQueueName(prefix: string, release: string): string {
  return `${prefix}:${queueName(release)}`;
}

/**
 * Retries back off; a failed job is kept (Bull Board shows it, and its id stays taken until
 * plan bumps the partition's enqueue epoch); a completed one is dropped because the
 * registry's BUILT status, not BullMQ, records completion.
 */
export const BUILD_JOB_OPTIONS = {
  attempts: 5,
  backoff: { type: 'exponential', delay: 1000 },
  removeOnComplete: true,
  removeOnFail: false,
} as const satisfies JobsOptions;

export function buildJob(release: string, partition: string, epoch: number, unit?: { id: string; partitions: string[] }) {
  return {
    name: BUILD_JOB as typeof BUILD_JOB,
    data: (unit && unit.partitions.length > 1 ? { release, partition, epoch, partitions: unit.partitions } : { release, partition, epoch }) satisfies BuildJob,
    opts: { jobId: unit?.id ?? jobId(partition, epoch), ...BUILD_JOB_OPTIONS },
  };
}

export interface PauseSync {
  paused: boolean;
  changed: boolean;
}

/** Make the BullMQ queue's pause match the registry's operator flag (never the throttle's). */
export async function syncQueuePause(queue: BuildQueue, operatorPaused: boolean): Promise<PauseSync> {
  const paused = await queue.isPaused();
  if (paused === operatorPaused) return { paused, changed: false };
  if (operatorPaused) await queue.pause();
  else await queue.resume();
  return { paused: operatorPaused, changed: true };
}
