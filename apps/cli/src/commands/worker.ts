import { InvalidArgumentError, type Command } from 'commander';
import { hostname } from 'node:os';
import { startWorkerService } from '@genfill/builder';
import { createLogger, createMetricsRegistry, serveMetrics, workerMetrics } from '@genfill/observability';
import { createRedis, warnIfEvicting } from '@genfill/queue';
import { createThrottle, DEFAULT_INTERVAL_MS, throttleMetrics } from '@genfill/throttle';
import { ConfigError, type Config } from '@genfill/contracts';
import type { Context } from '../context.ts';

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

const positive = (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n <= 0) throw new InvalidArgumentError(`expected a positive integer, got ${v}`);
  return n;
};

export function register(program: Command, run: (fn: (ctx: Context) => Promise<void>) => Promise<void>): void {
  program
    .command('worker')
    .description('build partitions of every BUILDING release (or GENFILL_RELEASE) until SIGTERM; run N of them')
    .option('--concurrency <n>', 'partitions built at once by this process', positive, 1)
    .option('--lock-duration <ms>', 'BullMQ lock and registry lease length', positive, 60_000)
    .option('--release <ids>', 'serve only these releases (comma-separated); overrides GENFILL_RELEASE')
    .option('--throttle-interval <ms>', 'time between throttle decisions; the controller lease is three of them', positive, DEFAULT_INTERVAL_MS)
    .option('--no-throttle', 'run no throttle controller and meter no admission in this process')
    .action((opts: { concurrency: number; lockDuration: number; release?: string; throttleInterval: number; throttle: boolean }) =>
      run(async (ctx) => {
        const cfg = ctx.config;
        const sli = opts.throttle ? prometheusSli(cfg) : undefined;
        const log = createLogger('worker', cfg.GENFILL_LOG_LEVEL);
        // Claims, builds, lease renewals and the throttle share it; fleet timeouts (a stalled
        // worker must not hold the release row lock for long).
        const db = await ctx.db({ fleet: true, name: 'genfill-worker', max: opts.concurrency + 4 });
        const connection = createRedis(cfg.REDIS_URL);
        // An evicting Redis loses jobs silently; the registry recovers them, but say so now.
        void warnIfEvicting(connection, log).catch(() => undefined);
        const registry = createMetricsRegistry('worker');
        const releases = opts.release ? opts.release.split(',').map((s) => s.trim()).filter(Boolean) : cfg.GENFILL_RELEASE;
        const throttle = opts.throttle
          ? createThrottle({
              db,
              redis: connection,
              prefix: cfg.GENFILL_QUEUE_PREFIX,
              log,
              worker: `${hostname()}:${process.pid}`,
              databaseUrl: cfg.DATABASE_URL,
              replicaUrls: cfg.GENFILL_REPLICA_URLS,
              canarySql: cfg.GENFILL_CANARY_SQL,
              canaryEveryMs: cfg.GENFILL_CANARY_EVERY_MS,
              prometheus: sli,
              intervalMs: opts.throttleInterval,
              metrics: throttleMetrics(registry),
            })
          : undefined;
        const service = await startWorkerService({
          db,
          connection,
          prefix: cfg.GENFILL_QUEUE_PREFIX,
          log,
          releases,
          concurrency: opts.concurrency,
          lockDurationMs: opts.lockDuration,
          metrics: workerMetrics(registry),
          throttle,
        });
        // A metrics port already taken is an error at start, not a worker without /metrics.
        const metricsServer = cfg.GENFILL_METRICS_PORT === undefined
          ? undefined
          : await serveMetrics(registry, { port: cfg.GENFILL_METRICS_PORT }).catch(async (err: unknown) => {
              await service.close();
              connection.disconnect();
              throw err;
            });
        log.info({ worker: service.id, serving: service.serving(), metricsPort: metricsServer?.port ?? null }, 'worker started');
        await new Promise<void>((resolve) => {
          const stop = (signal: string) => {
            log.info({ signal }, 'stopping: no new claims; in-flight builds finish');
            service
              .close()
              .catch((err) => log.error({ err: (err as Error).message }, 'error while closing'))
              .finally(() => resolve());
          };
          process.once('SIGTERM', () => stop('SIGTERM'));
          process.once('SIGINT', () => stop('SIGINT'));
        });
        await connection.quit().catch(() => undefined);
        await metricsServer?.close();
        log.info('worker stopped');
      }),
    );
}
