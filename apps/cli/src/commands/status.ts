import type { Command } from 'commander';
import { releaseList, releaseStatus, type ReleaseStatus } from '@genfill/registry';
import type { Context } from '../context.ts';
import { json } from '../io.ts';

export function describeStatus(s: ReleaseStatus): string {
  const paused = [s.paused.operator && 'operator', s.paused.throttle && 'throttle'].filter(Boolean);
  const lines = [
    `release     ${s.release}`,
    `state       ${s.state} since ${s.stateChangedAt}${paused.length ? `  PAUSED (${paused.join(', ')})` : ''}`,
    `dataset     ${s.dataset}: generation ${s.generation} (expected active ${s.expectedActive ?? 'none — first generation'})`,
    `range       [${s.range.from}, ${s.range.to}) ${s.range.timezone} every ${s.range.every}`,
    `digest      ${s.digest}`,
    `submitted   by ${s.submittedBy} at ${s.submittedAt}; owner ${s.owner}; approvals required ${s.approvalsRequired}`,
  ];
  if (s.manifest) {
    const c = s.manifest.coverage;
    const counts = Object.entries(s.counts).map(([k, v]) => `${k} ${v}`).join(', ');
    lines.push(
      `partitions  ${s.manifest.partitions} (${counts})`,
      `coverage    ${c.contiguous && c.exactEnds && c.gaps === 0 && c.overlaps === 0 ? 'proved' : 'FAILED'} — boundaries ${s.manifest.boundariesSha256}`,
    );
    for (const d of s.dependencies) lines.push(`dependency  ${d.relation}: ${d.row_count} rows, hash ${d.content_hash}`);
    const failed = s.partitions.filter((p) => p.status === 'FAILED');
    for (const p of failed.slice(0, 20)) lines.push(`  FAILED ${p.id} attempt ${p.attempt}: ${p.reason}`);
    if (failed.length > 20) lines.push(`  … and ${failed.length - 20} more failed partitions (see --json)`);
  } else {
    lines.push('partitions  not planned yet: genfill plan ' + s.release);
  }
  lines.push('history');
  for (const h of s.history) {
    lines.push(`  ${h.at}  ${h.action.padEnd(8)} ${h.from ?? ''}${h.from || h.to ? ' → ' : ''}${h.to ?? ''}  by ${h.principal}${h.reason ? ` (${h.reason})` : ''}`);
  }
  return lines.join('\n');
}

export function register(program: Command, run: (fn: (ctx: Context) => Promise<void>) => Promise<void>): void {
  program
    .command('status [release]')
    .description('show a release: state, pause flags, manifest, partitions, history (all releases when none is named)')
    .option('--json', 'print the full status as JSON (every partition included)')
    .action((release: string | undefined, opts: { json?: boolean }) =>
      run(async (ctx) => {
        const db = await ctx.db();
        if (!release) {
          const list = await releaseList(db);
          if (opts.json) return json(ctx.io, list);
          if (list.length === 0) return ctx.io.out('no releases: submit one with `genfill release submit <file>`');
          for (const r of list) ctx.io.out(`${r.release.padEnd(32)} ${r.state.padEnd(24)} ${r.dataset}/${r.generation}  [${r.range.from}, ${r.range.to})`);
          return;
        }
        const status = await releaseStatus(db, release);
        if (opts.json) return json(ctx.io, status);
        ctx.io.out(describeStatus(status));
      }),
    );
}
