// The reconciler service's entry point (one replica): every --interval it reconciles
// each BUILT release once (BUILT → RECONCILED or RECONCILIATION_REQUIRED) and executes the
// people's reconcile requests; verdicts and findings go to the registry, nothing to the pod's
// disk. It checks every live dataset for drift on GENFILL_DRIFT_CHECK_EVERY (at once after a
// cutover). SIGTERM stops it after the reconciliation in progress (exit 0).
//   node --import tsx apps/reconciler/src/main.ts [--interval <duration>] [--once [--json]]
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
  const h = r.housekeeping;
  if (h) {
    for (const g of h.retention?.retired ?? []) lines.push(`  retired ${g.dataset}/${g.generation}${g.releases.length ? ` (releases ${g.releases.join(', ')} RETIRED)` : ''}: ${g.reason}`);
    for (const g of h.retention?.dropped ?? []) lines.push(`  dropped ${g.table}${g.finalized ? ' (finalized an interrupted detach)' : ''}`);
    for (const g of h.retention?.pending ?? []) lines.push(`  kept the table ${g.table} for now: ${g.why}`);
    if (h.prune) {
      lines.push(`  change log horizon ${h.prune.current.horizon}: ${h.prune.dropped.length} partitions dropped, ${h.prune.defaultRows} DEFAULT rows and ${h.prune.tombstones} tombstones deleted`);
      for (const w of h.prune.waiting) lines.push(`  ${w.partition} waits: ${w.why}`);
      if (h.prune.refused) lines.push(`  pruning refused: ${h.prune.refused}`);
    }
    for (const c of h.cleanup?.cleaned ?? []) lines.push(`  cleaned up ${c.release} (${c.state}): queue ${c.queue} with ${c.jobs} jobs, ${c.keys} more Redis keys`);
    if (h.cleanup?.skipped) lines.push(`  cleanup skipped: ${h.cleanup.skipped}`);
    for (const e of h.errors) lines.push(`  ${e.step} failed: ${e.error}`);
  }
  for (const d of r.drift?.checked ?? []) {
    lines.push(
      `  drift check #${d.check} of ${d.dataset}/${d.generation} (${d.reason}): ${d.verified ? 'no drift' : `DRIFTED — ${d.missing} rows missing or different, ${d.extra} extra, ${d.driftedKeys} keys`}; ${d.rowsChecked} rows checked in ${d.ms} ms`,
    );
    for (const k of d.sample) lines.push(`    ${JSON.stringify(k)}`);
  }
  for (const d of r.drift?.failed ?? []) lines.push(`  drift check of ${d.dataset} did not complete: ${d.error}`);
  return lines.join('\n');
}

export const reconciler = defineService({
  name: 'reconciler',
  summary:
    'the reconciler service: every --interval, reconcile each BUILT release once (BUILT → RECONCILED or ' +
    'RECONCILIATION_REQUIRED), storing every verdict and finding in the registry, then retire old generations past their ' +
    'rollback window and reader leases, prune the change log below its horizon and clean up the queues of finished releases; ' +
    'check every live dataset against its transform map every GENFILL_DRIFT_CHECK_EVERY (default 1h; a new active generation at once); ' +
    'SIGTERM stops it after the reconciliation in progress',
  flags: {
    interval: flag.duration('time between rounds', 10_000, 's'),
    once: flag.boolean('run one round, print it, and exit'),
    json: flag.boolean('with --once: print the round as JSON'),
  },
  // A reconciliation reads on two connections side by side; one for the round, one for /readyz.
  pool: () => ({ max: 4 }),
  async run({ args, config, log, db, metrics, signal, out }) {
    const result = await runReconcilerService({ config, log, db, registry: metrics, signal, intervalSeconds: args.interval / 1000, once: args.once });
    if (!args.once || !result.last) return;
    out(args.json ? JSON.stringify(result.last, null, 2) : describeRound(result.last));
  },
});

export const start = (argv?: string[]) => reconciler.main(argv);

await runIfMain(import.meta.url, reconciler);
