// The planner service's entry point (one replica is enough; two are harmless): every
// --interval, move SNAPSHOT_PINNED releases to BUILDING and enqueue the unfinished
// partitions of BUILDING ones, re-applying the operator pause; between rounds it executes the
// people's plan and repair requests. SIGTERM stops it after the round (exit 0).
//   node --import tsx apps/planner/src/main.ts [--interval <duration>] [--once [--json]]
//   genfill planner …   (the same service)
import { repairRequest } from '@genfill/builder';
import { runPlannerService, type RoundResult } from '@genfill/planner';
import { defineService, flag, runIfMain } from '@genfill/service';

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

export const planner = defineService({
  name: 'planner',
  summary:
    'the planner service: every --interval, move SNAPSHOT_PINNED releases to BUILDING and enqueue the unfinished ' +
    'partitions of BUILDING ones (all, or those in GENFILL_RELEASE), re-applying the operator pause; SIGTERM stops it after the round',
  flags: {
    interval: flag.duration('time between rounds', 10_000, 's'),
    once: flag.boolean('run one round, print it, and exit'),
    json: flag.boolean('with --once: print the round as JSON'),
  },
  pool: () => ({ max: 4, fleet: true }),
  async run({ args, config, log, db, metrics, signal, out }) {
    const result = await runPlannerService({
      config,
      log,
      db,
      registry: metrics,
      signal,
      intervalSeconds: args.interval / 1000,
      once: args.once,
      requestHandlers: { repair: repairRequest },
    });
    if (!args.once || !result.last) return;
    out(args.json ? JSON.stringify(result.last, null, 2) : describeRound(result.last));
  },
});

export const start = (argv?: string[]) => planner.main(argv);

await runIfMain(import.meta.url, planner);
