// `genfill diff <release>`: old (the release's expected active generation) against new (its
// candidate), key by key, in one snapshot (docs/reads.md "Diff"). Read-only. Exit 3 for a
// release with no expected active generation, or a generation that is gone.
import type { Command } from 'commander';
import { DIFF_SAMPLE, diffRelease, type DiffResult, type DiffSampleEntry, parseSample } from '@genfill/reads';
import type { Context } from '../context.ts';
import { json } from '../io.ts';
import { cell } from './read.ts';

const count = (n: number) => n.toLocaleString('en-US');

/** One key's rows side by side, a `*` before each changed column. */
function sideBySide(e: DiffSampleEntry, oldName: string, newName: string): string[] {
  const where = e.old === null ? `only in ${newName}` : e.new === null ? `only in ${oldName}` : `changed: ${e.changed.join(', ')}`;
  const lines = [`key ${JSON.stringify(e.key)}  ${where}`];
  const names = Object.keys(e.old ?? e.new ?? {});
  const side = (row: Record<string, unknown> | null, n: string) => (row === null ? '—' : cell(row[n]));
  const nameWidth = Math.max(6, ...names.map((n) => n.length));
  const oldWidth = Math.max(oldName.length, ...names.map((n) => side(e.old, n).length));
  lines.push(`    ${'column'.padEnd(nameWidth)}  ${oldName.padEnd(oldWidth)}  ${newName}`);
  for (const n of names) {
    const mark = e.changed.includes(n) ? '*' : ' ';
    lines.push(`  ${mark} ${n.padEnd(nameWidth)}  ${side(e.old, n).padEnd(oldWidth)}  ${side(e.new, n)}`.trimEnd());
  }
  return lines;
}

export function describeDiff(d: DiffResult): string {
  const c = d.counts;
  const differing = c.changed + c.onlyInOld + c.onlyInNew;
  const lines = [
    `diff of release ${d.release}, dataset ${d.dataset}: old ${d.old} → new ${d.new}`,
    `keys        ${count(c.changed)} changed, ${count(c.onlyInOld)} only in ${d.old}, ${count(c.onlyInNew)} only in ${d.new}, ${count(c.unchanged)} unchanged`,
  ];
  const cols = Object.entries(d.columns);
  lines.push(cols.length === 0 ? 'columns     (no non-key columns)' : `columns     ${cols.map(([n, k]) => `${n} ${count(k)}`).join(', ')} (rows changed per column)`);
  if (differing === 0) {
    lines.push('no key differs: the two generations hold the same rows');
  } else if (d.sample.length > 0) {
    lines.push(`sample      ${d.sample.length} of ${count(differing)} differing keys, in key order`);
    for (const e of d.sample) lines.push('', ...sideBySide(e, d.old, d.new));
  }
  return lines.join('\n');
}

export function register(program: Command, run: (fn: (ctx: Context) => Promise<void>) => Promise<void>): void {
  program
    .command('diff <release>')
    .description(
      'compare the old generation (the release\'s expected active one) with the new (its candidate) key by key, in one snapshot: ' +
        'keys changed, only in old, only in new, rows changed per column, and a sample of keys with both rows side by side. ' +
        'Tombstones count as absent. Read-only. Exit 3 for a release without an expected active generation or a generation that is gone',
    )
    .option('--sample <n>', `how many differing keys to show, 0 to ${DIFF_SAMPLE.max} (default ${DIFF_SAMPLE.default})`)
    .option('--json', 'print {release, old, new, counts, columns, sample: [{key, old, new, changed}]}')
    .action((release: string, opts: { sample?: string; json?: boolean }) =>
      run(async (ctx) => {
        const sample = parseSample(opts.sample);
        const d = await diffRelease(await ctx.db(), release, { sample });
        if (opts.json) return json(ctx.io, d);
        ctx.io.out(describeDiff(d));
      }),
    );
}
