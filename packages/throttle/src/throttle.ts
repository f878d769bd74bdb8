// The throttle as a worker process sees it: a controller candidate and an admission meter
// for every release the process serves. The worker service calls serve() when it starts a
// release and admit() right before each claim.
import { randomBytes } from 'node:crypto';
import type { Logger } from '@genfill/observability';
import type { Redis } from '@genfill/queue';
import type { Db } from '@genfill/registry';
import { Admission } from './admission.ts';
import { ReleaseController } from './controller.ts';
import type { ThrottleMetrics } from './metrics.ts';
import { CanarySignal, ErrorRateSignal, PrometheusSignal, ReplicaLagSignal, type Signal } from './signals.ts';

export interface ThrottleOptions {
  db: Db;
  /** A non-blocking connection for the lease and the queue's global concurrency. */
  redis: Redis;
  prefix: string;
  log: Logger;
  /** This worker's id; each candidate adds a random suffix. */
  worker: string;
  /** Where the canary connects (the primary: DATABASE_URL). */
  databaseUrl: string;
  replicaUrls?: string[];
  canarySql?: string;
  /** How often the canary runs; default a quarter interval. Its window holds 5 intervals of samples. */
  canaryEveryMs?: number;
  /** The user's own foreground SLI: a Prometheus base URL and an instant query in milliseconds. */
  prometheus?: { url: string; query: string };
  intervalMs?: number;
  leaseMs?: number;
  metrics?: ThrottleMetrics;
}

export interface Throttle {
  serve(release: string): void;
  admit(release: string, partition: string): Promise<void>;
  /** This worker's part of the release's concurrency (null: no decision yet, run as configured). */
  slots(release: string): Promise<number | null>;
  /** The controllers of this process, for tests and `/metrics`. */
  controllers(): ReadonlyMap<string, ReleaseController>;
  close(): Promise<void>;
}

export const DEFAULT_INTERVAL_MS = 1_000;

export function createThrottle(o: ThrottleOptions): Throttle {
  const intervalMs = o.intervalMs ?? DEFAULT_INTERVAL_MS;
  // Three missed renewals before a successor may take over: long enough to ride out a slow
  // tick, short enough that a dead controller is replaced within seconds.
  const leaseMs = o.leaseMs ?? intervalMs * 3;
  const controllers = new Map<string, ReleaseController>();
  const admission = new Admission(o.db);
  // Five intervals: the canary's window (20 samples at the default quarter-interval cadence),
  // the time one AIMD step is given to show its effect, and what the fleet built is measured over.
  const windowMs = Math.max(1_000, intervalMs * 5);
  const signals = (release: string) => (): Signal[] => [
    new ReplicaLagSignal(o.db, o.replicaUrls ?? []),
    ...(o.canarySql
      ? [new CanarySignal(o.databaseUrl, o.canarySql, { everyMs: o.canaryEveryMs ?? Math.max(50, Math.round(intervalMs / 4)), windowMs, timeoutMs: 5_000 })]
      : []),
    ...(o.prometheus ? [new PrometheusSignal(o.prometheus.url, o.prometheus.query)] : []),
    new ErrorRateSignal(o.db, release),
  ];
  return {
    serve(release) {
      if (controllers.has(release)) return;
      const c = new ReleaseController({
        db: o.db,
        redis: o.redis,
        prefix: o.prefix,
        release,
        holder: `${o.worker}#${randomBytes(4).toString('hex')}`,
        log: o.log,
        intervalMs,
        leaseMs,
        windowMs,
        signals: signals(release),
        metrics: o.metrics,
      });
      controllers.set(release, c);
      c.start();
    },
    admit: (release, partition) => admission.admit(release, partition),
    slots: (release) => admission.slots(release),
    controllers: () => controllers,
    async close() {
      await Promise.all([...controllers.values()].map((c) => c.close()));
      controllers.clear();
      await admission.close();
    },
  };
}
