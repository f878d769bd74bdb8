// `genfill repair <release>`: rebuild exactly the partitions of a RECONCILIATION_REQUIRED release
// that the operator names — by id, by an NDJSON findings file, or by the findings stored in the
// registry with a reconciliation (`--reconciliation <id>`, readable from any machine).
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { InvalidInputError } from '@genfill/contracts';
import { partitionsFromFindings, repairRelease } from '@genfill/builder';
import { partitionsOfReconciliation } from '@genfill/reconcile';
import type { Context } from '../context.ts';
import { json } from '../io.ts';
import { viaService } from '../requests.ts';

export function register(program: Command, run: (fn: (ctx: Context) => Promise<void>) => Promise<void>): void {
  program
    .command('repair <release>')
    .description(
      'rebuild exactly the named partitions of a RECONCILIATION_REQUIRED release (superseding receipts; history kept), then reconcile again; ' +
        'name them with --partition, with --reconciliation <id> (the findings stored in the registry) or with --findings <file> (an export)',
    )
    .option('--partition <id...>', 'partition ids to rebuild')
    .option('--findings <file>', 'an NDJSON findings file (as `genfill reconcile` exports it): rebuild every partition it names')
    .option(
      '--reconciliation <id>',
      "the findings stored with reconciliation <id> of this release (the id `genfill reconcile` prints, from any machine): rebuild every partition they name",
    )
    .option('--reason <R>', 'a quarantine reason to repair (in-place mode)')
    .option('--json', 'print the result as JSON')
    .action((release: string, opts: { partition?: string[]; findings?: string; reconciliation?: string; reason?: string; json?: boolean }) =>
      run(async (ctx) => {
        if (opts.reason && !opts.partition && !opts.findings && !opts.reconciliation) {
          throw new InvalidInputError([
            { path: '--reason', message: 'repair by quarantine reason needs the in-place mode, which is not built yet; use --partition, --findings or --reconciliation' },
          ]);
        }
        if (opts.findings !== undefined && opts.reconciliation !== undefined) {
          throw new InvalidInputError([{ path: '--reconciliation', message: 'give the findings once: --findings <file> or --reconciliation <id>, not both' }]);
        }
        let partitions = opts.partition ?? [];
        if (opts.reconciliation !== undefined) {
          const stored = await partitionsOfReconciliation(await ctx.db(), release, opts.reconciliation);
          if (stored.partitions.length === 0 && partitions.length === 0) {
            throw new InvalidInputError([
              {
                path: '--reconciliation',
                message: `reconciliation #${stored.reconciliation} of ${release} (${stored.state}, ${stored.findings} findings) names no partition: there is nothing a rebuild can fix`,
              },
            ]);
          }
          partitions = [...partitions, ...stored.partitions];
        }
        if (opts.findings) {
          let text: string;
          try {
            text = readFileSync(opts.findings, 'utf8');
          } catch (err) {
            throw new InvalidInputError([{ path: '--findings', message: `cannot read ${opts.findings}: ${(err as NodeJS.ErrnoException).code}` }]);
          }
          partitions = [...partitions, ...partitionsFromFindings(text, opts.findings)];
        }
        const result = await viaService(ctx, { kind: 'repair', release, args: { partitions, reason: opts.reason } }, (db, args) =>
          repairRelease(db, { release, partitions: args.partitions, reason: args.reason }),
        );
        if (opts.json) return json(ctx.io, result);
        for (const r of result.repaired) {
          ctx.io.out(`repaired ${r.partition} (attempt ${r.attempt}): deleted ${r.deleted}, rebuilt ${r.rows} rows, receipt ${r.receipt}`);
        }
        for (const p of result.byWorker) ctx.io.out(`${p}: a worker took it first and rebuilds it in repair mode`);
        ctx.io.out(
          `${release} is ${result.state}` +
            (result.state === 'BUILT' ? `; next: genfill reconcile ${release}` : `; the marked partitions are rebuilt by workers (genfill status ${release})`),
        );
      }),
    );
}
