import type { Command } from 'commander';
import { submitRelease, validateRelease } from '@genfill/planner';
import type { Context } from '../context.ts';
import { json } from '../io.ts';

export function register(program: Command, run: (fn: (ctx: Context) => Promise<void>) => Promise<void>): void {
  const release = program.command('release').description('validate and submit dataBackfillRelease.v1 files');

  release
    .command('validate <file>')
    .description('check a release file, its transform and (unless --offline) the database objects it names; writes nothing. Exit 0 valid, 2 invalid')
    .option('--offline', 'skip the checks that need the database (source table, volatility, output columns)')
    .option('--json', 'print the result as JSON')
    .action((file: string, opts: { offline?: boolean; json?: boolean }) =>
      run(async (ctx) => {
        const { loaded, checkedDatabase } = await validateRelease(file, opts.offline ? null : await ctx.db());
        const result = {
          valid: true,
          release: loaded.spec.release,
          digest: loaded.digest,
          transformDigest: loaded.transformDigest,
          partitions: loaded.grid.length,
          checkedDatabase,
        };
        if (opts.json) return json(ctx.io, result);
        ctx.io.out(
          `valid: ${result.release} (${result.partitions} partitions, digest ${result.digest})` +
            (checkedDatabase ? '' : ' — database checks skipped (--offline)'),
        );
      }),
    );

  release
    .command('submit <file>')
    .description('record a release (state DRAFT). Identical content again is a no-op; the same id with other content is refused (exit 3)')
    .option('--json', 'print the result as JSON')
    .action((file: string, opts: { json?: boolean }) =>
      run(async (ctx) => {
        const result = await submitRelease(file, await ctx.db());
        if (opts.json) return json(ctx.io, result);
        ctx.io.out(
          result.status === 'submitted'
            ? `submitted ${result.release} (digest ${result.digest}); next: genfill plan ${result.release}`
            : `unchanged: ${result.release} already exists with this content (digest ${result.digest})`,
        );
      }),
    );
}
