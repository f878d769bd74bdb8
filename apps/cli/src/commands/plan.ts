import type { Command } from 'commander';
import { planRelease, type PlanResult } from '@genfill/planner';
import type { Context } from '../context.ts';
import { json } from '../io.ts';

export function describePlan(r: PlanResult): string {
  const c = r.coverage;
  const lines = [
    `${r.status === 'planned' ? 'planned' : 'already planned'}: ${r.release} is ${r.state}`,
    `  partitions  ${r.partitions} (${r.first?.id} … ${r.last?.id})`,
    `  range       [${c.from}, ${c.to}) ${c.timezone} every ${c.every}`,
    `  coverage    ${c.contiguous && c.exactEnds && c.gaps === 0 && c.overlaps === 0 ? 'proved' : 'FAILED'}: contiguous=${c.contiguous} exactEnds=${c.exactEnds} gaps=${c.gaps} overlaps=${c.overlaps}` +
      (c.rangeUnion ? ` union=${c.rangeUnion.join(' ')}` : ''),
    `  boundaries  ${c.boundariesSha256}`,
  ];
  for (const d of r.dependencies) lines.push(`  dependency  ${d.relation}: ${d.row_count} rows, content hash ${d.content_hash}`);
  return lines.join('\n');
}

export function register(program: Command, run: (fn: (ctx: Context) => Promise<void>) => Promise<void>): void {
  program
    .command('plan <release>')
    .description('pin dependency hashes and the partition manifest (DRAFT → SNAPSHOT_PINNED); safe to run again at any time')
    .option('--json', 'print the result as JSON')
    .action((release: string, opts: { json?: boolean }) =>
      run(async (ctx) => {
        const result = await planRelease(await ctx.db(), release);
        if (opts.json) return json(ctx.io, result);
        ctx.io.out(describePlan(result));
      }),
    );
}
