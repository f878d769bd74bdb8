// `genfill planner`: the planner service in the foreground (apps/planner runs the same loop).
import { InvalidArgumentError, type Command } from 'commander';
import { repairRequest } from '@genfill/builder';
import { createLogger } from '@genfill/observability';
import { runPlannerService, stopOnSignals, type RoundResult } from '@genfill/planner';
import type { Context } from '../context.ts';
import { json } from '../io.ts';

export function parseSeconds(value: string): number {
  const n = Number(value);
  if (!/^\d+(\.\d+)?$/.test(value) || !(n > 0)) throw new InvalidArgumentError('expected a positive number of seconds');
  return n;
}

function describeRound(r: RoundResult): string {
  const lines = [`planner round at ${r.at}: ${r.releases.length} release${r.releases.length === 1 ? '' : 's'} to serve${r.redis ? '' : ' (Redis not answering: nothing enqueued)'}`];
  for (const x of r.releases) {
    if (x.error) lines.push(`  ${x.release}  error: ${x.error}`);
    else if (x.added === null) lines.push(`  ${x.release}  ${x.state}${x.started ? ' (started)' : ''}`);
    else {
      lines.push(
        `  ${x.release}  ${x.state}${x.started ? ' (started)' : ''}: ${x.added} added, ${x.requeued} requeued, ` +
          `${x.unfinished} unfinished, queue ${x.queuePaused ? 'paused' : 'running'}`,
      );
    }
  }
  return lines.join('\n');
}

export function register(program: Command, run: (fn: (ctx: Context) => Promise<void>) => Promise<void>): void {
  program
    .command('planner')
    .description(
      'the planner service: every --interval seconds, move SNAPSHOT_PINNED releases to BUILDING and enqueue the unfinished ' +
        'partitions of BUILDING ones (all, or those in GENFILL_RELEASE), re-applying the operator pause; SIGTERM stops it after the round',
    )
    .option('--interval <seconds>', 'time between rounds', parseSeconds, 10)
    .option('--once', 'run one round, print it, and exit')
    .option('--json', 'with --once: print the round as JSON')
    .action((opts: { interval: number; once?: boolean; json?: boolean }) =>
      run(async (ctx) => {
        const db = await ctx.db({ fleet: true, name: 'genfill-planner', max: 3 });
        const log = createLogger('planner', ctx.config.GENFILL_LOG_LEVEL);
        const controller = new AbortController();
        const unhook = stopOnSignals(controller, log);
        try {
          const result = await runPlannerService({
            config: ctx.config,
            log,
            intervalSeconds: opts.interval,
            once: opts.once ?? false,
            signal: controller.signal,
            db,
            requestHandlers: { repair: repairRequest },
          });
          if (!opts.once || !result.last) return;
          if (opts.json) return json(ctx.io, result.last);
          ctx.io.out(describeRound(result.last));
        } finally {
          unhook();
        }
      }),
    );
}
