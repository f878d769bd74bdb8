// The BullMQ processor of a build job. BullMQ only dispatches: the claim decides, the
// registry records. A refused claim delays its job without spending an attempt; a final
// failure fails the partition with its reason; a fenced build did nothing and says so.
import { DelayedError, UnrecoverableError, type Job } from 'bullmq';
import { PartitionFailedError, RefusedError, StaleLeaseError } from '@genfill/contracts';
import type { Logger, WorkerMetrics } from '@genfill/observability';
import { buildJobSchema } from '@genfill/queue';
import type { Db } from '@genfill/registry';
import { buildPartition, buildUnit, UnitFallbackError, type BuildResult } from './build.ts';
import { claimPartition, claimPartitions, failPartition, releaseLease, whileLeased, whileLeasedAll, type ClaimedPartition, type ClaimResult } from './claim.ts';

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

/** A partition this job claimed: its attempt, what the claim read, and the claim's time (ms). */
interface Claimed {
  partition: string;
  attempt: number;
  claimed: ClaimedPartition;
  claimMs: number;
}

/** A member that could not start now: the job comes back after `retryInMs`. */
type Later = { status: 'later'; retryInMs: number; reason: string };
/** A member that failed for good (recorded on the partition). */
type Failed = { status: 'failed'; message: string };

export function createProcessor(o: ProcessorOptions) {
  /** What a claim that did not claim means for the job: done, dropped, or come back later. */
  function refusal(release: string, partition: string, claim: Exclude<ClaimResult, { kind: 'claimed' }>, log: Logger): PartitionOutcome | Later {
    o.metrics?.claim(release, claim.kind === 'built' ? 'already_built' : claim.kind, claim.kind === 'refused' ? claim.reason : undefined);
    if (claim.kind === 'built') return { status: 'already-built' };
    if (claim.retryInMs === null) {
      log.info({ reason: claim.reason, partition }, 'claim refused for good; dropping the partition');
      return { status: 'dropped', reason: claim.reason };
    }
    log.debug({ reason: claim.reason, retryInMs: claim.retryInMs, partition }, 'claim refused; the job comes back later');
    return { status: 'later', retryInMs: claim.retryInMs, reason: claim.reason };
  }

  function recordBuilt(release: string, partition: string, res: BuildResult, started: number, log: Logger): PartitionOutcome {
    log.child({ partition }).info({ rows: res.rowsOut, timings: res.timings, releaseBuilt: res.releaseBuilt }, 'partition built');
    o.metrics?.attempt(release, 'built');
    o.metrics?.built(release, res.rowsOut, (performance.now() - started) / 1000);
    return { status: 'built', receipt: res.receiptId, rows: res.rowsOut, releaseBuilt: res.releaseBuilt };
  }

  /**
   * Build one claimed partition in its own transaction and turn its failure into an outcome.
   * Throws what BullMQ should retry. `leased`: the caller renews the lease (a unit's members).
   */
  async function buildClaimed(job: Job, release: string, c: Claimed, started: number, log: Logger, leased = false): Promise<PartitionOutcome | Failed> {
    const { partition, attempt } = c;
    const plog = log.child({ partition, attempt });
    const build = () => buildPartition(o.db, { release, partition, attempt, claimMs: c.claimMs, claimed: c.claimed });
    try {
      const res = leased ? await build() : await whileLeased(o.db, { release, partition, attempt, leaseMs: o.leaseMs }, build);
      return recordBuilt(release, partition, res, started, log);
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
      // A refusal that trying again can help (a lock not granted in time) is retried as any error is.
      if (err instanceof RefusedError && !err.retryable) {
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

  /** One partition: admission, claim, build. */
  async function processOne(job: Job, release: string, partition: string, log: Logger): Promise<{ partition: string; out: PartitionOutcome | Later | Failed }[]> {
    await o.admission?.(release, partition);
    const started = performance.now();
    const claim = await claimPartition(o.db, { release, partition, worker: o.worker, leaseMs: o.leaseMs });
    const claimMs = Math.round((performance.now() - started) * 10) / 10;
    if (claim.kind !== 'claimed') return [{ partition, out: refusal(release, partition, claim, log) }];
    o.metrics?.claim(release, 'claimed');
    return [{ partition, out: await buildClaimed(job, release, { partition, attempt: claim.attempt, claimed: claim.partition, claimMs }, started, log) }];
  }

  /**
   * A unit: every member admitted, all claimed by one statement, the claimed ones built in one
   * transaction (buildUnit) under one lease renewal; if that transaction fails, each claimed
   * member is built in its own (where a failure is that member's alone). Members in repair are
   * built alone (their catch-up lock must not be held across the unit).
   */
  async function processUnit(job: Job, release: string, members: string[], log: Logger): Promise<{ partition: string; out: PartitionOutcome | Later | Failed }[]> {
    for (const m of members) await o.admission?.(release, m);
    const started = performance.now();
    const claims = await claimPartitions(o.db, { release, partitions: members, worker: o.worker, leaseMs: o.leaseMs });
    const claimMs = Math.round((performance.now() - started) * 10) / 10;
    const outcomes = new Map<string, PartitionOutcome | Later | Failed>();
    const claimed: Claimed[] = [];
    for (const m of members) {
      const c = claims.get(m)!;
      if (c.kind !== 'claimed') outcomes.set(m, refusal(release, m, c, log));
      else {
        o.metrics?.claim(release, 'claimed');
        claimed.push({ partition: m, attempt: c.attempt, claimed: c.partition, claimMs: claimed.length === 0 ? claimMs : 0 });
      }
    }
    const held = claimed.map((c) => ({ partition: c.partition, attempt: c.attempt }));
    await whileLeasedAll(o.db, { release, held, leaseMs: o.leaseMs }, async () => {
      const together = claimed.filter((c) => !c.claimed.repairPending);
      if (together.length > 1) {
        try {
          const res = await buildUnit(
            o.db,
            together.map((c) => ({ release, partition: c.partition, attempt: c.attempt, claimMs: c.claimMs, claimed: c.claimed })),
          );
          together.forEach((c, i) => outcomes.set(c.partition, recordBuilt(release, c.partition, res[i]!, started, log)));
        } catch (err) {
          if (!(err instanceof UnitFallbackError)) throw err;
          log.info({ err: (err.cause as Error)?.message }, "the unit's transaction failed; building its partitions one by one");
        }
      }
      for (let i = 0; i < claimed.length; i++) {
        const c = claimed[i]!;
        if (outcomes.has(c.partition)) continue;
        try {
          outcomes.set(c.partition, await buildClaimed(job, release, c, started, log, true));
        } catch (err) {
          // BullMQ retries the job: give the members not yet built their leases back now.
          for (const rest of claimed.slice(i + 1)) if (!outcomes.has(rest.partition)) await releaseLease(o.db, { release, partition: rest.partition, attempt: rest.attempt }).catch(() => undefined);
          throw err;
        }
      }
    });
    return members.map((m) => ({ partition: m, out: outcomes.get(m)! }));
  }

  return async (job: Job, token?: string): Promise<JobOutcome> => {
    const parsed = buildJobSchema.safeParse(job.data);
    if (!parsed.success) throw new UnrecoverableError(`malformed build job ${job.id}: ${parsed.error.message}`);
    const { release } = parsed.data;
    const members = parsed.data.partitions ?? [parsed.data.partition];
    const log = o.log.child({ release, jobId: job.id, ...(members.length === 1 ? { partition: members[0] } : { partitions: members.length }) });

    // One partition, or a unit's (each with its own statement and receipt). A retry of the job
    // (BullMQ's) finds the members built before it already built and skips them.
    const outcomes: { partition: string; outcome: PartitionOutcome }[] = [];
    const failures: string[] = [];
    let later = null as Later | null;
    const results = members.length === 1 ? await processOne(job, release, members[0]!, log) : await processUnit(job, release, members, log);
    for (const { partition, out } of results) {
      if (out.status === 'later') {
        // Paused: nothing of the release starts now. Leased: another worker holds this one;
        // the rest went on, and the job comes back for it.
        later = { ...out, retryInMs: Math.max(out.retryInMs, later?.retryInMs ?? 0) };
        continue;
      }
      if (out.status === 'failed') {
        failures.push(out.message);
        continue;
      }
      outcomes.push({ partition, outcome: out });
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
