// The API's metrics: its HTTP traffic, and the queue-level gauges of every release queue,
// collected from Redis and the registry when Prometheus scrapes. They live here and not in
// the workers so that N worker replicas do not report the same queue N times.
import type { RequestHandler } from 'express';
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { OPEN_STATES } from '@genfill/contracts';
import type { Logger } from '@genfill/observability';
import { redisAnswers, withDeadline, type Redis } from '@genfill/queue';
import type { Db } from '@genfill/registry';
import { BOARD_PATH } from './board.ts';
import type { ReleaseQueues } from './queues.ts';

/** The job states of the SPEC's queue gauges; BullMQ 6 keeps a paused queue's jobs as waiting. */
const JOB_STATES = ['waiting', 'active', 'delayed', 'failed', 'completed'] as const;

interface Snapshot {
  queues: { release: string; counts: Record<string, number>; paused: boolean }[];
  partitions: { release: string; status: string; n: number }[];
  flags: { release: string; operator: boolean; throttle: boolean; deadline: number; open: boolean }[];
}

/**
 * Register the queue and release gauges on the API's registry. One snapshot per scrape feeds
 * every gauge (prom-client collects them concurrently); Redis or the database failing leaves
 * the affected gauges empty for that scrape and counts the failure, instead of failing
 * /metrics as a whole.
 */
export function registerQueueGauges(registry: Registry, deps: { db: Db; redis: Redis; queues: ReleaseQueues; log: Logger }): void {
  const registers = [registry];
  const failures = new Counter({
    name: 'genfill_metrics_collect_failures_total',
    help: 'Scrapes whose queue or registry gauges could not be collected, by source',
    labelNames: ['source'] as const,
    registers,
    // Waits for this scrape's snapshot, so a failure shows in the scrape that met it.
    async collect() {
      await snapshot();
    },
  });
  let current: { at: number; snapshot: Promise<Snapshot> } | undefined;
  const snapshot = (): Promise<Snapshot> => {
    if (!current || Date.now() - current.at > 1_000) current = { at: Date.now(), snapshot: collect() };
    return current.snapshot;
  };

  const collect = async (): Promise<Snapshot> => {
    const out: Snapshot = { queues: [], partitions: [], flags: [] };
    let shown;
    try {
      shown = await deps.queues.refresh();
      const ids = shown.map((s) => s.release);
      const [parts, flags] = await Promise.all([
        deps.db.query<{ release: string; status: string; n: number }>(
          'SELECT release, status, count(*)::int AS n FROM genfill.partitions WHERE release = ANY($1::text[]) GROUP BY 1, 2 ORDER BY 1, 2',
          [ids],
        ),
        deps.db.query<{ release: string; operator: boolean; throttle: boolean; deadline: number; open: boolean }>(
          `SELECT id AS release, operator_paused AS operator, throttle_paused AS throttle,
                  extract(epoch FROM deadline)::float8 AS deadline, state = ANY($2::text[]) AS open
             FROM genfill.releases WHERE id = ANY($1::text[])`,
          [ids, OPEN_STATES],
        ),
      ]);
      out.partitions = parts.rows;
      out.flags = flags.rows;
    } catch (err) {
      failures.inc({ source: 'registry' });
      deps.log.warn({ err: (err as Error).message }, 'metrics: reading the registry failed');
      return out;
    }
    try {
      // BullMQ waits for a connection without a limit; a PING says quickly whether to try.
      if (!(await redisAnswers(deps.redis, 1_000))) throw new Error('Redis is not answering');
      out.queues = await withDeadline(
        Promise.all(
          shown.map(async (s) => ({ release: s.release, counts: await s.queue.getJobCounts(...JOB_STATES), paused: await s.queue.isPaused() })),
        ),
        5_000,
        'queue counts',
      );
    } catch (err) {
      failures.inc({ source: 'redis' });
      deps.log.warn({ err: (err as Error).message }, 'metrics: reading the queues from Redis failed');
    }
    return out;
  };

  new Gauge({
    name: 'genfill_queue_jobs',
    help: 'Jobs in each release queue by BullMQ state (a paused queue keeps its jobs as waiting)',
    labelNames: ['release', 'state'] as const,
    registers,
    async collect() {
      const s = await snapshot();
      this.reset();
      for (const q of s.queues) for (const state of JOB_STATES) this.set({ release: q.release, state }, q.counts[state] ?? 0);
    },
  });
  new Gauge({
    name: 'genfill_queue_paused',
    help: 'Whether the BullMQ queue of a release is paused (1) — it mirrors the operator flag',
    labelNames: ['release'] as const,
    registers,
    async collect() {
      const s = await snapshot();
      this.reset();
      for (const q of s.queues) this.set({ release: q.release }, q.paused ? 1 : 0);
    },
  });
  new Gauge({
    name: 'genfill_release_partitions',
    help: 'Partitions of each release by registry status (PENDING, RUNNING, BUILT, FAILED)',
    labelNames: ['release', 'status'] as const,
    registers,
    async collect() {
      const s = await snapshot();
      this.reset();
      for (const p of s.partitions) this.set({ release: p.release, status: p.status }, p.n);
    },
  });
  new Gauge({
    name: 'genfill_release_paused',
    help: 'The pause flags of each release in the registry (flag operator or throttle; 1 = paused)',
    labelNames: ['release', 'flag'] as const,
    registers,
    async collect() {
      const s = await snapshot();
      this.reset();
      for (const f of s.flags) {
        this.set({ release: f.release, flag: 'operator' }, f.operator ? 1 : 0);
        this.set({ release: f.release, flag: 'throttle' }, f.throttle ? 1 : 0);
      }
    },
  });
  new Gauge({
    name: 'genfill_release_deadline_timestamp_seconds',
    help: 'The deadline of each open release (not yet ACTIVE, cancelled or rolled back), as a Unix time; alert when time() passes it',
    labelNames: ['release'] as const,
    registers,
    async collect() {
      const s = await snapshot();
      this.reset();
      for (const f of s.flags) if (f.open) this.set({ release: f.release }, f.deadline);
    },
  });
}

/** Requests by route pattern (never the raw path: release ids and job ids stay out of labels). */
export function httpMetrics(registry: Registry): RequestHandler {
  const requests = new Counter({
    name: 'genfill_http_requests_total',
    help: 'HTTP requests to the API by method, route pattern and status',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [registry],
  });
  const seconds = new Histogram({
    name: 'genfill_http_request_duration_seconds',
    help: 'Seconds to answer an HTTP request, by method and route pattern',
    labelNames: ['method', 'route'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  });
  return (req, res, next) => {
    const started = performance.now();
    res.on('finish', () => {
      const route = req.originalUrl.startsWith(BOARD_PATH)
        ? BOARD_PATH
        : req.route
          ? `${req.baseUrl}${String(req.route.path)}`
          : 'unmatched';
      const method = req.method;
      requests.inc({ method, route, status: String(res.statusCode) });
      seconds.observe({ method, route }, (performance.now() - started) / 1000);
    });
    next();
  };
}
