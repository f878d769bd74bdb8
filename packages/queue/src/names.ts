// Dispatch naming. Redis holds only dispatch: these names and payloads carry nothing the
// registry does not already know.
import { z } from 'zod';

/** One BullMQ queue per release. Release ids never contain ':' (BullMQ's key separator). */
export function queueName(release: string): string {
  return `release.${release}`;
}

/**
 * The job id carries the partition's enqueue epoch: BullMQ ignores `add` for an id it still
 * holds (a failed job is kept for Bull Board), so `plan` re-enqueues a partition whose
 * retries were exhausted by bumping the epoch in the registry.
 */
export function jobId(partition: string, epoch: number): string {
  return `${partition}.e${epoch}`;
}

export const BUILD_JOB = 'build';

export const buildJobSchema = z.strictObject({
  release: z.string().min(1),
  partition: z.string().min(1),
  epoch: z.number().int().min(0),
});
export type BuildJob = z.infer<typeof buildJobSchema>;
