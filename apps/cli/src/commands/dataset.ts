import type { Command } from 'commander';
import { adoptDataset } from '@genfill/planner';
import type { Context } from '../context.ts';
import { json } from '../io.ts';

const list = (v: string) => v.split(',').map((s) => s.trim()).filter(Boolean);

export function register(program: Command, run: (fn: (ctx: Context) => Promise<void>) => Promise<void>): void {
  const dataset = program.command('dataset').description('datasets: the user-facing name, its generations and its source');

  dataset
    .command('adopt <dataset>')
    .description(
      'turn an existing table into the first active generation without copying or changing a row; ' +
        'its name becomes a view of the active generation. Run as the table owner (a member of genfill_owner). Safe to resume',
    )
    .requiredOption('--source <table>', 'the schema-qualified source table the live writer reads')
    .requiredOption('--key <cols>', 'business key columns, comma-separated', list)
    .requiredOption('--time <col>', 'the time column')
    .requiredOption('--table <table>', 'the existing table, schema-qualified (its name stays what users query)')
    .requiredOption('--generation <g>', 'the id of the generation it becomes')
    .requiredOption('--transform <file.sql>', 'the transform that produced the table (recorded in the transform map)')
    .option('--dependency <tables>', 'tables the transform reads besides the source (comma-separated): captured, and a change marks the dataset DEPENDENCY_STALE', list, [])
    .option('--json', 'print the result as JSON')
    .action(
      (name: string, opts: { source: string; key: string[]; time: string; table: string; generation: string; transform: string; dependency: string[]; json?: boolean }) =>
        run(async (ctx) => {
          const result = await adoptDataset(await ctx.db(), {
            dataset: name,
            source: opts.source,
            key: opts.key,
            time: opts.time,
            table: opts.table,
            generation: opts.generation,
            transformFile: opts.transform,
            dependencies: opts.dependency,
          });
          if (opts.json) return json(ctx.io, result);
          ctx.io.out(
            result.status === 'adopted'
              ? `adopted ${opts.table} as generation ${result.generation} of ${result.dataset} (${result.rows} rows); ${opts.table} is now a view of the active generation`
              : `already adopted: ${result.dataset} has active generation ${result.generation} (${result.rows} rows)`,
          );
          ctx.io.out(
            `captured ${result.captured.join(', ')}; the projector (\`genfill projector\`) applies their changes from frontier ${result.frontier}. ` +
              `The adopted rows are unverified until a drift check compares them with the transform.`,
          );
        }),
    );
}
