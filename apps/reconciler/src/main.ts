// The reconciler service's entry point (one replica): every --interval seconds it reconciles
// each BUILT release once (BUILT → RECONCILED or RECONCILIATION_REQUIRED) and executes the
// people's reconcile requests; verdicts and findings go to the registry, nothing to the pod's
// disk. SIGTERM stops it after the reconciliation in progress (exit 0).
//   node --import tsx apps/reconciler/src/main.ts [--interval <seconds>] [--once [--json]]
//   genfill reconciler …   (the same service)
import { runReconcilerService, type ReconcilerRoundResult } from '@genfill/reconcile';
import { defineService, flag, runIfMain } from '@genfill/service';

function describeRound(r: ReconcilerRoundResult): string {
  const n = r.reconciled.length + r.failed.length;
  const lines = [`reconciler round at ${r.at}: ${n} BUILT release${n === 1 ? '' : 's'}`];
  for (const x of r.reconciled) {
    lines.push(`  ${x.release}  ${x.from} → ${x.state}: reconciliation #${x.id}, ${x.findings.count} finding${x.findings.count === 1 ? '' : 's'}`);
  }
  for (const x of r.failed) lines.push(`  ${x.release}  not reconciled: ${x.error}`);
  return lines.join('\n');
}

export const reconciler = defineService({
  name: 'reconciler',
  summary:
    'the reconciler service: every --interval seconds, reconcile each BUILT release once (BUILT → RECONCILED or ' +
    'RECONCILIATION_REQUIRED), storing every verdict and finding in the registry; SIGTERM stops it after the reconciliation in progress',
  flags: {
    interval: flag.seconds('time between rounds', 10),
    once: flag.boolean('run one round, print it, and exit'),
    json: flag.boolean('with --once: print the round as JSON'),
  },
  // A reconciliation reads on two connections side by side; one for the round, one for /readyz.
  pool: () => ({ max: 4 }),
  async run({ args, config, log, db, metrics, signal, out }) {
    const result = await runReconcilerService({ config, log, db, registry: metrics, signal, intervalSeconds: args.interval, once: args.once });
    if (!args.once || !result.last) return;
    out(args.json ? JSON.stringify(result.last, null, 2) : describeRound(result.last));
  },
});

export const start = (argv?: string[]) => reconciler.main(argv);

await runIfMain(import.meta.url, reconciler);
