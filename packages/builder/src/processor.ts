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
  | { status: 'dropped'; reason: string }
  /** A unit's job (partition.batchRows): each member's outcome, in build order. */
  | { status: 'unit'; outcomes: { partition: string; outcome: PartitionOutcome }[] };

type PartitionOutcome = Exclude<JobOutcome, { status: 'unit' }>;

/** A member that could not start now: the job comes back after `retryInMs`. */
type Later = { status: 'later'; retryInMs: number; reason: string };
/** A member that failed for good (recorded on the partition). */
type Failed = { status: 'failed'; message: string };

export function createProcessor(o: ProcessorOptions) {
  /** One partition: admission, claim, build. Throws what BullMQ should retry. */
  async function processOne(job: Job, release: string, partition: string, log: Logger): Promise<PartitionOutcome | Later | Failed> {
    await o.admission?.(release, partition);
    const started = performance.now();
    const claim = await claimPartition(o.db, { release, partition, worker: o.worker, leaseMs: o.leaseMs });
    const claimMs = Math.round((performance.now() - started) * 10) / 10;
    o.metrics?.claim(release, claim.kind === 'built' ? 'already_built' : claim.kind, claim.kind === 'refused' ? claim.reason : undefined);
    if (claim.kind === 'built') return { status: 'already-built' };
    if (claim.kind === 'refused') {
      if (claim.retryInMs === null) {
        log.info({ reason: claim.reason, partition }, 'claim refused for good; dropping the partition');
        return { status: 'dropped', reason: claim.reason };
      }
      log.debug({ reason: claim.reason, retryInMs: claim.retryInMs, partition }, 'claim refused; the job comes back later');
      return { status: 'later', retryInMs: claim.retryInMs, reason: claim.reason };
    }

    const attempt = claim.attempt;
    const plog = log.child({ partition, attempt });
    try {
      const res = await whileLeased(o.db, { release, partition, attempt, leaseMs: o.leaseMs }, () => buildPartition(o.db, { release, partition, attempt, claimMs, claimed: claim.partition }));
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
        return { status: 'failed', message: err.message };
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
  }

  return async (job: Job, token?: string): Promise<JobOutcome> => {
    const parsed = buildJobSchema.safeParse(job.data);
    if (!parsed.success) throw new UnrecoverableError(`malformed build job ${job.id}: ${parsed.error.message}`);
    const { release } = parsed.data;
    const members = parsed.data.partitions ?? [parsed.data.partition];
    const log = o.log.child({ release, jobId: job.id, ...(members.length === 1 ? { partition: members[0] } : { partitions: members.length }) });

    // A unit's members one by one, each with its own claim, statement and receipt. A retry of
    // the job (BullMQ's) finds the members built before it already built and skips them.
    const outcomes: { partition: string; outcome: PartitionOutcome }[] = [];
    const failures: string[] = [];
    let later = null as Later | null;
    for (const partition of members) {
      const out = await processOne(job, release, partition, log);
      if (out.status === 'later') {
        // Paused: nothing of the release starts now. Leased: another worker holds this one;
        // go on with the rest and come back for it.
        later = { ...out, retryInMs: Math.max(out.retryInMs, later?.retryInMs ?? 0) };
        if (out.reason !== 'leased') break;
        continue;
      }
      if (out.status === 'failed') {
        failures.push(out.message);
        continue;
      }
      outcomes.push({ partition, outcome: out });
      // A partition failed for good or unknown concerns that partition; any other drop (cancelled,
      // no longer building) concerns the whole release.
      if (out.status === 'dropped' && out.reason !== 'failed' && out.reason !== 'unknown') break;
    }
    if (later) {
      await job.moveToDelayed(Date.now() + later.retryInMs, token);
      throw new DelayedError();
    }
    if (failures.length > 0) throw new UnrecoverableError(failures.length === 1 ? failures[0]! : `${failures.length} partitions of the unit failed: ${failures.join('; ')}`);
    if (members.length === 1) return outcomes[0]!.outcome;
    return { status: 'unit', outcomes };
  };
}
