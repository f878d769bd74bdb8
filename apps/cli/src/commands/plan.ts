import type { Command } from 'commander';
import type { PlanDispatchResult, PlanResult } from '@genfill/planner';
import type { Context } from '../context.ts';
import { planWithDispatch } from '../dispatch.ts';
import { json } from '../io.ts';

const count = (n: number) => n.toLocaleString('en-US');

function describeDispatch(r: PlanDispatchResult): string[] {
  const lines: string[] = [];
  const b = r.build;
  if (b.started) lines.push(`  building    SNAPSHOT_PINNED → BUILDING; estimated ${count(b.estimatedRows ?? 0)} source rows`);
  else if (b.estimatedRows !== null) lines.push(`  estimated   ${count(b.estimatedRows)} source rows`);
  if (!r.dispatch) {
    lines.push(`  dispatch    ${r.note ?? 'nothing to enqueue'}`);
    return lines;
  }
  const e = r.dispatch.enqueue;
  const added =
    e.added === 0 && e.unfinished > 0
      ? `nothing new: the ${count(e.unfinished)} unfinished partition${e.unfinished === 1 ? '' : 's'} already have jobs in ${r.dispatch.queue}`
      : `${count(e.added)} job${e.added === 1 ? '' : 's'} added to ${r.dispatch.queue}` +
        (e.addedPartitions > e.added ? ` (${count(e.addedPartitions)} partitions in units of up to partition.batchRows rows)` : '') +
        `; ${count(e.unfinished)} partition${e.unfinished === 1 ? '' : 's'} unfinished`;
  lines.push(
    `  enqueued    ${added}` +
      (e.requeued > 0 ? `, ${count(e.requeued)} re-enqueued under a new epoch (${e.requeuedPartitions.slice(0, 5).join(', ')}${e.requeuedPartitions.length > 5 ? ', …' : ''})` : '') +
      (e.lost > 0 ? `, ${count(e.lost)} requeue${e.lost === 1 ? '' : 's'} lost to a concurrent change` : ''),
  );
  lines.push(`  queue       ${r.dispatch.queuePaused ? 'PAUSED (mirrors the operator flag: `genfill resume` to start)' : 'running'}`);
  if (r.note) lines.push(`  note        ${r.note}`);
  return lines;
}

export function describePlan(r: PlanResult | PlanDispatchResult): string {
  const c = r.coverage;
  const lines = [
    `${r.status === 'planned' ? 'planned' : 'already planned'}: ${r.release} is ${r.state}`,
    `  partitions  ${r.partitions} (${r.first?.id} … ${r.last?.id})${r.carry ? `, of which ${r.carry} carry chunks outside the range (copied from the active generation)` : ''}`,
    `  range       [${c.from}, ${c.to}) ${c.timezone} every ${c.every}`,
    `  coverage    ${c.contiguous && c.exactEnds && c.gaps === 0 && c.overlaps === 0 ? 'proved' : 'FAILED'}: contiguous=${c.contiguous} exactEnds=${c.exactEnds} gaps=${c.gaps} overlaps=${c.overlaps}` +
      (c.rangeUnion ? ` union=${c.rangeUnion.join(' ')}` : ''),
    `  boundaries  ${c.boundariesSha256}`,
  ];
  const carry = (c as { carry?: { contiguous: boolean; unboundedEnds: boolean; touchesRange: boolean } }).carry;
  if (carry) lines.push(`  carry       ${carry.contiguous && carry.unboundedEnds && carry.touchesRange ? 'proved' : 'FAILED'}: everything before ${c.from} and from ${c.to} on`);
  if (r.floor) lines.push(`  floor       ${r.floor} (every watermark contains it; the log keeps what is above it until the release ends)`);
  for (const d of r.dependencies) lines.push(`  dependency  ${d.relation}: ${d.row_count} rows, content hash ${d.content_hash}`);
  if ('build' in r) lines.push(...describeDispatch(r));
  return lines.join('\n');
}

export function register(program: Command, run: (fn: (ctx: Context) => Promise<void>) => Promise<void>): void {
  program
    .command('plan <release>')
    .description(
      'pin the manifest (DRAFT → SNAPSHOT_PINNED), estimate rows, start the build (→ BUILDING) and enqueue every unfinished partition; ' +
        're-enqueues FAILED partitions under a new epoch; safe to run again at any time',
    )
    .option('--json', 'print the result as JSON')
    .action((release: string, opts: { json?: boolean }) =>
      run(async (ctx) => {
        const result = await planWithDispatch(ctx, release);
        if (opts.json) return json(ctx.io, result);
        ctx.io.out(describePlan(result));
      }),
    );
}
