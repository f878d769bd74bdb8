// One prom-client registry per process. Names are genfill_<noun>_<unit>; labels are bounded
// (never a key or a partition id on a long-lived metric). A `release` label is allowed: it
// is bounded by the releases open at once, and every per-release question ("how fast is
// order-tax-fix@3 going?") needs it.
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { collectDefaultMetrics, Counter, Histogram, Registry } from 'prom-client';

export type { Registry };

/**
 * prom-client's default metrics include three gauges named `…_total`
 * (nodejs_active_{handles,requests,resources}_total), which `promtool check metrics` rejects:
 * `_total` is reserved for counters. Their per-type breakdowns (nodejs_active_handles{type})
 * stay, so nothing is lost by dropping the sums.
 */
const LINT_FAILING_DEFAULTS = ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'];

export function createMetricsRegistry(service: string): Registry {
  const registry = new Registry();
  registry.setDefaultLabels({ service });
  collectDefaultMetrics({ register: registry, prefix: 'genfill_' });
  for (const name of LINT_FAILING_DEFAULTS) registry.removeSingleMetric(`genfill_${name}`);
  return registry;
}

/** How a claim ended: a new attempt, a receipt already there, or a refusal (with its reason). */
export type ClaimOutcome = 'claimed' | 'already_built' | 'refused';
/** How a claimed attempt ended. `error` is a retryable failure BullMQ retries with backoff. */
export type AttemptOutcome = 'built' | 'fenced' | 'failed' | 'error' | 'dropped';

export interface WorkerMetrics {
  claim(release: string, outcome: ClaimOutcome, reason?: string): void;
  attempt(release: string, outcome: AttemptOutcome): void;
  /** A partition committed with its receipt: `seconds` from the claim to the commit. */
  built(release: string, rows: number, seconds: number): void;
  /** A partition marked FAILED, by its final reason (JOIN_FANOUT, RETRIES_EXHAUSTED, …). */
  failed(release: string, reason: string): void;
}

/** Partition builds take from milliseconds (an empty day) to minutes (a month of orders). */
const BUILD_BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];

export function workerMetrics(registry: Registry): WorkerMetrics {
  const registers = [registry];
  const claims = new Counter({
    name: 'genfill_claims_total',
    help: 'Partition claims by outcome (claimed, already_built, refused) and refusal reason (none unless refused)',
    labelNames: ['release', 'outcome', 'reason'] as const,
    registers,
  });
  const attempts = new Counter({
    name: 'genfill_build_attempts_total',
    help: 'Claimed build attempts by outcome: built, fenced (a newer attempt owns it), failed (final), error (retried), dropped (release left BUILDING)',
    labelNames: ['release', 'outcome'] as const,
    registers,
  });
  const partitions = new Counter({
    name: 'genfill_partitions_built_total',
    help: 'Partitions this worker committed with their receipt',
    labelNames: ['release'] as const,
    registers,
  });
  const rows = new Counter({
    name: 'genfill_rows_written_total',
    help: 'Rows written into candidate generations by committed builds',
    labelNames: ['release'] as const,
    registers,
  });
  const seconds = new Histogram({
    name: 'genfill_partition_build_seconds',
    help: 'Seconds from claim to commit of a built partition',
    labelNames: ['release'] as const,
    buckets: BUILD_BUCKETS,
    registers,
  });
  const failures = new Counter({
    name: 'genfill_partition_failures_total',
    help: 'Partitions marked FAILED by this worker, by reason',
    labelNames: ['release', 'reason'] as const,
    registers,
  });
  return {
    claim: (release, outcome, reason) => claims.inc({ release, outcome, reason: reason ?? 'none' }),
    attempt: (release, outcome) => attempts.inc({ release, outcome }),
    built: (release, n, s) => {
      partitions.inc({ release });
      rows.inc({ release }, n);
      seconds.observe({ release }, s);
    },
    failed: (release, reason) => failures.inc({ release, reason }),
  };
}

export interface PlannerMetrics {
  /** One planning round: its duration and whether Redis answered. */
  round(seconds: number, redis: boolean): void;
  enqueued(release: string, added: number, requeued: number): void;
  /** A release whose round failed (logged; the next round tries again). */
  releaseError(release: string): void;
}

export function plannerMetrics(registry: Registry): PlannerMetrics {
  const registers = [registry];
  const rounds = new Counter({
    name: 'genfill_planner_rounds_total',
    help: 'Planning rounds, by whether Redis answered (false: registry steps only, nothing enqueued)',
    labelNames: ['redis'] as const,
    registers,
  });
  const roundSeconds = new Histogram({
    name: 'genfill_planner_round_seconds',
    help: 'Seconds one planning round took over every release it serves',
    buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers,
  });
  const jobs = new Counter({
    name: 'genfill_jobs_enqueued_total',
    help: 'Build jobs the planner added because Redis did not hold their id',
    labelNames: ['release'] as const,
    registers,
  });
  const requeued = new Counter({
    name: 'genfill_partitions_requeued_total',
    help: 'Partitions moved to a new enqueue epoch (their job was given up on)',
    labelNames: ['release'] as const,
    registers,
  });
  const errors = new Counter({
    name: 'genfill_planner_release_errors_total',
    help: 'Releases whose planning round failed (the next round tries again)',
    labelNames: ['release'] as const,
    registers,
  });
  return {
    round: (s, redis) => {
      rounds.inc({ redis: String(redis) });
      roundSeconds.observe(s);
    },
    enqueued: (release, added, n) => {
      jobs.inc({ release }, added);
      requeued.inc({ release }, n);
    },
    releaseError: (release) => errors.inc({ release }),
  };
}

export interface MetricsServer {
  port: number;
  close(): Promise<void>;
}

/** One readiness check: did it pass, how long it took, and why not. */
export interface Check {
  ok: boolean;
  ms: number;
  error?: string;
}

/** What GET /readyz answers: 200 when `ok`, 503 otherwise, with every check by name. */
export interface Readiness {
  ok: boolean;
  /** Why the process is not ready as a whole (e.g. `draining`), beside the failed checks. */
  reason?: string;
  checks: Record<string, Check>;
}

export interface MetricsServerOptions {
  port: number;
  host?: string;
  /**
   * Health routes on the same port. `GET /healthz` answers 200 while the process can answer at
   * all (liveness: a restart would not help otherwise); `GET /readyz` answers what `ready()`
   * says (readiness: the database, Redis, the schema, not draining).
   */
  health?: { ready(): Promise<Readiness> };
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' }).end(`${JSON.stringify(body)}\n`);
}

/**
 * `GET /metrics` of this process on its own port (GENFILL_METRICS_PORT), so a worker or the
 * planner, which have no HTTP server otherwise, can be scraped; with `health`, also the
 * probes' `/healthz` and `/readyz`. Port 0 picks a free port.
 */
export async function serveMetrics(registry: Registry, opts: MetricsServerOptions): Promise<MetricsServer> {
  const routes = opts.health ? 'GET /metrics, /healthz and /readyz' : 'GET /metrics';
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && opts.health && path === '/healthz') {
      sendJson(res, 200, { status: 'ok' });
      return;
    }
    if (req.method === 'GET' && opts.health && path === '/readyz') {
      opts.health.ready().then(
        (r) => sendJson(res, r.ok ? 200 : 503, { status: r.ok ? 'ready' : 'unavailable', ...(r.reason ? { reason: r.reason } : {}), failed: Object.keys(r.checks).filter((k) => !r.checks[k]!.ok), checks: r.checks }),
        (err: Error) => sendJson(res, 503, { status: 'unavailable', reason: `readiness check failed: ${err.message}`, failed: [], checks: {} }),
      );
      return;
    }
    if (req.method !== 'GET' || path !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end(`only ${routes} here\n`);
      return;
    }
    registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
      (err: Error) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`metrics collection failed: ${err.message}\n`),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => resolve());
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        // A scraper's keep-alive socket would hold close() open until it times out.
        server.closeAllConnections();
      }),
  };
}
