// The projector service's entry point (one Deployment, one or more replicas: each dataset has
// one lease holder, the others wait): the live writer of every dataset with an active
// generation (@genfill/projector) and, beside it, the switch (@genfill/switch): the seal, unseal,
// catch-up, cutover and rollback requests, and the catch-up rounds of built candidates.
// SIGTERM lets the batch in flight finish, releases the leases and exits 0.
//   node --import tsx apps/projector/src/main.ts [--dataset a,b] [--poll 100] [--max-batch 50000] [--lease 10000] [--once [--json]]
//   genfill projector …   (the same service)
import { PROJECTOR_DEFAULTS, projectDataset, projectableDatasets, runProjectorService } from '@genfill/projector';
import { defineService, flag, runIfMain } from '@genfill/service';
import { switchExtension, type SwitchServiceOptions } from '@genfill/switch';

/** The projector service; tests pass a switch option (a crash hook at one step of a cutover). */
export const projectorService = (switchOptions: SwitchServiceOptions = {}) => defineService({
  name: 'projector',
  summary:
    'the live writer: for every dataset with an active generation (or those in --dataset), hold its lease and apply the change ' +
    'log to it in fenced batches; run catch-up rounds of built candidates; execute seal, unseal and catchup requests; SIGTERM lets ' +
    'the batch in flight finish',
  flags: {
    dataset: flag.list('serve only these datasets', 'names'),
    poll: flag.duration('time between empty batches', PROJECTOR_DEFAULTS.pollMs, 'ms'),
    maxBatch: flag.count('events per batch before it takes a prefix snapshot', PROJECTOR_DEFAULTS.maxBatchEvents, 'events'),
    lease: flag.duration('the dataset lease: a killed holder is replaced within about this long', PROJECTOR_DEFAULTS.leaseMs, 'ms'),
    once: flag.boolean('apply what is waiting for each dataset, print the totals, and exit'),
    json: flag.boolean('with --once: print the totals as JSON'),
  },
  // A batch per dataset at a time, catch-up rounds and requests beside it, one for /readyz.
  pool: () => ({ max: 6, fleet: true }),
  async run({ args, config, log, db, metrics, signal, out }) {
    const o = { db, log, pollMs: args.poll, maxBatchEvents: args.maxBatch, leaseMs: args.lease };
    if (args.once) {
      const totals: Record<string, unknown> = {};
      for (const dataset of await projectableDatasets(db, args.dataset)) {
        const t = await projectDataset(dataset, { ...o, untilIdle: true, signal });
        totals[dataset] = { batches: t.batches, events: t.events, applied: t.applied, fenced: t.fenced, last: t.last?.kind ?? null };
      }
      out(args.json ? JSON.stringify(totals, null, 2) : Object.entries(totals).map(([d, t]) => `${d}: ${JSON.stringify(t)}`).join('\n'));
      return;
    }
    await runProjectorService({ ...o, config, datasets: args.dataset, registry: metrics, metricsServed: true, signal, extension: switchExtension(switchOptions) });
  },
});

export const projector = projectorService();

export const start = (argv?: string[]) => projector.main(argv);

await runIfMain(import.meta.url, projector);
