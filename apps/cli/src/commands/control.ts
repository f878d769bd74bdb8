// `genfill pause|resume|cancel <release>`: the registry first (what workers obey), then the
// BullMQ queue as a best-effort mirror.
import type { Command } from 'commander';
import { cancelRelease, setOperatorPause } from '@genfill/planner';
import type { Context } from '../context.ts';
import { bestEffort } from '../dispatch.ts';
import { json } from '../io.ts';
import { mirrorPause, removeReleaseQueue } from '@genfill/queue';

type Run = (fn: (ctx: Context) => Promise<void>) => Promise<void>;

function registerPause(program: Command, run: Run, paused: boolean): void {
  const verb = paused ? 'pause' : 'resume';
  program
    .command(`${verb} <release>`)
    .description(
      paused
        ? 'set the operator pause: once this returns no partition starts (running ones finish); the BullMQ queue is paused to mirror it'
        : 'clear the operator pause and resume the BullMQ queue (the throttle may still hold the release)',
    )
    .option('--reason <text>', 'why, recorded in the release log with your login')
    .option('--json', 'print the result as JSON')
    .action((release: string, opts: { reason?: string; json?: boolean }) =>
      run(async (ctx) => {
        const result = await setOperatorPause(await ctx.db(), release, paused, opts.reason ?? null);
        // Re-applied on a no-op too: it repairs a queue whose pause drifted from the flag.
        const mirror = await bestEffort(
          ctx,
          `the registry flag is ${paused ? 'set' : 'cleared'} and workers obey it; the planner (or the next \`genfill plan ${release}\`) re-applies the queue ${verb}`,
          (d) => mirrorPause(d, release, paused),
        );
        if (opts.json) return json(ctx.io, { ...result, action: verb, queue: mirror.value, warning: mirror.warning });
        if (!result.changed) {
          ctx.io.out(`already ${paused ? 'paused' : 'running'}: ${release} (${result.state}) — nothing changed`);
        } else if (paused) {
          ctx.io.out(`paused: ${release} (${result.state}) — no partition starts from now on; running ones finish`);
        } else {
          ctx.io.out(`resumed: ${release} (${result.state}) — partitions start again`);
        }
        if (mirror.value) ctx.io.out(`  queue ${mirror.value.queue} ${mirror.value.paused ? 'paused' : 'running'}${mirror.value.changed ? '' : ' (already)'}`);
      }),
    );
}

export function register(program: Command, run: Run): void {
  registerPause(program, run, true);
  registerPause(program, run, false);
  program
    .command('cancel <release>')
    .description('move an open release to CANCELLED for good: claims stop, its queue and jobs are removed (exit 3 if it is not open)')
    .option('--reason <text>', 'why, recorded in the release log with your login')
    .option('--json', 'print the result as JSON')
    .action((release: string, opts: { reason?: string; json?: boolean }) =>
      run(async (ctx) => {
        const result = await cancelRelease(await ctx.db(), release, opts.reason ?? null);
        const removal = await bestEffort(
          ctx,
          `the release is CANCELLED and every claim refuses its jobs; remove the queue later with redis-cli or Bull Board`,
          (d) => removeReleaseQueue(d, release),
        );
        if (opts.json) return json(ctx.io, { ...result, queue: removal.value, warning: removal.warning });
        ctx.io.out(`cancelled: ${release} (was ${result.from}) — no partition is claimed from now on`);
        if (removal.value) ctx.io.out(`  queue ${removal.value.queue} removed with ${removal.value.dropped} job${removal.value.dropped === 1 ? '' : 's'}`);
      }),
    );
}
