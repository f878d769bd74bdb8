// `genfill worker`: one BullMQ worker per release this process serves (GENFILL_RELEASE, or
// every release that is BUILDING, rediscovered on an interval). SIGTERM stops claiming,
// lets in-flight builds finish (or roll back at their statement_timeout) and exits.
import { hostname } from 'node:os';
import { Worker, type ConnectionOptions } from 'bullmq';
import type { Logger, WorkerMetrics } from '@genfill/observability';
import { queueName } from '@genfill/queue';
import type { Db } from '@genfill/registry';
import { createProcessor } from './processor.ts';

export interface WorkerServiceOptions {
  db: Db;
  connection: ConnectionOptions;
  prefix: string;
  log: Logger;
  /** Serve only these releases; default every release that is BUILDING. */
  releases?: string[];
  concurrency?: number;
  /** BullMQ lock duration; the registry lease is as long. */
  lockDurationMs?: number;
  discoverEveryMs?: number;
  id?: string;
  /** Counters of this process's registry (workerMetrics); none when omitted. */
  metrics?: WorkerMetrics;
  /** The throttle (@genfill/throttle createThrottle): a controller per served release, admission before each claim. */
  throttle?: {
    serve(release: string): void;
    admit(release: string, partition: string): Promise<void>;
    /** This worker's part of the release's global concurrency; the worker runs at most that many. */
    slots(release: string): Promise<number | null>;
    close(): Promise<void>;
  };
}

export interface WorkerService {
  id: string;
  serving(): string[];
  close(): Promise<void>;
}

export async function startWorkerService(o: WorkerServiceOptions): Promise<WorkerService> {
  const id = o.id ?? `${hostname()}:${process.pid}`;
  const lockDuration = o.lockDurationMs ?? 60_000;
  const processor = createProcessor({ db: o.db, worker: id, leaseMs: lockDuration, log: o.log, metrics: o.metrics, admission: o.throttle && ((r, p) => o.throttle!.admit(r, p)) });
  const workers = new Map<string, Worker>();
  let closing = false;

  const serve = (release: string) => {
    if (workers.has(release) || closing) return;
    const w = new Worker(queueName(release), processor, {
      connection: o.connection,
      prefix: o.prefix,
      concurrency: configured,
      lockDuration,
      // Check for stalled jobs as often as a lock can expire, so a killed worker's partition
      // goes back to the queue within about one lock duration.
      stalledInterval: Math.min(30_000, lockDuration),
      // A stalled job (its worker died) goes back to wait and is claimed again: the claim
      // and the attempt fence make the second delivery safe.
      maxStalledCount: 1_000,
    });
    w.on('error', (err) => o.log.error({ release, err: err.message }, 'worker error'));
    workers.set(release, w);
    o.throttle?.serve(release);
    o.log.info({ release }, 'serving release');
  };

  const discover = async () => {
    const { rows } = await o.db.query<{ id: string }>(`SELECT id FROM genfill.releases WHERE state = 'BUILDING' ORDER BY id`);
    for (const r of rows) serve(r.id);
  };

  // The throttle spreads the queue's global concurrency over the workers: each runs at most
  // its part (and never more than --concurrency), re-read every second.
  const configured = o.concurrency ?? 1;
  const spread = o.throttle
    ? setInterval(() => {
        for (const [release, w] of workers) {
          void o.throttle!.slots(release).then(
            (n) => {
              const want = Math.min(configured, n ?? configured);
              if (!closing && w.concurrency !== want) w.concurrency = want;
            },
            () => undefined,
          );
        }
      }, 1_000)
    : undefined;

  let timer: NodeJS.Timeout | undefined;
  if (o.releases && o.releases.length > 0) {
    for (const r of o.releases) serve(r);
  } else {
    await discover();
    timer = setInterval(() => discover().catch((err) => o.log.warn({ err: (err as Error).message }, 'release discovery failed')), o.discoverEveryMs ?? 5_000);
  }

  return {
    id,
    serving: () => [...workers.keys()],
    close: async () => {
      closing = true;
      if (timer) clearInterval(timer);
      if (spread) clearInterval(spread);
      // close() waits for active jobs: a build in flight commits or rolls back first.
      await Promise.all([...workers.values()].map((w) => w.close()));
      await o.throttle?.close();
    },
  };
}
