import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { InvalidInputError } from '@genfill/contracts';
import { partitionsFromFindings, repairRelease } from '@genfill/builder';
import type { Context } from '../context.ts';
import { json } from '../io.ts';

export function register(program: Command, run: (fn: (ctx: Context) => Promise<void>) => Promise<void>): void {
  program
    .command('repair <release>')
    .description('rebuild exactly the named partitions of a RECONCILIATION_REQUIRED release (superseding receipts; history kept), then reconcile again')
    .option('--partition <id...>', 'partition ids to rebuild')
    .option('--findings <file>', 'the NDJSON findings of a reconciliation: rebuild every partition they name')
    .option('--reason <R>', 'a quarantine reason to repair (in-place mode)')
    .option('--json', 'print the result as JSON')
    .action((release: string, opts: { partition?: string[]; findings?: string; reason?: string; json?: boolean }) =>
      run(async (ctx) => {
        if (opts.reason && !opts.partition && !opts.findings) {
          throw new InvalidInputError([{ path: '--reason', message: 'repair by quarantine reason needs the in-place mode, which is not built yet; use --partition or --findings' }]);
        }
        let partitions = opts.partition ?? [];
        if (opts.findings) {
          let text: string;
          try {
            text = readFileSync(opts.findings, 'utf8');
          } catch (err) {
            throw new InvalidInputError([{ path: '--findings', message: `cannot read ${opts.findings}: ${(err as NodeJS.ErrnoException).code}` }]);
          }
          partitions = [...partitions, ...partitionsFromFindings(text, opts.findings)];
        }
        const result = await repairRelease(await ctx.db(), { release, partitions, reason: opts.reason });
        if (opts.json) return json(ctx.io, result);
        for (const r of result.repaired) {
          ctx.io.out(`repaired ${r.partition} (attempt ${r.attempt}): deleted ${r.deleted}, rebuilt ${r.rows} rows, receipt ${r.receipt}`);
        }
        ctx.io.out(`${release} is ${result.state}${result.state === 'BUILT' ? `; next: genfill reconcile ${release}` : ''}`);
      }),
    );
}
