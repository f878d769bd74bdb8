import type { Command } from 'commander';
import { migrate, ownerSettingsFromConfig } from '@genfill/registry';
import type { Context } from '../context.ts';
import { json } from '../io.ts';

export function register(program: Command, run: (fn: (ctx: Context) => Promise<void>) => Promise<void>): void {
  program
    .command('migrate')
    .description(
      'install or upgrade the genfill registry schema (idempotent; concurrent runs wait, then do nothing); as the owner, also writes the bounds ' +
        'GENFILL_MAX_PENDING_EVENTS, GENFILL_TOMBSTONE_RETENTION, GENFILL_READER_LEASE_MAX_LIFETIME and GENFILL_MAX_OPEN_REQUESTS that are set into genfill.settings',
    )
    .option('--json', 'print the result as JSON')
    .action((opts: { json?: boolean }) =>
      run(async (ctx) => {
        const result = await migrate(ctx.rawDb(), { settings: ownerSettingsFromConfig(ctx.config) });
        if (opts.json) return json(ctx.io, result);
        ctx.io.out(
          result.applied.length === 0
            ? `registry schema is current (version ${result.version})`
            : `applied ${result.applied.join(', ')}; registry schema at version ${result.version}`,
        );
        if (result.requestKinds.length > 0) ctx.io.out(`request kinds made this genfill's: ${result.requestKinds.join(', ')}`);
        if (result.settings.length > 0) ctx.io.out(`settings written: ${result.settings.join(', ')}`);
      }),
    );
}
