// The BullMQ processor of a build job. BullMQ only dispatches: the claim decides, the
// registry records. A refused claim delays its job without spending an attempt; a final
// failure fails the partition with its reason; a fenced build did nothing and says so.
import { DelayedError, UnrecoverableError, type Job } from 'bullmq';
import { PartitionFailedError, RefusedError, StaleLeaseError } from '@genfill/contracts';
import type { Logger, WorkerMetrics } from '@genfill/observability';
import { buildJobSchema } from '@genfill/queue';
import type { Db } from '@genfill/registry';
import { buildPartition } from './build.ts';
import { claimPartition, failPartition, releaseLease, whileLeased } from './claim.ts';

export interface ProcessorOptions {
  db: Db;
  worker: string;
  leaseMs: number;
  log: Logger;
  metrics?: WorkerMetrics;
  /** Awaited right before each claim: the throttle's admission (this worker's rows/s share). */
  admission?: (release: string, partition: string) => Promise<void>;
}

export type JobOutcome =
  | { status: 'built'; receipt: string; rows: number; releaseBuilt: boolean }
  | { status: 'already-built' }
  | { status: 'fenced'; attempt: number }
  | { status: 'dropped'; reason: string };

export function createProcessor(o: ProcessorOptions) {
  return async (job: Job, token?: string): Promise<JobOutcome> => {
    const parsed = buildJobSchema.safeParse(job.data);
    if (!parsed.success) throw new UnrecoverableError(`malformed build job ${job.id}: ${parsed.error.message}`);
    const { release, partition } = parsed.data;
    const log = o.log.child({ release, partition, jobId: job.id });

    await o.admission?.(release, partition);
    const started = performance.now();
    const claim = await claimPartition(o.db, { release, partition, worker: o.worker, leaseMs: o.leaseMs });
    const claimMs = Math.round((performance.now() - started) * 10) / 10;
    o.metrics?.claim(release, claim.kind === 'built' ? 'already_built' : claim.kind, claim.kind === 'refused' ? claim.reason : undefined);
    if (claim.kind === 'built') return { status: 'already-built' };
    if (claim.kind === 'refused') {
      if (claim.retryInMs === null) {
        log.info({ reason: claim.reason }, 'claim refused for good; dropping the job');
        return { status: 'dropped', reason: claim.reason };
      }
      log.debug({ reason: claim.reason, retryInMs: claim.retryInMs }, 'claim refused; delaying the job');
      await job.moveToDelayed(Date.now() + claim.retryInMs, token);
      throw new DelayedError();
    }

    const attempt = claim.attempt;
    const plog = log.child({ attempt });
    try {
      const res = await whileLeased(o.db, { release, partition, attempt, leaseMs: o.leaseMs }, () => buildPartition(o.db, { release, partition, attempt, claimMs }));
      plog.info({ rows: res.rowsOut, timings: res.timings, releaseBuilt: res.releaseBuilt }, 'partition built');
      o.metrics?.attempt(release, 'built');
      o.metrics?.built(release, res.rowsOut, (performance.now() - started) / 1000);
      return { status: 'built', receipt: res.receiptId, rows: res.rowsOut, releaseBuilt: res.releaseBuilt };
    } catch (err) {
      if (err instanceof StaleLeaseError) {
        plog.warn('fenced: a newer attempt owns this partition; nothing was written');
        o.metrics?.attempt(release, 'fenced');
        return { status: 'fenced', attempt };
      }
      if (err instanceof PartitionFailedError) {
        await failPartition(o.db, { release, partition, attempt, reason: err.reason, evidence: err.evidence });
        plog.error({ reason: err.reason, evidence: err.evidence }, err.message);
        o.metrics?.attempt(release, 'failed');
        o.metrics?.failed(release, err.reason);
        throw new UnrecoverableError(err.message);
      }
      if (err instanceof RefusedError) {
        plog.info({ err: err.message }, 'release no longer building; dropping the job');
        o.metrics?.attempt(release, 'dropped');
        return { status: 'dropped', reason: err.message };
      }
      const last = job.attemptsMade + 1 >= (job.opts.attempts ?? 1);
      if (last) {
        await failPartition(o.db, { release, partition, attempt, reason: 'RETRIES_EXHAUSTED', evidence: { message: (err as Error).message, attempts: job.attemptsMade + 1 } });
        o.metrics?.failed(release, 'RETRIES_EXHAUSTED');
      } else {
        await releaseLease(o.db, { release, partition, attempt }).catch(() => undefined);
      }
      plog.warn({ err: (err as Error).message, last }, 'build failed; BullMQ retries with backoff unless this was the last attempt');
      o.metrics?.attempt(release, last ? 'failed' : 'error');
      throw err;
    }
  };
}
