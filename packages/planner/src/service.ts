// The planner service: every interval, for every release in SNAPSHOT_PINNED or BUILDING (or
// only those in GENFILL_RELEASE), do what `genfill plan` does after the manifest — move it to
// BUILDING, enqueue its unfinished partitions, re-apply the operator's queue pause. It is the
// reason a Redis that lost every key, or a job BullMQ gave up on, heals without an operator.
// It also executes the people's `plan` and `repair` requests (contracts' REQUEST_KINDS; `repair`
// comes from @genfill/builder, which the entry point wires: the builder's tests plan with this
// package): between rounds it looks for one every second, and runs it with the requester as the
// principal.
import type { Config, ReleaseState } from '@genfill/contracts';
import { createMetricsRegistry, plannerMetrics, type Logger, type PlannerMetrics, type Registry } from '@genfill/observability';
import { createServiceRedis, redisAnswers, warnIfEvicting, withDeadline, type Dispatcher, type Redis } from '@genfill/queue';
import { assertSchemaCurrent, createPool, serveRequests, waitServingRequests, type Db, type ServiceHandlers } from '@genfill/registry';
import { dispatchRelease, planAndDispatch, startBuilding } from './dispatch.ts';

export interface ReleaseRound {
  release: string;
  state: ReleaseState | null;
  /** This round moved it SNAPSHOT_PINNED → BUILDING. */
  started: boolean;
  unfinished: number | null;
  added: number | null;
  requeued: number | null;
  queuePaused: boolean | null;
  error: string | null;
}

export interface RoundResult {
  at: string;
  redis: boolean;
  releases: ReleaseRound[];
}

async function releasesToPlan(db: Db, only: string[] | undefined): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>(
    `SELECT id FROM genfill.releases
      WHERE state IN ('SNAPSHOT_PINNED', 'BUILDING') AND ($1::text[] IS NULL OR id = ANY($1::text[]))
      ORDER BY submitted_at, id`,
    [only ?? null],
  );
  return rows.map((r) => r.id);
}

/**
 * One round. A failure of one release is logged and the round goes on; a Redis that does
 * not answer leaves the registry steps done and the dispatch to the next round. FAILED
 * partitions are left to the operator's `genfill plan`: re-running a final failure every
 * round would hide it.
 */
export async function planningRound(
  db: Db,
  dispatcher: Dispatcher,
  opts: { log: Logger; only?: string[]; deadlineMs?: number; metrics?: PlannerMetrics },
): Promise<RoundResult> {
  const { log } = opts;
  const started = performance.now();
  const redis = await redisAnswers(dispatcher.redis);
  if (!redis) log.warn('Redis is not answering: this round only moves releases to BUILDING; their jobs are enqueued once it answers');
  const result: RoundResult = { at: new Date().toISOString(), redis, releases: [] };
  for (const id of await releasesToPlan(db, opts.only)) {
    const line: ReleaseRound = { release: id, state: null, started: false, unfinished: null, added: null, requeued: null, queuePaused: null, error: null };
    result.releases.push(line);
    const rlog = log.child({ release: id });
    try {
      const build = await startBuilding(db, id);
      line.state = build.state;
      line.started = build.started;
      if (build.started) rlog.info({ estimatedRows: build.estimatedRows }, 'release moved SNAPSHOT_PINNED → BUILDING');
      if (build.state !== 'BUILDING' || !redis) continue;
      const d = await withDeadline(
        dispatchRelease(db, dispatcher, id, { requeueFailed: false }),
        opts.deadlineMs ?? 60_000,
        `dispatch of ${id}`,
      );
      line.state = d.state;
      line.unfinished = d.enqueue.unfinished;
      line.added = d.enqueue.added;
      line.requeued = d.enqueue.requeued;
      line.queuePaused = d.queuePaused;
      const fields = { queue: d.queue, unfinished: d.enqueue.unfinished, added: d.enqueue.added, requeued: d.enqueue.requeued, queuePaused: d.queuePaused };
      opts.metrics?.enqueued(id, d.enqueue.added, d.enqueue.requeued);
      if (d.enqueue.added > 0 || d.enqueue.requeued > 0) rlog.info(fields, 'enqueued unfinished partitions');
      else rlog.debug(fields, 'nothing to enqueue');
    } catch (err) {
      line.error = (err as Error).message;
      opts.metrics?.releaseError(id);
      rlog.error({ err }, 'planning round failed for this release; the next round tries again');
    }
  }
  opts.metrics?.round((performance.now() - started) / 1000, redis);
  return result;
}

export interface PlannerServiceOptions {
  config: Config;
  log: Logger;
  intervalSeconds: number;
  /** One round, then return (tests, cron). */
  once?: boolean;
  /** Aborting stops the service after the current round. */
  signal?: AbortSignal;
  /** A registry pool to use (the CLI's); otherwise the service makes and closes its own. */
  db?: Db;
  /**
   * The process's metrics registry (made here when omitted). The service helper that runs this
   * (@genfill/service, apps/planner) serves it on GENFILL_METRICS_PORT with /healthz and /readyz.
   */
  registry?: Registry;
  /** The planner's requests besides `plan`, which it runs itself: `repair` from @genfill/builder. */
  requestHandlers: PlannerWiredHandlers;
}

/** The planner's kinds whose handlers its entry point wires in. */
export type PlannerWiredHandlers = Omit<ServiceHandlers<'planner'>, 'plan'>;

/** What the planner executes for a person: `genfill plan`, and `genfill repair` as wired. */
export function plannerRequestHandlers(dispatcher: Dispatcher, wired: PlannerWiredHandlers): ServiceHandlers<'planner'> {
  return {
    ...wired,
    plan: async (db, req) => ({ result: await planAndDispatch(db, req.release, () => Promise.resolve(dispatcher)) }),
  };
}

export interface PlannerServiceResult {
  rounds: number;
  last: RoundResult | null;
}

export async function runPlannerService(opts: PlannerServiceOptions): Promise<PlannerServiceResult> {
  const { config, log } = opts;
  const db = opts.db ?? createPool(config, 'genfill-planner', 3, { fleet: true });
  let redis: Redis | undefined;
  const out: PlannerServiceResult = { rounds: 0, last: null };
  try {
    await assertSchemaCurrent(db);
    const registry = opts.registry ?? createMetricsRegistry('planner');
    const metrics = plannerMetrics(registry);
    redis = createServiceRedis(config.REDIS_URL, log);
    if (await redisAnswers(redis)) await warnIfEvicting(redis, log);
    const dispatcher: Dispatcher = { redis, prefix: config.GENFILL_QUEUE_PREFIX, window: config.GENFILL_DISPATCH_WINDOW };
    const intervalMs = Math.max(1, opts.intervalSeconds * 1000);
    const deadlineMs = Math.max(60_000, 3 * intervalMs);
    log.info(
      { intervalSeconds: opts.intervalSeconds, prefix: config.GENFILL_QUEUE_PREFIX, releases: config.GENFILL_RELEASE ?? 'all open' },
      'planner started',
    );
    const handlers = plannerRequestHandlers(dispatcher, opts.requestHandlers);
    const worker = `planner:${process.pid}`;
    const serve = () => serveRequests(db, { handlers, worker, log, signal: opts.signal }).catch((err) => log.error({ err }, 'serving requests failed; trying again'));
    while (!opts.signal?.aborted) {
      await serve();
      out.last = await planningRound(db, dispatcher, { log, only: config.GENFILL_RELEASE, deadlineMs, metrics });
      out.rounds += 1;
      if (opts.once || opts.signal?.aborted) break;
      try {
        await waitServingRequests(serve, intervalMs, opts.signal);
      } catch {
        break; // aborted while waiting: no round is in progress
      }
    }
    log.info({ rounds: out.rounds }, 'planner stopped');
    return out;
  } finally {
    await redis?.quit().catch(() => redis?.disconnect());
    if (!opts.db) await db.end();
  }
}
