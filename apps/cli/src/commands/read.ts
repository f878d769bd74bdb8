// `genfill read <dataset>`: a pinned read (SPEC invariant 12, docs/reads.md). One page of one
// generation — the active one read once now, the one named with --generation (a candidate
// too), or the one the --cursor carries — in key order, with the cursor of the next page.
// Exit 2 bad input (nothing written), 3 a generation that is gone (the reason says why).
import type { Command } from 'commander';
import { newHolder, parseLimit, readPage, READ_LIMITS, type ReadPage } from '@genfill/reads';
import type { Context } from '../context.ts';
import { json } from '../io.ts';

/** A value as a table cell: text as is, NULL spelled out, anything else as JSON. */
export function cell(v: unknown): string {
  if (v === null || v === undefined) return 'NULL';
  return typeof v === 'string' ? v : JSON.stringify(v);
}

/** Rows as an aligned text table under their column names. */
export function table(rows: Record<string, unknown>[]): string {
  const names = Object.keys(rows[0] ?? {});
  const cells = rows.map((r) => names.map((n) => cell(r[n]).replace(/\n/g, '\\n')));
  const width = names.map((n, i) => Math.max(n.length, ...cells.map((c) => c[i]!.length)));
  const line = (values: string[]) => values.map((v, i) => v.padEnd(width[i]!)).join(' | ').trimEnd();
  return [line(names), width.map((w) => '-'.repeat(w)).join('-+-'), ...cells.map(line)].join('\n');
}

function describe(p: ReadPage): string {
  const lines = p.rows.length > 0 ? [table(p.rows)] : [];
  lines.push(`(${p.rows.length} row${p.rows.length === 1 ? '' : 's'} of ${p.dataset}, generation ${p.generation})`);
  lines.push(p.nextCursor ? `next cursor: ${p.nextCursor}` : 'no more rows');
  return lines.join('\n');
}

export function register(program: Command, run: (fn: (ctx: Context) => Promise<void>) => Promise<void>): void {
  program
    .command('read <dataset>')
    .description(
      'read rows of one generation of a dataset, pinned: the active generation (read once, when the read starts) or --generation, ' +
        'in key order, tombstones left out; the next cursor carries the generation, so later pages read the same one after a cutover. ' +
        'Each page takes or extends a reader lease (GENFILL_READER_LEASE_TTL, default 5m). ' +
        'Exit 2 bad input (nothing written), 3 a retired, abandoned or dropped generation',
    )
    .option('--generation <g>', 'read this generation instead of the active one (a candidate is readable by name)')
    .option('--key <json>', 'read the one row of this key: a JSON object of the key columns, e.g. \'{"order_id": 42}\'')
    .option('--cursor <cursor>', 'continue after the page that printed this cursor (same generation, same lease)')
    .option('--limit <n>', `rows per page, 1 to ${READ_LIMITS.max} (default ${READ_LIMITS.default})`)
    .option('--holder <id>', 'name the reader lease (default: the cursor\'s, or a new cli:<host>:<random>)')
    .option('--json', 'print {dataset, generation, rows, nextCursor}')
    .addHelpText(
      'after',
      '\nValues print as JSON gives them: bigint and numeric as exact strings, timestamps in ISO 8601.\n' +
        'Example: genfill read orders_enriched --limit 2 --json; then --cursor <nextCursor> for the next page.',
    )
    .action((dataset: string, opts: { generation?: string; key?: string; cursor?: string; limit?: string; holder?: string; json?: boolean }) =>
      run(async (ctx) => {
        parseLimit(opts.limit); // bad input is refused before connecting
        const page = await readPage(await ctx.db(), {
          dataset,
          generation: opts.generation ?? null,
          key: opts.key ?? null,
          cursor: opts.cursor ?? null,
          limit: opts.limit ?? null,
          holder: opts.holder ?? (opts.cursor ? null : newHolder('cli')),
          leaseTtlMs: ctx.config.GENFILL_READER_LEASE_TTL * 1000,
        });
        if (opts.json) return json(ctx.io, { dataset: page.dataset, generation: page.generation, rows: page.rows, nextCursor: page.nextCursor });
        ctx.io.out(describe(page));
      }),
    );
}
