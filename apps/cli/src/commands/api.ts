// `genfill api`: the HTTP API in the foreground (apps/api runs the same server) until
// SIGTERM/SIGINT, which stop accepting requests and close the connections.
import { InvalidArgumentError, type Command } from 'commander';
import { startApi } from '@genfill/api';
import { createLogger } from '@genfill/observability';
import type { Context } from '../context.ts';

function parsePort(value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || n > 65535) throw new InvalidArgumentError('expected a port number (0 picks a free one)');
  return n;
}

export function register(program: Command, run: (fn: (ctx: Context) => Promise<void>) => Promise<void>): void {
  program
    .command('api')
    .description(
      'the HTTP API: /healthz, /metrics, /releases (status, pause, resume, cancel) and Bull Board at /admin/queues, ' +
        'behind GENFILL_API_TOKENS (bearer tokens, or a login cookie for browsers); SIGTERM stops it',
    )
    .option('--port <n>', 'listen here instead of GENFILL_API_PORT (default 3000)', parsePort)
    .action((opts: { port?: number }) =>
      run(async (ctx) => {
        const log = createLogger('api', ctx.config.GENFILL_LOG_LEVEL);
        const server = await startApi({ config: ctx.config, log, port: opts.port });
        ctx.io.out(`genfill api listening on http://localhost:${server.port} — Bull Board at /admin/queues (log in at /login)`);
        await new Promise<void>((resolve) => {
          const stop = (signal: string) => {
            log.info({ signal }, 'stopping');
            resolve();
          };
          process.once('SIGTERM', () => stop('SIGTERM'));
          process.once('SIGINT', () => stop('SIGINT'));
        });
        await server.close();
        log.info('api stopped');
      }),
    );
}
