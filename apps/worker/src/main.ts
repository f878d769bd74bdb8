// The worker service's entry point (N replicas; scaled per release by KEDA in deploy/): one
// BullMQ worker per release it serves — GENFILL_RELEASE or --release, else every BUILDING
// release — with the throttle's controller candidate and admission. SIGTERM stops claiming;
// the builds in flight commit (or roll back at their statement_timeout), then it exits 0.
//   node --import tsx apps/worker/src/main.ts [--concurrency n] [--release ids] [--no-throttle] …
//   genfill worker …   (the same service)
import { hostname } from 'node:os';
import { startWorkerService } from '@genfill/builder';
import { ConfigError, type Config } from '@genfill/contracts';
import { workerMetrics } from '@genfill/observability';
import { topUpWindow } from '@genfill/planner';
import { type BuildQueue, createRedis, releaseQueue, warnIfEvicting } from '@genfill/queue';
import { defineService, flag, runIfMain, untilStopped } from '@genfill/service';
import { createThrottle, DEFAULT_INTERVAL_MS, throttleMetrics } from '@genfill/throttle';

/** GENFILL_PROMETHEUS_URL and GENFILL_FOREGROUND_QUERY go together: one alone is a mistake, said before anything starts. */
function prometheusSli(cfg: Config): { url: string; query: string } | undefined {
  const url = cfg.GENFILL_PROMETHEUS_URL;
  const query = cfg.GENFILL_FOREGROUND_QUERY;
  if (url && query) return { url, query };
  if (url || query) {
    const missing = url ? 'GENFILL_FOREGROUND_QUERY' : 'GENFILL_PROMETHEUS_URL';
    throw new ConfigError([{ path: missing, message: `is required with ${url ? 'GENFILL_PROMETHEUS_URL' : 'GENFILL_FOREGROUND_QUERY'} (environment variable)` }]);
  }
  return undefined;
}

/** How often a worker looks at its releases' dispatch windows (one cheap count each). */
const TOP_UP_MS = 1000;

export const worker = defineService({
  name: 'worker',
  summary: 'build partitions of every BUILDING release (or GENFILL_RELEASE) until SIGTERM; run N of them',
  flags: {
    concurrency: flag.count('partitions built at once by this process', 1),
    lockDuration: flag.duration('BullMQ lock and registry lease length', 60_000, 'ms'),
    release: flag.list('serve only these releases (comma-separated); overrides GENFILL_RELEASE', 'ids'),
    throttleInterval: flag.duration('time between throttle decisions; the controller lease is three of them', DEFAULT_INTERVAL_MS, 'ms'),
    throttle: flag.enabled('run no throttle controller and meter no admission in this process'),
  },
  // Claims, builds, lease renewals, the throttle and /readyz share it; the fleet's timeouts
  // keep a stalled worker from holding the release row lock for long.
  pool: (args) => ({ max: args.concurrency + 4, fleet: true }),
  check(args, config) {
    if (args.throttle) prometheusSli(config);
  },
  async run({ args, config, log, db, metrics, signal }) {
    const connection = createRedis(config.REDIS_URL);
    try {
      // An evicting Redis loses jobs silently; the registry recovers them, but say so now.
      void warnIfEvicting(connection, log).catch(() => undefined);
      const throttle = args.throttle
        ? createThrottle({
            db,
            redis: connection,
            prefix: config.GENFILL_QUEUE_PREFIX,
            log,
            worker: `${hostname()}:${process.pid}`,
            databaseUrl: config.DATABASE_URL,
            replicaUrls: config.GENFILL_REPLICA_URLS,
            canarySql: config.GENFILL_CANARY_SQL,
            canaryEveryMs: config.GENFILL_CANARY_EVERY_MS,
            prometheus: prometheusSli(config),
            intervalMs: args.throttleInterval,
            metrics: throttleMetrics(metrics),
          })
        : undefined;
      const service = await startWorkerService({
        db,
        connection,
        prefix: config.GENFILL_QUEUE_PREFIX,
        log,
        releases: args.release ?? config.GENFILL_RELEASE,
        concurrency: args.concurrency,
        lockDurationMs: args.lockDuration,
        metrics: workerMetrics(metrics),
        throttle,
      });
      log.info({ worker: service.id, serving: service.serving() }, 'worker started');
      // Redis holds a window of jobs per release (GENFILL_DISPATCH_WINDOW), not one per
      // partition: as partitions finish, the workers top it up from the registry (so does the
      // planner service), one dispatcher at a time per release.
      const window = config.GENFILL_DISPATCH_WINDOW;
      const queues = new Map<string, BuildQueue>();
      let topping = false;
      const topUp = setInterval(() => {
        if (topping) return;
        topping = true;
        void (async () => {
          for (const release of service.serving()) {
            let q = queues.get(release);
            if (!q) queues.set(release, (q = releaseQueue(release, { connection, prefix: config.GENFILL_QUEUE_PREFIX })));
            const added = await topUpWindow(db, q, release, window).catch((err: unknown) => {
              log.warn({ err, release }, 'topping up the dispatch window failed; the next tick tries again');
              return null;
            });
            if (added) log.info({ release, added, window }, 'dispatch window topped up');
          }
        })().finally(() => (topping = false));
      }, TOP_UP_MS);
      await untilStopped(signal);
      clearInterval(topUp);
      await Promise.all([...queues.values()].map((q) => q.close().catch(() => undefined)));
      // close() waits for the builds in flight: each commits with its receipt or rolls back.
      await service.close();
      log.info('worker stopped');
    } finally {
      await connection.quit().catch(() => connection.disconnect());
    }
  },
});

export const start = (argv?: string[]) => worker.main(argv);

await runIfMain(import.meta.url, worker);
