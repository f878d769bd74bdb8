import type { Command } from 'commander';
import { Redis } from 'ioredis';
import { startWorkerService } from '@genfill/build';
import { createLogger } from '@genfill/observability';
import type { Context } from '../context.ts';

const positive = (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`expected a positive integer, got ${v}`);
  return n;
};

export function register(program: Command, run: (fn: (ctx: Context) => Promise<void>) => Promise<void>): void {
  program
    .command('worker')
    .description('build partitions of every BUILDING release (or GENFILL_RELEASE) until SIGTERM; run N of them')
    .option('--concurrency <n>', 'partitions built at once by this process', positive, 1)
    .option('--lock-duration <ms>', 'BullMQ lock and registry lease length', positive, 60_000)
    .option('--release <ids>', 'serve only these releases (comma-separated); overrides GENFILL_RELEASE')
    .action((opts: { concurrency: number; lockDuration: number; release?: string }) =>
      run(async (ctx) => {
        const cfg = ctx.config;
        const log = createLogger('worker', cfg.GENFILL_LOG_LEVEL);
        const db = await ctx.db();
        const connection = new Redis(cfg.REDIS_URL, { maxRetriesPerRequest: null });
        const releases = opts.release ? opts.release.split(',').map((s) => s.trim()).filter(Boolean) : cfg.GENFILL_RELEASE;
        const service = await startWorkerService({
          db,
          connection,
          prefix: cfg.GENFILL_QUEUE_PREFIX,
          log,
          releases,
          concurrency: opts.concurrency,
          lockDurationMs: opts.lockDuration,
        });
        log.info({ worker: service.id, serving: service.serving() }, 'worker started');
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
        log.info('worker stopped');
      }),
    );
}
