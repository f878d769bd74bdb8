// `genfill reconciler`: the reconciler service in the foreground, started like the planner
// (`genfill planner`): every --interval seconds it reconciles each BUILT release once; its
// verdicts and findings go to the registry, no file is written here. SIGTERM/SIGINT stop it
// after the reconciliation in progress (exit 0).
import type { Command } from 'commander';
import { createLogger } from '@genfill/observability';
import { stopOnSignals } from '@genfill/planner';
import { runReconcilerService, type ReconcilerRoundResult } from '@genfill/reconcile';
import type { Context } from '../context.ts';
import { json } from '../io.ts';
import { parseSeconds } from './planner.ts';

function describeRound(r: ReconcilerRoundResult): string {
  const n = r.reconciled.length + r.failed.length;
  const lines = [`reconciler round at ${r.at}: ${n} BUILT release${n === 1 ? '' : 's'}`];
  for (const x of r.reconciled) {
    lines.push(`  ${x.release}  ${x.from} → ${x.state}: reconciliation #${x.id}, ${x.findings.count} finding${x.findings.count === 1 ? '' : 's'}`);
  }
  for (const x of r.failed) lines.push(`  ${x.release}  not reconciled: ${x.error}`);
  return lines.join('\n');
}

export function register(program: Command, run: (fn: (ctx: Context) => Promise<void>) => Promise<void>): void {
  program
    .command('reconciler')
    .description(
      'the reconciler service: every --interval seconds, reconcile each BUILT release once (BUILT → RECONCILED or ' +
        'RECONCILIATION_REQUIRED), storing every verdict and finding in the registry; SIGTERM stops it after the reconciliation in progress',
    )
    .option('--interval <seconds>', 'time between rounds', parseSeconds, 10)
    .option('--once', 'run one round, print it, and exit')
    .option('--json', 'with --once: print the round as JSON')
    .action((opts: { interval: number; once?: boolean; json?: boolean }) =>
      run(async (ctx) => {
        const db = await ctx.db();
        const log = createLogger('reconciler', ctx.config.GENFILL_LOG_LEVEL);
        const controller = new AbortController();
        const unhook = stopOnSignals(controller, log);
        try {
          const result = await runReconcilerService({
            config: ctx.config,
            log,
            intervalSeconds: opts.interval,
            once: opts.once ?? false,
            signal: controller.signal,
            db,
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
