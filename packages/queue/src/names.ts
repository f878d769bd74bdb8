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

/**
 * A unit's job: its first partition, how many follow it, and the sum of its members' epochs
 * (any member's requeue bumps its epoch, so the unit gets a new id). A unit of one partition
 * has that partition's own job id.
 */
export function unitJobId(members: readonly { id: string; epoch: number }[]): string {
  if (members.length === 0) throw new Error('a unit has at least one partition');
  if (members.length === 1) return jobId(members[0]!.id, members[0]!.epoch);
  return `${members[0]!.id}+${members.length - 1}.e${members.reduce((a, m) => a + m.epoch, 0)}`;
}

/** Partitions a unit holds at most, whatever their estimated rows (bounds a job's payload). */
export const MAX_UNIT_PARTITIONS = 1000;

export const BUILD_JOB = 'build';

export const buildJobSchema = z.strictObject({
  release: z.string().min(1),
  partition: z.string().min(1),
  epoch: z.number().int().min(0),
  /** A unit's partitions in build order (the first is `partition`); absent for a single partition. */
  partitions: z.array(z.string().min(1)).min(1).max(MAX_UNIT_PARTITIONS).optional(),
});
export type BuildJob = z.infer<typeof buildJobSchema>;
